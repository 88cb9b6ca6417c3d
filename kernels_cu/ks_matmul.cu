// Fused output-stationary Kronecker-sparse multiply (Gonon et al., ICML 2025, Algorithm 3).
//
// K has pattern (a, b, c, d): a*d groups g = i*d + j, each a dense b x c block A_g with
//   rows(g) = { i*b*d + k*d + j : k < b },   cols(g) = { i*c*d + l*d + j : l < c }.
// For every group and batch column n:
//   Y[rows(g)[k], n] = sum_l A_g[k, l] * X[cols(g)[l], n]
// One pass: each X and Y element crosses global memory once per block that needs it, with
// no permutation passes. X and Y are addressed through element strides (feature, batch), so
// one kernel serves batch-size-last (batch stride 1), batch-size-first (feature stride 1)
// and any strided view.
//
// Index names (as in kscupy/pattern.py and the Python side): k < b output row of a block,
// l < c reduction index, n < B batch column, g = i*d + j group; a tile holds SLOTS groups,
// and `slot` is a group's place in the tile.
//
// Block tile: SLOTS consecutive groups g0..g0+SLOTS-1, BM rows k0..k0+BM-1 of each, BN batch
// columns n0..n0+BN-1; the reduction over l runs in chunks of BK through shared memory,
// the next chunk's global loads in flight while the current one is multiplied.
// Each thread owns a TM x TN micro-tile of one group. Its rows and columns come in runs of
// VM (VN) adjacent indices, the runs of neighbouring threads adjacent, so that shared memory
// is read in vectors of up to 16 bytes without bank conflicts:
//   row(r) = (r / VM) * (THREADS_M * VM) + tm * VM + r % VM,  col(q) likewise with VN, tn.
//
// ORDER fixes the axis that is contiguous in global memory, which neighbouring threads walk
// when they load X and W into shared memory and when they store Y from registers:
//   0: the batch n        (batch-size-last: X[f, n] at f*B + n)            lanes walk tn
//   1: the group g        (batch-size-first, d > 1: cols of j, j+1 adjacent) lanes walk slot
//   2: the in-group index (batch-size-first, d == 1: cols l, l+1 adjacent)   lanes walk tm
//
// Weights: the pre-tiled storage holds block g at W + g*b*c; A_g[k, l] = W[g*b*c + k*w_sk +
// l*w_sl], so (w_sk, w_sl) = (c, 1) reads the stored block and (1, b) its transpose. With
// conj_w != 0, A_g is conjugated as it is loaded (adjoint products use the same storage).
// float16 values stay float16 in shared memory and are widened to float as a thread reads
// them (ks_scalar.cuh, compute_of): sums are float, rounded once when Y is stored.
//
// Grid: a 1-D grid strides over tile ids (ks_tiles.cuh: row tile fastest, then the batch
// tile for ORDER 0 and the group tile for ORDERs 1 and 2). Offsets are 64-bit.
#include "ks_launch.cuh"
#include "ks_scalar.cuh"
#include "ks_tiles.cuh"

namespace ks {

template <int N, int D>
struct ceil_div { static constexpr int value = (N + D - 1) / D; };

// Widest vector (<= 16 bytes, <= 4 elements) that divides a thread's run length.
template <class T, int RUN>
struct vec_width {
  static constexpr int cap = (16 / (int)sizeof(T)) < 4 ? (16 / (int)sizeof(T)) : 4;
  static constexpr int value = RUN % cap == 0 ? cap : (RUN % 2 == 0 && cap >= 2 ? 2 : 1);
};

// Which element of a tile a thread moves in its repetition rep: element e = tid + rep*NT of
// a tile whose axes are (a0, a1, a2), a0 fastest with extent S0, then a1 with extent S1.
// When the extents and NT divide one another (all compile-time), each coordinate is affine
// in rep, so the compiler reduces each address to the thread's first one plus a constant.
template <int S0, int S1, int NT>
__device__ __forceinline__ void split(int tid, int rep, int& a0, int& a1, int& a2) {
  if (NT % S0 == 0 && (NT / S0) % S1 == 0) {
    a0 = tid % S0; a1 = (tid / S0) % S1; a2 = tid / (S0 * S1) + rep * (NT / (S0 * S1));
  } else if (NT % S0 == 0) {
    a0 = tid % S0; const int r = tid / S0 + rep * (NT / S0); a1 = r % S1; a2 = r / S1;
  } else if (S0 % NT == 0) {
    constexpr int PER_ROW = S0 % NT == 0 ? S0 / NT : 1;
    a0 = tid + (rep % PER_ROW) * NT; a1 = (rep / PER_ROW) % S1; a2 = (rep / PER_ROW) / S1;
  } else {
    const int e = tid + rep * NT; a0 = e % S0; a1 = (e / S0) % S1; a2 = e / (S0 * S1);
  }
}

// The block's shared-memory layout, the one definition that the kernel uses and that
// ks_matmul_layout reports (kscupy/kernels/ks_matmul.py mirrors it; a GPU test compares):
//   [SLOTS] int64 offsets of X[cols(g)[0], 0], [SLOTS] int64 offsets of Y[rows(g)[0], 0],
//   then two stages of (Xs[slot][l][n], Ws[slot][l][k]) with each row padded by one vector
//   (consecutive rows and groups start in different banks, row starts stay aligned) and
//   each buffer rounded to 16 bytes.
template <class T, int SLOTS, int BM, int BN, int BK, int TM, int TN>
struct MatmulLayout {
  static_assert(BM % TM == 0 && BN % TN == 0, "micro-tile must divide the tile");
  static constexpr int THREADS_M = BM / TM, THREADS_N = BN / TN;
  static constexpr int NT = SLOTS * THREADS_M * THREADS_N;
  static constexpr int VM = vec_width<T, TM>::value, VN = vec_width<T, TN>::value;
  static constexpr int XS_LD = BN + VN, XS_SLOT = BK * XS_LD + VN;   // Xs[slot][l][n]
  static constexpr int WS_LD = BM + VM, WS_SLOT = BK * WS_LD + VM;   // Ws[slot][l][k]
  static constexpr int XS_SIZE = (SLOTS * XS_SLOT + 3) / 4 * 4;
  static constexpr int WS_SIZE = (SLOTS * WS_SLOT + 3) / 4 * 4;
  static constexpr int OFFSET_BYTES = 2 * SLOTS * (int)sizeof(long long);
  static constexpr int SMEM_BYTES = OFFSET_BYTES + 2 * (XS_SIZE + WS_SIZE) * (int)sizeof(T);
};

// Reports the layout for one instantiation: out = {SMEM_BYTES, NT, VM, VN}.
template <class T, int SLOTS, int BM, int BN, int BK, int TM, int TN>
__global__ void ks_matmul_layout(long long* out) {
  using L = MatmulLayout<T, SLOTS, BM, BN, BK, TM, TN>;
  out[0] = L::SMEM_BYTES; out[1] = L::NT; out[2] = L::VM; out[3] = L::VN;
}

template <class T, int SLOTS, int BM, int BN, int BK, int TM, int TN, int ORDER>
__global__ void __launch_bounds__(SLOTS * (BM / TM) * (BN / TN))
ks_matmul(const T* __restrict__ X, T* __restrict__ Y, const T* __restrict__ W,
          int G, int b, int c, int d, long long B,
          long long sx_f, long long sx_b, long long sy_f, long long sy_b,
          int w_sk, int w_sl, int conj_w, int ktiles, int gtiles, long long tiles,
          unsigned long long d_magic) {
  using L = MatmulLayout<T, SLOTS, BM, BN, BK, TM, TN>;
  constexpr int THREADS_M = L::THREADS_M, THREADS_N = L::THREADS_N, NT = L::NT;
  constexpr int VM = L::VM, VN = L::VN;
  constexpr int XS_LD = L::XS_LD, XS_SLOT = L::XS_SLOT, XS_SIZE = L::XS_SIZE;
  constexpr int WS_LD = L::WS_LD, WS_SLOT = L::WS_SLOT, WS_SIZE = L::WS_SIZE;
  constexpr int XL = ceil_div<SLOTS * BK * BN, NT>::value;   // X elements each thread moves
  constexpr int WL = ceil_div<SLOTS * BK * BM, NT>::value;   // W elements each thread moves
  require_dynamic_smem<L::SMEM_BYTES>();

  extern __shared__ __align__(16) unsigned char smem_raw[];
  long long* gx = reinterpret_cast<long long*>(smem_raw);  // [SLOTS] offset of X[cols(g)[0], 0]
  long long* gy = gx + SLOTS;                              // [SLOTS] offset of Y[rows(g)[0], 0]
  T* const buffers = reinterpret_cast<T*>(gy + SLOTS);    // two stages of (Xs, Ws)

  const int tid = threadIdx.x;
  int slot, tm, tn;
  if (ORDER == 0)      { tn = tid % THREADS_N; tm = (tid / THREADS_N) % THREADS_M; slot = tid / (THREADS_N * THREADS_M); }
  else if (ORDER == 1) { slot = tid % SLOTS; tn = (tid / SLOTS) % THREADS_N; tm = tid / (SLOTS * THREADS_N); }
  else                 { tm = tid % THREADS_M; tn = (tid / THREADS_M) % THREADS_N; slot = tid / (THREADS_M * THREADS_N); }
  const long long x_step = (long long)d * sx_f;   // X offset between l and l + 1
  const long long y_step = (long long)d * sy_f;   // Y offset between k and k + 1
  const long long bc = (long long)b * c;
  const GroupOrigins origins(b, c, d, d_magic, sx_f, sy_f);

  for (long long id = blockIdx.x; id < tiles; id += gridDim.x) {
    const TileOrigin tile = tile_origin<BM, BN, SLOTS, ORDER == 0>(id, ktiles, gtiles, tiles);
    const int k0 = tile.k0, g0 = tile.g0;
    const long long n0 = tile.n0;
    group_offsets<SLOTS>(tid, g0, G, origins, gx, gy);
    __syncthreads();

    T x_reg[XL], w_reg[WL];
    auto fetch = [&](int l0) {
#pragma unroll
      for (int rep = 0; rep < XL; ++rep) {
        const int e = tid + rep * NT;
        int eslot, l, n;
        if (ORDER == 0)      split<BN, BK, NT>(tid, rep, n, l, eslot);
        else if (ORDER == 1) split<SLOTS, BK, NT>(tid, rep, eslot, l, n);
        else                 split<BK, SLOTS, NT>(tid, rep, l, eslot, n);
        const bool ok = e < SLOTS * BK * BN && g0 + eslot < G && l0 + l < c && n0 + n < B;
        x_reg[rep] = ok ? X[gx[eslot] + (l0 + l) * x_step + (n0 + n) * sx_b] : zero(T());
      }
#pragma unroll
      for (int rep = 0; rep < WL; ++rep) {
        const int e = tid + rep * NT;
        int eslot, l, k;
        if (w_sl == 1) split<BK, BM, NT>(tid, rep, l, k, eslot);   // stored block: l contiguous
        else           split<BM, BK, NT>(tid, rep, k, l, eslot);   // transposed view: k contiguous
        const bool ok = e < SLOTS * BK * BM && g0 + eslot < G && k0 + k < b && l0 + l < c;
        const T w = ok ? W[(g0 + eslot) * bc + (long long)(k0 + k) * w_sk + (long long)(l0 + l) * w_sl]
                       : zero(T());
        w_reg[rep] = conj_w ? ks::conj(w) : w;
      }
    };
    auto stash = [&](T* Xs, T* Ws) {
#pragma unroll
      for (int rep = 0; rep < XL; ++rep) {
        const int e = tid + rep * NT;
        if (e >= SLOTS * BK * BN) break;
        int eslot, l, n;
        if (ORDER == 0)      split<BN, BK, NT>(tid, rep, n, l, eslot);
        else if (ORDER == 1) split<SLOTS, BK, NT>(tid, rep, eslot, l, n);
        else                 split<BK, SLOTS, NT>(tid, rep, l, eslot, n);
        Xs[eslot * XS_SLOT + l * XS_LD + n] = x_reg[rep];
      }
#pragma unroll
      for (int rep = 0; rep < WL; ++rep) {
        const int e = tid + rep * NT;
        if (e >= SLOTS * BK * BM) break;
        int eslot, l, k;
        if (w_sl == 1) split<BK, BM, NT>(tid, rep, l, k, eslot);
        else           split<BM, BK, NT>(tid, rep, k, l, eslot);
        Ws[eslot * WS_SLOT + l * WS_LD + k] = w_reg[rep];
      }
    };

    using C = typename compute_of<T>::type;   // float for float16 values
    C acc[TM][TN];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int q = 0; q < TN; ++q) acc[r][q] = zero(C());

    // Two shared-memory stages: while the block multiplies stage s, the next chunk travels
    // from global memory to registers and then into stage s^1; one barrier per chunk.
    fetch(0);
    stash(buffers, buffers + XS_SIZE);
    __syncthreads();
    for (int l0 = 0, stage = 0; l0 < c; l0 += BK, stage ^= 1) {
      const bool more = l0 + BK < c;
      if (more) fetch(l0 + BK);
      T* const Xs = buffers + stage * (XS_SIZE + WS_SIZE);
      const T* xs = Xs + slot * XS_SLOT + tn * VN;
      const T* ws = Xs + XS_SIZE + slot * WS_SLOT + tm * VM;
#pragma unroll
      for (int l = 0; l < BK; ++l) {
        C wv[TM], xv[TN];
#pragma unroll
        for (int r = 0; r < TM; r += VM) {
          const vec<T, VM> v = *reinterpret_cast<const vec<T, VM>*>(ws + l * WS_LD + (r / VM) * THREADS_M * VM);
#pragma unroll
          for (int u = 0; u < VM; ++u) wv[r + u] = widen(v.v[u]);
        }
#pragma unroll
        for (int q = 0; q < TN; q += VN) {
          const vec<T, VN> v = *reinterpret_cast<const vec<T, VN>*>(xs + l * XS_LD + (q / VN) * THREADS_N * VN);
#pragma unroll
          for (int u = 0; u < VN; ++u) xv[q + u] = widen(v.v[u]);
        }
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
          for (int q = 0; q < TN; ++q) acc[r][q] = ks::fma(wv[r], xv[q], acc[r][q]);
      }
      if (more) {
        T* const next = buffers + (stage ^ 1) * (XS_SIZE + WS_SIZE);
        stash(next, next + XS_SIZE);
      }
      __syncthreads();
    }

    // Epilogue: Y[rows(g)[k], n] straight from registers; ORDER's thread layout makes
    // neighbouring lanes write neighbouring addresses.
    if (g0 + slot < G) {
      const long long ybase = gy[slot];
#pragma unroll
      for (int r = 0; r < TM; ++r) {
        const int k = k0 + (r / VM) * THREADS_M * VM + tm * VM + r % VM;
        if (k >= b) continue;
#pragma unroll
        for (int q = 0; q < TN; ++q) {
          const long long n = n0 + (q / VN) * THREADS_N * VN + tn * VN + q % VN;
          if (n < B) Y[ybase + k * y_step + n * sy_b] = narrow<T>(acc[r][q]);
        }
      }
    }
    __syncthreads();   // gx/gy and stage 0 are rewritten for the next tile
  }
}

}  // namespace ks
