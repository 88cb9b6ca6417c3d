// Kronecker-sparse multiply for small batches (B up to about 32): the weights are the traffic.
//
// K has pattern (a, b, c, d): a*d groups g = i*d + j, each a dense b x c block A_g with
//   rows(g) = { i*b*d + k*d + j : k < b },   cols(g) = { i*c*d + l*d + j : l < c },
//   Y[rows(g)[k], n] = sum_l A_g[k, l] * X[cols(g)[l], n]          (as in ks_matmul.cu).
// At a small batch each weight is used B times, so the product runs at the rate weights
// stream from memory. This kernel streams each weight once, in 16-byte loads, and keeps
// nothing in shared memory.
//
// Rows. Output row r = g*b + k is a dot product of the weight row A_g[k, 0:c] with c
// entries of each batch column. W holds the operator's blocks row-major, A_g[k, l] =
// W[r*c + l] (a transposed view's blocks are copied to this order once: Factor.row_major),
// so a row is c contiguous weights.
//
// Teams. LANES adjacent lanes of a warp (a team) share one row, so a warp works on a row set
// of TEAMS = 32 / LANES rows at once, for NB batch columns: a work item is (row set, batch
// pass), row sets varying fastest (neighbouring warps stream neighbouring weights). Lane t of a team reads the V-element vectors that start at
//   l = (t + LANES*u) * V,   u = 0, 1, ...
// (neighbouring lanes read neighbouring vectors: a team streams whole lines), U of them
// loaded before any is used so that U loads per lane are in flight. Each lane keeps the
// partial sums of NB batch columns; the team adds them with shuffles, and lane n % LANES
// stores column n. A batch wider than NB takes several passes, each reading the weights
// again (from L2 when they fit), which is why it suits small batches.
//
// The loop over a warp's work items is uniform across the warp (every lane reaches the
// shuffles); a team past the last row computes on the last row and does not store.
// X and Y are addressed through element strides (feature f, batch n) as in ks_matmul.cu:
// one kernel for both layouts and any strided operand. Offsets are 64-bit.
#include "ks_scalar.cuh"

namespace ks {

// Weight vectors each lane loads before it multiplies (loads in flight per lane): 4 at one
// batch column, fewer when each weight meets NB columns (whose X loads need registers too).
template <int NB>
struct skinny_unroll { static constexpr int value = NB >= 4 ? 1 : 4 / NB; };
// Threads per block (kscupy/kernels/ks_skinny.py: THREADS); at least 3 blocks (24 warps) per
// SM, so registers are capped at 80: a bandwidth-bound kernel needs warps in flight.
constexpr int SKINNY_THREADS = 256;

template <class T, int NB, int LANES, int V>
__global__ void __launch_bounds__(SKINNY_THREADS, 3)
ks_skinny(const T* __restrict__ X, T* __restrict__ Y, const T* __restrict__ W,
          int G, int b, int c, int d, long long B,
          long long sx_f, long long sx_b, long long sy_f, long long sy_b, int conj_w) {
  static_assert(32 % LANES == 0, "a team is a power-of-two part of a warp");
  using C = typename compute_of<T>::type;
  constexpr int TEAMS = 32 / LANES, U = skinny_unroll<NB>::value;
  const long long rows = (long long)G * b;
  const int lane = threadIdx.x % 32, team = lane / LANES, t = lane % LANES;
  const long long warp = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const long long warps = (long long)gridDim.x * (blockDim.x / 32);
  const long long rowsets = (rows + TEAMS - 1) / TEAMS, items = rowsets * ((B + NB - 1) / NB);

  for (long long item = warp; item < items; item += warps) {
    const long long r0 = (item % rowsets) * TEAMS, n0 = (item / rowsets) * NB;
    const bool active = r0 + team < rows;
    const long long r = active ? r0 + team : rows - 1;
    const int g = (int)(r / b), k = (int)(r - (long long)g * b);
    const int i = g / d, j = g - i * d;
    const T* w = W + r * c;                                        // A_g[k, 0]
    const T* x = X + ((long long)i * c * d + j) * sx_f;            // X[cols(g)[0], 0]
    T* y = Y + ((long long)i * b * d + (long long)k * d + j) * sy_f;  // Y[rows(g)[k], 0]
    const long long x_l = (long long)d * sx_f;                     // X's step along l
    const int nvalid = B - n0 < NB ? (int)(B - n0) : NB;           // columns of this pass
    C acc[NB];
#pragma unroll
    for (int n = 0; n < NB; ++n) acc[n] = zero(C());
#pragma unroll 1
    for (int l0 = t * V; l0 < c; l0 += LANES * V * U) {
      vec<T, V> wv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int l = l0 + u * LANES * V;
        if (l < c) wv[u] = *reinterpret_cast<const vec<T, V>*>(w + l);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int l = l0 + u * LANES * V;
        if (l >= c) break;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          C a = widen(wv[u].v[v]);
          if (conj_w) a = conj(a);
          const T* xl = x + (l + v) * x_l + n0 * sx_b;
#pragma unroll
          for (int n = 0; n < NB; ++n)
            if (NB == 1 || n < nvalid) acc[n] = fma(a, widen(xl[n * sx_b]), acc[n]);
        }
      }
    }
#pragma unroll
    for (int mask = LANES / 2; mask > 0; mask /= 2)
#pragma unroll
      for (int n = 0; n < NB; ++n) acc[n] = add(acc[n], shfl_xor(acc[n], mask));
    if (active) {
#pragma unroll
      for (int n = 0; n < NB; ++n)
        if (n % LANES == t && n < nvalid) y[(n0 + n) * sy_b] = narrow<T>(acc[n]);
    }
  }
}

}  // namespace ks
