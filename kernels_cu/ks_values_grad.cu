// The values' gradient of one KS factor on the tensor cores (kscupy/kernels/ks_values_grad.py).
//
// With ks_matmul.cu's index names (group g = i*d + j, output row k < b, reduction index
// l < c, batch column n), rows(g)[k] = i*b*d + k*d + j and cols(g)[l] = i*c*d + l*d + j,
// the gradient of a real loss with respect to the values is, per group, a batch sum:
//   dW[g][k][l] = sum over n of  G[rows(g)[k], n] * conj(X[cols(g)[l], n])
// For one group this is a GEMM, dW_g (b x c) = G_g (b x B) X_g^H (B x c), whose reduction
// runs over the batch: k is the MMA's M axis, l its N axis, n its K axis. It is
// output-stationary: a block owns a BM x BN tile (rows k0.., columns l0..) of one group and
// reduces it over one split of the batch, columns n_begin .. n_begin + span (blockIdx.y = s).
//
// Splits (serial split-K): with several, each block writes its tile's sums to its slice of
// `work`, and the last block of a tile to arrive (a counter per tile in `arrivals`, zero at
// the launch) adds the slices in the order s = 0, 1, ... and writes the gradient: one launch,
// and the same result whichever block arrives last.
//
// The gradient is written in the values' canonical order, dW[i][k][l][j].
//
// Operands: element (feature f, batch column n) of G (X) at f*sg_f + n*sg_b (f*sx_f + n*sx_b).
//   LAYOUT 0, batch-size-last (sg_b == sx_b == 1): rows of G_g and X_g run along n, the
//     reduction. Copies of V elements along n fill K-major tiles Gs[k][n] and Xs[l][n]:
//     ks_mma's stored-W (WT 0) and in-group X (ORDER 2) layouts, whose fragment loaders
//     (ks_mma_layout.cuh, with G as W and X as X) read them.
//   LAYOUT 1, batch-size-first with d == 1 (sg_f == sx_f == 1): G_g's rows run along k and
//     X_g's along l. Copies of V elements along k (l) fill Gs[n][k] and Xs[n][l]: ks_mma's
//     transposed-W (WT 1) and batch-order X (ORDER 0) layouts.
// (The host transposes batch-size-first operands with d > 1 to batch-size-last first.)
//
// Complex values: the loaders conjugate G (w_fragment's conj_w), so the products sum
// conj(G) X = conj(G X^H); the store conjugates back.
//
// Accuracy. float32 and complex64 multiply in 3xTF32 (ks_tensor_core.cuh), float64 in DMMA,
// float16 and bfloat16 exactly with float32 sums, written as float32 (the host rounds once). The tensor
// cores truncate when they add to an accumulator, so over a reduction as long as a batch the
// error would grow with its length: products go to partial sums of SUM_K batch columns,
// added to the accumulators by rounding FP32 (FP64) adds, as in ks_mma.cu.
//
// Pipeline: the block's chunks of BK batch columns pass through STAGES shared-memory buffers
// filled by cp.async, zero-filled beyond b, c and the split (tails need no special case).
#include "ks_launch.cuh"
#include "ks_scalar.cuh"
#include "ks_tensor_core.cuh"
#include "ks_mma_layout.cuh"

namespace ks {

// The gradient's element type: float32 sums for float16 and bfloat16, the operands' type
// otherwise.
template <class T> struct gradient_of { using type = T; };
template <> struct gradient_of<float16> { using type = float; };
template <> struct gradient_of<bfloat16> { using type = float; };

// A chunk's copies of one operand by thread `tid` of NT: the tile's ROWS features (k or l,
// from rows_tile; `rows` in the problem) by BK batch columns (from n0; n_end ends the split),
// in vectors of V elements along the contiguous axis, vector e at (feature f, column n):
//   LAYOUT 0: f = e / (BK / V), n = e % (BK / V) * V    -> dst[f * ld + n] (K-major row f)
//   LAYOUT 1: n = e / (ROWS / V), f = e % (ROWS / V) * V -> dst[n * ld + f] (row n)
// Element (f, n) of the operand lies at origin + f * step + n * s_b. Vectors that start
// beyond the problem's features or the split are zero-filled; the host picks V so that a
// vector lies wholly inside both or wholly outside.
template <class T, int ROWS, int BK, int V, int NT, int LAYOUT>
__device__ __forceinline__ void load_tile(unsigned dst, int ld, const T* origin, long long step,
                                          long long s_b, int rows_tile, int rows, long long n0,
                                          long long n_end, int tid) {
  constexpr int VECTORS = ROWS * BK / V;
#pragma unroll
  for (int rep = 0; rep < (VECTORS + NT - 1) / NT; ++rep) {
    const int e = tid + rep * NT;
    if (VECTORS % NT != 0 && e >= VECTORS) break;
    const int f = LAYOUT == 0 ? e / (BK / V) : e % (ROWS / V) * V;
    const int n = LAYOUT == 0 ? e % (BK / V) * V : e / (ROWS / V);
    const bool ok = rows_tile + f < rows && n0 + n < n_end;
    const T* src = ok ? origin + (rows_tile + f) * step + (n0 + n) * s_b : origin;
    const int at = LAYOUT == 0 ? f * ld + n : n * ld + f;
    cp_async<V * (int)sizeof(T)>(dst + at * (int)sizeof(T), src, ok);
  }
}

// Reports the shared memory an instantiation needs (kscupy/kernels/ks_values_grad.py
// computes it through ks_mma.MmaConfig; a GPU test compares).
template <class T, int BM, int BN, int BK, int WM, int WN, int STAGES, int LAYOUT>
__global__ void ks_values_grad_smem(long long* out) {
  out[0] = MmaLayout<T, 1, BM, BN, BK, WM, WN, STAGES, LAYOUT == 0 ? 2 : 0, LAYOUT == 0 ? 0 : 1>::SMEM_BYTES;
}

// f(mt, q, r, at_k, at_l) for each accumulator (mt, q, r) of warp (wm, wn)'s lane `lane`:
// its row at_k and column at_l in the block's tile (ks_tensor_core.cuh's C fragment).
template <class L, class F>
__device__ __forceinline__ void each_accumulator(int lane, int wm, int wn, F f) {
  using S = typename L::S;
#pragma unroll
  for (int mt = 0; mt < L::MT; ++mt)
#pragma unroll
    for (int q = 0; q < L::NTL; ++q)
#pragma unroll
      for (int r = 0; r < S::C_REGS; ++r)
        f(mt, q, r, wm * L::WTM + mt * S::M + S::c_row(lane, r),
          wn * L::WTN + q * S::N + S::c_col(lane, r));
}

// *p read at L2 (ld.global.cg): another block's slice, which this block's L1 never held.
template <class T>
__device__ __forceinline__ T load_from_l2(const T* p) {
  using W = typename Bits<(int)sizeof(T)>::type;
  const W w = __ldcg(reinterpret_cast<const W*>(p));
  return *reinterpret_cast<const T*>(&w);
}

// Grid: x = g * tiles_k * tiles_l + tile_k * tiles_l + tile_l, y = split s. dW holds
// (a, b, c, d) values of gradient_of<T>; with several splits, `work` holds a slice of
// BM * BN of them per tile and split, at (x * gridDim.y + s) * BM * BN, and `arrivals` one
// counter per tile (both unused with one split).
template <class T, int PRECISION, int BM, int BN, int BK, int WM, int WN, int STAGES, int LAYOUT, int V>
__global__ void __launch_bounds__(32 * WM * WN)
ks_values_grad(const T* __restrict__ G, const T* __restrict__ X,
               typename gradient_of<T>::type* __restrict__ dW,
               typename gradient_of<T>::type* __restrict__ work, unsigned* __restrict__ arrivals,
               int a, int b, int c, int d, long long B, long long span,
               long long sg_f, long long sg_b, long long sx_f, long long sx_b,
               int tiles_k, int tiles_l) {
  constexpr int ORDER = LAYOUT == 0 ? 2 : 0, WT = LAYOUT == 0 ? 0 : 1;
  using L = MmaLayout<T, 1, BM, BN, BK, WM, WN, STAGES, ORDER, WT>;
  using R = typename L::R;
  using Acc = typename parts_of<T>::acc;
  using S = typename L::S;
  constexpr int NT = L::NT, PARTS = L::PARTS, MT = L::MT, NTL = L::NTL;
  constexpr int E = (int)sizeof(T);
  static_assert((LAYOUT == 0 ? BK : BM) % V == 0 && (LAYOUT == 0 ? BK : BN) % V == 0,
                "copy vectors must divide the tile");
  require_dynamic_smem<L::SMEM_BYTES>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const stages = reinterpret_cast<T*>(smem_raw);
  const unsigned stages_s = shared_address(stages);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int tiles = tiles_k * tiles_l;
  const int g = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int k0 = tile / tiles_l * BM, l0 = tile % tiles_l * BN;
  const int i = g / d, j = g % d;
  const long long n_begin = blockIdx.y * span;
  const long long n_end = min(B, n_begin + span);
  const long long chunks = (n_end - n_begin + BK - 1) / BK;
  // where the group's first row starts, and the step between its rows k (l) and k+1 (l+1)
  const T* const g_group = G + ((long long)i * b * d + j) * sg_f;
  const T* const x_group = X + ((long long)i * c * d + j) * sx_f;
  const long long g_step = (long long)d * sg_f, x_step = (long long)d * sx_f;

  auto load = [&](int stage, long long chunk) {
    const unsigned xs = stages_s + stage * L::STAGE * E;
    const unsigned gs = xs + L::XS_SIZE * E;
    const long long n0 = n_begin + chunk * BK;
    load_tile<T, BM, BK, V, NT, LAYOUT>(gs, L::WS_LD, g_group, g_step, sg_b, k0, b, n0, n_end, tid);
    load_tile<T, BN, BK, V, NT, LAYOUT>(xs, L::XS_LD, x_group, x_step, sx_b, l0, c, n0, n_end, tid);
  };

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < chunks) load(s, s);
    cp_async_commit();
  }
  Acc acc[PARTS][MT][NTL][S::C_REGS];
  each_register<Acc>(acc, acc, [](Acc& sum, Acc) { sum = Acc(0); });
  // Partial sums (see the header): float32 parts in 3xTF32 and float16, every SUM_K columns.
  constexpr bool PART = (sizeof(R) == 4 && PRECISION == PRECISION_DEFAULT) || L::HALF;
  constexpr int SUM_K = PART && BK % 32 == 0 ? 32 : BK;
  static_assert(BK % SUM_K == 0 && SUM_K % S::K == 0, "partial sums tile the chunk");
  int stage = 0;
  for (long long chunk = 0; chunk < chunks; ++chunk) {
    cp_async_wait<STAGES - 2>();   // this thread's copies of `chunk` have landed ...
    __syncthreads();               // ... everyone's have, and the buffer refilled next is free
    const int next_stage = stage == 0 ? STAGES - 1 : stage - 1;   // (chunk + STAGES - 1) % STAGES
    if (chunk + STAGES - 1 < chunks) load(next_stage, chunk + STAGES - 1);
    cp_async_commit();
    const T* const xs = stages + stage * L::STAGE;
    const T* const gs = xs + L::XS_SIZE;
    Acc part[PART ? PARTS : 1][PART ? MT : 1][PART ? NTL : 1][S::C_REGS];
    auto sum = [&](int p, int mt, int q) -> Acc (&)[S::C_REGS] {
      if constexpr (PART) return part[p][mt][q]; else return acc[p][mt][q];
    };
    if constexpr (PART) each_register<Acc>(part, part, [](Acc& sum, Acc) { sum = Acc(0); });
#pragma unroll
    for (int kk = 0; kk < BK; kk += S::K) {
      warp_k_step<T, L, PRECISION>(gs, xs, lane, wm, wn, kk, 1, sum);   // conj(G) X
      if constexpr (PART) close_partial_sums<SUM_K, S::K, Acc>(kk, acc, part);
    }
    stage = stage == STAGES - 1 ? 0 : stage + 1;
  }
  cp_async_wait<0>();   // only empty groups remain; leave none behind

  // The gradient conj(acc) (conj(G) X summed, conjugated back); the value of tile place
  // (at_k, at_l), row k = k0 + at_k and column l = l0 + at_l, lies at ((i*b + k)*c + l)*d + j.
  using Out = typename gradient_of<T>::type;
  auto gradient = [&](int mt, int q, int r) {
    return from_parts<Out>(acc[0][mt][q][r], -acc[PARTS - 1][mt][q][r]);
  };
  Out* const out = dW + ((long long)i * b * c * d + j);
  auto store = [&](int at_k, int at_l, Out v) {
    if (k0 + at_k < b && l0 + at_l < c) out[((long long)(k0 + at_k) * c + l0 + at_l) * d] = v;
  };
  const int splits = gridDim.y;
  if (splits == 1) {
    each_accumulator<L>(lane, wm, wn, [&](int mt, int q, int r, int at_k, int at_l) {
      store(at_k, at_l, gradient(mt, q, r));
    });
    return;
  }
  // this split's slice, then the last block of the tile adds them all in split order (the
  // tile's places inside the block only: b or c below the tile's side leave the rest unused)
  Out* const slices = work + (long long)blockIdx.x * splits * (BM * BN);
  const auto inside = [&](int at_k, int at_l) { return k0 + at_k < b && l0 + at_l < c; };
  each_accumulator<L>(lane, wm, wn, [&](int mt, int q, int r, int at_k, int at_l) {
    if (inside(at_k, at_l))
      slices[(long long)blockIdx.y * (BM * BN) + at_k * BN + at_l] = gradient(mt, q, r);
  });
  __threadfence();     // the slice is visible to every block before this one counts itself
  __syncthreads();
  __shared__ bool last;
  if (tid == 0) last = atomicAdd(arrivals + blockIdx.x, 1u) == (unsigned)splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();     // every other block's slice is read after its count
  each_accumulator<L>(lane, wm, wn, [&](int, int, int, int at_k, int at_l) {
    if (!inside(at_k, at_l)) return;
    const Out* place = slices + at_k * BN + at_l;
    Out sum = load_from_l2(place);
    for (int s = 1; s < splits; ++s) sum = add(sum, load_from_l2(place + (long long)s * (BM * BN)));
    store(at_k, at_l, sum);
  });
}

}  // namespace ks
