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
// Block tile: JT consecutive groups g0..g0+JT-1, BM rows k0..k0+BM-1 of each, BN batch
// columns n0..n0+BN-1; the reduction over l runs in chunks of BK through shared memory.
// Each thread owns a TM x TN micro-tile of one group: rows k0 + tm + r*(BM/TM) and columns
// n0 + tn + s*(BN/TN) (strided, so neighbouring lanes touch neighbouring shared-memory words
// and, in batch-size-last, neighbouring global addresses).
//
// ORDER fixes which tile axis neighbouring threads walk when they move data between global
// and shared memory, i.e. the axis that is contiguous in global memory:
//   0: the batch n        (batch-size-last: X[f, n] at f*B + n)
//   1: the group g        (batch-size-first with d > 1: cols of groups j, j+1 are adjacent)
//   2: the row/col in-group index l (or k), then g (batch-size-first with d == 1)
// ORDER 0 writes Y straight from registers (coalesced over n); ORDERs 1 and 2 stage the
// output tile in shared memory and write it in ORDER's order.
//
// Weights: the pre-tiled storage holds block g at W + g*b*c; A_g[k, l] = W[g*b*c + k*w_sk +
// l*w_sl], so (w_sk, w_sl) = (c, 1) reads the stored block and (1, b) its transpose. With
// conj_w != 0, A_g is conjugated as it is loaded (adjoint products use the same storage).
//
// Grid: blockIdx.x = kt + ktiles*nt (row tile fastest, so blocks sharing an X tile run
// together); blockIdx.y strides over group tiles. Offsets are 64-bit.
#include "ks_scalar.cuh"

namespace ks {

template <int N, int D>
struct ceil_div { static constexpr int value = (N + D - 1) / D; };

template <class T, int JT, int BM, int BN, int BK, int TM, int TN, int ORDER>
__global__ void __launch_bounds__(JT * (BM / TM) * (BN / TN))
ks_matmul(const T* __restrict__ X, T* __restrict__ Y, const T* __restrict__ W,
          int G, int b, int c, int d, long long B,
          long long sx_f, long long sx_b, long long sy_f, long long sy_b,
          int w_sk, int w_sl, int conj_w, int ktiles, int gtiles) {
  static_assert(BM % TM == 0 && BN % TN == 0, "micro-tile must divide the tile");
  constexpr int THREADS_M = BM / TM, THREADS_N = BN / TN;
  constexpr int NT = JT * THREADS_M * THREADS_N;
  // Shared-memory strides, padded to odd word counts so that the threads of a warp that
  // walk any one tile axis hit distinct banks.
  constexpr int XS_LD = BN + 1, XS_J = BK * XS_LD + 1;   // Xs[jt][l][n]
  constexpr int WS_LD = BM + 1, WS_J = BK * WS_LD + 1;   // Ws[jt][l][k]  (A transposed)
  constexpr int OS_LD = BN + 1, OS_J = BM * OS_LD + 1;   // Os[jt][k][n]  (output staging)
  constexpr int XL = ceil_div<JT * BK * BN, NT>::value;  // X elements each thread moves
  constexpr int WL = ceil_div<JT * BK * BM, NT>::value;  // W elements each thread moves

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Xs = reinterpret_cast<T*>(smem_raw);
  T* Ws = Xs + JT * XS_J;
  T* Os = Xs;  // the output staging reuses the input buffers once the reduction is done

  const int tid = threadIdx.x;
  const int tn = tid % THREADS_N;
  const int tm = (tid / THREADS_N) % THREADS_M;
  const int tj = tid / (THREADS_N * THREADS_M);
  const int kt = blockIdx.x % ktiles;
  const long long n0 = (long long)(blockIdx.x / ktiles) * BN;
  const int k0 = kt * BM;
  const int cd = c * d, bd = b * d;

  for (int gt = blockIdx.y; gt < gtiles; gt += gridDim.y) {
    const int g0 = gt * JT;

    // -- per-thread load plan, fixed for the whole reduction: for each element slot, its
    //    shared-memory index, its global offset at l = 0, its l, and whether g and n exist.
    long long x_off[XL];
    int x_sm[XL], x_l[XL];
    bool x_ok[XL];
#pragma unroll
    for (int s = 0; s < XL; ++s) {
      const int e = tid + s * NT;
      int jt, l, n;
      if (ORDER == 0)      { n = e % BN; l = (e / BN) % BK; jt = e / (BN * BK); }
      else if (ORDER == 1) { jt = e % JT; l = (e / JT) % BK; n = e / (JT * BK); }
      else                 { l = e % BK; jt = (e / BK) % JT; n = e / (BK * JT); }
      const int g = g0 + jt;
      x_ok[s] = e < JT * BK * BN && g < G && n0 + n < B;
      x_l[s] = l;
      x_sm[s] = jt * XS_J + l * XS_LD + n;
      const int i = g / d, j = g - (g / d) * d;
      x_off[s] = x_ok[s] ? ((long long)i * cd + (long long)l * d + j) * sx_f + (n0 + n) * sx_b : 0;
    }
    long long w_off[WL];
    int w_sm[WL], w_l[WL];
    bool w_ok[WL];
#pragma unroll
    for (int s = 0; s < WL; ++s) {
      const int e = tid + s * NT;
      int jt, l, k;
      if (w_sl == 1) { l = e % BK; k = (e / BK) % BM; jt = e / (BK * BM); }  // l contiguous
      else           { k = e % BM; l = (e / BM) % BK; jt = e / (BM * BK); }  // k contiguous
      const int g = g0 + jt;
      w_ok[s] = e < JT * BK * BM && g < G && k0 + k < b;
      w_l[s] = l;
      w_sm[s] = jt * WS_J + l * WS_LD + k;
      w_off[s] = w_ok[s] ? (long long)g * b * c + (long long)(k0 + k) * w_sk + (long long)l * w_sl : 0;
    }

    T x_reg[XL], w_reg[WL];
    auto fetch = [&](int l0) {
#pragma unroll
      for (int s = 0; s < XL; ++s)
        x_reg[s] = (x_ok[s] && l0 + x_l[s] < c) ? X[x_off[s] + (long long)l0 * d * sx_f] : zero(T());
#pragma unroll
      for (int s = 0; s < WL; ++s) {
        T w = (w_ok[s] && l0 + w_l[s] < c) ? W[w_off[s] + (long long)l0 * w_sl] : zero(T());
        w_reg[s] = conj_w ? ks::conj(w) : w;
      }
    };

    T acc[TM][TN];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int q = 0; q < TN; ++q) acc[r][q] = zero(T());

    // -- reduction over l: registers -> shared, prefetch the next chunk, multiply-add.
    fetch(0);
    for (int l0 = 0; l0 < c; l0 += BK) {
#pragma unroll
      for (int s = 0; s < XL; ++s)
        if (tid + s * NT < JT * BK * BN) Xs[x_sm[s]] = x_reg[s];
#pragma unroll
      for (int s = 0; s < WL; ++s)
        if (tid + s * NT < JT * BK * BM) Ws[w_sm[s]] = w_reg[s];
      __syncthreads();
      if (l0 + BK < c) fetch(l0 + BK);  // global loads in flight while we compute
      const T* xs = Xs + tj * XS_J + tn;
      const T* ws = Ws + tj * WS_J + tm;
#pragma unroll
      for (int l = 0; l < BK; ++l) {
        T wv[TM], xv[TN];
#pragma unroll
        for (int r = 0; r < TM; ++r) wv[r] = ws[l * WS_LD + r * THREADS_M];
#pragma unroll
        for (int q = 0; q < TN; ++q) xv[q] = xs[l * XS_LD + q * THREADS_N];
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
          for (int q = 0; q < TN; ++q) acc[r][q] = ks::fma(wv[r], xv[q], acc[r][q]);
      }
      __syncthreads();
    }

    // -- epilogue: Y[rows(g)[k], n] for the tile.
    if (ORDER == 0) {
      const int g = g0 + tj;
      if (g < G) {
        const int i = g / d, j = g - (g / d) * d;
#pragma unroll
        for (int r = 0; r < TM; ++r) {
          const int k = k0 + tm + r * THREADS_M;
          if (k >= b) continue;
          T* yrow = Y + ((long long)i * bd + (long long)k * d + j) * sy_f;
#pragma unroll
          for (int q = 0; q < TN; ++q) {
            const long long n = n0 + tn + q * THREADS_N;
            if (n < B) yrow[n * sy_b] = acc[r][q];
          }
        }
      }
    } else {
#pragma unroll
      for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int q = 0; q < TN; ++q)
          Os[tj * OS_J + (tm + r * THREADS_M) * OS_LD + tn + q * THREADS_N] = acc[r][q];
      __syncthreads();
      for (int e = tid; e < JT * BM * BN; e += NT) {
        int jt, k, n;
        if (ORDER == 1) { jt = e % JT; k = (e / JT) % BM; n = e / (JT * BM); }
        else            { k = e % BM; jt = (e / BM) % JT; n = e / (BM * JT); }
        const int g = g0 + jt;
        if (g >= G || k0 + k >= b || n0 + n >= B) continue;
        const int i = g / d, j = g - (g / d) * d;
        Y[((long long)i * bd + (long long)(k0 + k) * d + j) * sy_f + (n0 + n) * sy_b] =
            Os[jt * OS_J + k * OS_LD + n];
      }
      __syncthreads();  // Os aliases Xs: the next group tile overwrites it
    }
  }
}

}  // namespace ks
