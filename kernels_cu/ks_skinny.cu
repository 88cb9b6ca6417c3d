// Kronecker-sparse multiply for small batches (B up to about 32): the weights are the traffic.
//
// K has pattern (a, b, c, d): a*d groups g = i*d + j, each a dense b x c block A_g with
//   rows(g) = { i*b*d + k*d + j : k < b },   cols(g) = { i*c*d + l*d + j : l < c },
//   Y[rows(g)[k], n] = sum_l A_g[k, l] * X[cols(g)[l], n]          (as in ks_matmul.cu).
// At a small batch each weight is used B times, so the product runs at the rate weights
// stream from memory. These kernels stream each weight once, in 16-byte loads.
//
// Rows. Output row r = g*b + k is a dot product of the weight row A_g[k, 0:c] with c
// entries of each batch column. W holds the operator's blocks row-major, A_g[k, l] =
// W[r*c + l] (a transposed view's blocks are copied to this order once: Factor.row_major),
// so a row is c contiguous weights.
//
// Teams. LANES adjacent lanes of a warp (a team) share one row, so a warp works on a row set
// of TEAMS = 32 / LANES rows at once, for NB batch columns: a work item is (row set, batch
// pass), row sets varying fastest (neighbouring warps stream neighbouring weights). Lane t
// of a team reads the V-element vectors that start at
//   l = (t + LANES*u) * V,   u = 0, 1, ...
// (neighbouring lanes read neighbouring vectors: a team streams whole lines), U of them
// loaded before any is used so that U loads per lane are in flight. Each lane keeps the
// partial sums of NB batch columns; the team adds them with shuffles, and lane n % LANES
// stores column n. A batch wider than NB takes several passes, each reading the weights
// again (from L2 when they fit), which is why it suits small batches.
//
// The loop over a warp's work items is uniform across the warp (every lane reaches the
// shuffles); a team past the last row computes on the last row and does not store.
//
// X. Lane t multiplies its weights with X[cols(g)[l], n] for its own l. Where l-neighbours
// of X are adjacent in memory (d == 1 and a feature stride of one: batch-size-first, or a
// batch of one) a warp's X loads are a few lines, and ks_skinny reads X where it lies.
// Elsewhere each lane's load would touch its own line (d > 1: cols(g)[l] steps by d), so
// ks_skinny_staged first copies the group's c x NB slice of X to shared memory, once per work
// item of (group, chunk of kb rows, batch pass) instead of once per row, and its warps then
// stream the chunk's rows.
//
// X and Y are addressed through element strides (feature f, batch n) as in ks_matmul.cu:
// one kernel for both layouts and any strided operand. Offsets are 64-bit.
#include "ks_launch.cuh"
#include "ks_scalar.cuh"

namespace ks {

// Weight vectors each lane loads before it multiplies (loads in flight per lane): 4 at one
// batch column, fewer when each weight meets NB columns (whose X loads need registers too).
template <int NB>
struct skinny_unroll { static constexpr int value = NB >= 4 ? 1 : 4 / NB; };
// Threads per block (kscupy/kernels/ks_skinny.py: THREADS); at least 3 blocks (24 warps) per
// SM, so registers are capped at 80: a bandwidth-bound kernel needs warps in flight.
constexpr int SKINNY_THREADS = 256;

// X[cols(g)[l], n] for the NB columns of a pass, where it lies in global memory:
// x points at X[cols(g)[0], n0], x_l = d * sx_f is the step along l.
template <class T>
struct GlobalColumns {
  const T* x;
  long long x_l, sx_b;

  template <int V, int NB, class C>
  __device__ __forceinline__ void load(int l, int nvalid, C (&xv)[V][NB]) const {
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int n = 0; n < NB; ++n)
        xv[v][n] = (NB == 1 || n < nvalid) ? widen(x[(l + v) * x_l + n * sx_b]) : zero(C());
  }
};

// The same staged in shared memory as xs[n*c + l] (compute type, zero past the batch): a
// lane's V values of one column are adjacent, neighbouring lanes' adjacent too, so they are
// read in 16-byte pieces without bank conflicts.
template <class C>
struct SharedColumns {
  const C* xs;
  int c;

  template <int V, int NB>
  __device__ __forceinline__ void load(int l, int, C (&xv)[V][NB]) const {
    constexpr int P = V * sizeof(C) > 16 ? 16 / (int)sizeof(C) : V;   // elements per piece
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
      for (int p = 0; p < V / P; ++p) {
        const vec<C, P> piece = *reinterpret_cast<const vec<C, P>*>(xs + n * c + l + p * P);
#pragma unroll
        for (int q = 0; q < P; ++q) xv[p * P + q][n] = piece.v[q];
      }
  }
};

// The team's sums of weight row w (c contiguous weights, conjugated if conj_w) times NB
// columns of X: lane t's vectors (see the header), then added over the team's lanes, so
// every lane of the team ends with all NB sums. Every lane of the warp must call it.
template <int NB, int LANES, int V, class T, class C, class Columns>
__device__ __forceinline__ void team_row(const T* __restrict__ w, const Columns& cols, int c,
                                         int t, int conj_w, int nvalid, C (&acc)[NB]) {
  constexpr int U = skinny_unroll<NB>::value;
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
      C xv[V][NB];
      cols.template load<V, NB>(l, nvalid, xv);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        C a = widen(wv[u].v[v]);
        if (conj_w) a = conj(a);
#pragma unroll
        for (int n = 0; n < NB; ++n) acc[n] = fma(a, xv[v][n], acc[n]);
      }
    }
  }
#pragma unroll
  for (int mask = LANES / 2; mask > 0; mask /= 2)
#pragma unroll
    for (int n = 0; n < NB; ++n) acc[n] = add(acc[n], shfl_xor(acc[n], mask));
}

// Lane t of the team stores the columns n with n % LANES == t of Y's row at y.
template <int NB, int LANES, class T, class C>
__device__ __forceinline__ void store_row(T* y, long long sy_b, int t, int nvalid,
                                          const C (&acc)[NB]) {
#pragma unroll
  for (int n = 0; n < NB; ++n)
    if (n % LANES == t && n < nvalid) y[n * sy_b] = narrow<T>(acc[n]);
}

template <class T, int NB, int LANES, int V>
__global__ void __launch_bounds__(SKINNY_THREADS, 3)
ks_skinny(const T* __restrict__ X, T* __restrict__ Y, const T* __restrict__ W,
          int G, int b, int c, int d, long long B,
          long long sx_f, long long sx_b, long long sy_f, long long sy_b, int conj_w) {
  static_assert(32 % LANES == 0, "a team is a power-of-two part of a warp");
  using C = typename compute_of<T>::type;
  constexpr int TEAMS = 32 / LANES;
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
    const int nvalid = B - n0 < NB ? (int)(B - n0) : NB;           // columns of this pass
    // X[cols(g)[0], n0] and Y[rows(g)[k], n0]
    const GlobalColumns<T> cols{X + ((long long)i * c * d + j) * sx_f + n0 * sx_b,
                                (long long)d * sx_f, sx_b};
    C acc[NB];
    team_row<NB, LANES, V>(W + r * c, cols, c, t, conj_w, nvalid, acc);
    if (active)
      store_row<NB, LANES>(Y + ((long long)i * b * d + (long long)k * d + j) * sy_f + n0 * sy_b,
                           sy_b, t, nvalid, acc);
  }
}

// Dynamic shared memory: c * NB values of the compute type (checked on entry).
template <class T, int NB, int LANES, int V>
__global__ void __launch_bounds__(SKINNY_THREADS, 3)
ks_skinny_staged(const T* __restrict__ X, T* __restrict__ Y, const T* __restrict__ W,
                 int G, int b, int c, int d, long long B,
                 long long sx_f, long long sx_b, long long sy_f, long long sy_b, int conj_w,
                 int kb) {
  static_assert(32 % LANES == 0, "a team is a power-of-two part of a warp");
  using C = typename compute_of<T>::type;
  constexpr int TEAMS = 32 / LANES, WARPS = SKINNY_THREADS / 32;
  extern __shared__ __align__(16) unsigned char smem[];
  C* xs = reinterpret_cast<C*>(smem);
  if (dynamic_smem_bytes() < (unsigned)(c * NB * sizeof(C))) __trap();
  const int lane = threadIdx.x % 32, team = lane / LANES, t = lane % LANES;
  const int warp = threadIdx.x / 32;
  const long long kchunks = (b + kb - 1) / kb, passes = (B + NB - 1) / NB;
  const long long items = (long long)G * kchunks * passes;

  // work item = (row chunk, group, pass), the chunk fastest: neighbouring blocks stream
  // neighbouring rows
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    const int kc = (int)(item % kchunks);
    const long long rest = item / kchunks;
    const int g = (int)(rest % G), i = g / d, j = g - i * d;
    const long long n0 = (rest / G) * NB;
    const int nvalid = B - n0 < NB ? (int)(B - n0) : NB;
    const T* x = X + ((long long)i * c * d + j) * sx_f + n0 * sx_b;   // X[cols(g)[0], n0]
    __syncthreads();                      // the previous item's rows are done with xs
    for (int e = threadIdx.x; e < c * NB; e += SKINNY_THREADS) {
      // neighbouring threads take neighbouring columns where the batch is contiguous
      const int l = sx_b == 1 ? e / NB : e % c, n = sx_b == 1 ? e % NB : e / c;
      xs[n * c + l] = n < nvalid ? widen(x[(long long)l * d * sx_f + n * sx_b]) : zero(C());
    }
    __syncthreads();
    const SharedColumns<C> cols{xs, c};
    const int k0 = kc * kb, kend = b < k0 + kb ? b : k0 + kb;
    for (int kk = k0 + warp * TEAMS; kk < kend; kk += WARPS * TEAMS) {   // uniform per warp
      const bool active = kk + team < kend;
      const int k = active ? kk + team : kend - 1;
      C acc[NB];
      team_row<NB, LANES, V>(W + ((long long)g * b + k) * c, cols, c, t, conj_w, nvalid, acc);
      if (active)
        store_row<NB, LANES>(Y + ((long long)i * b * d + (long long)k * d + j) * sy_f + n0 * sy_b,
                             sy_b, t, nvalid, acc);
    }
  }
}

}  // namespace ks
