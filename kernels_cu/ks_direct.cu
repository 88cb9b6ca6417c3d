// Kronecker-sparse multiply by direct evaluation: one thread per output element, no tiles,
// no shared memory.
//
// K has pattern (a, b, c, d): a*d groups g = i*d + j, each a dense b x c block A_g with
//   rows(g) = { i*b*d + k*d + j : k < b },   cols(g) = { i*c*d + l*d + j : l < c },
//   Y[rows(g)[k], n] = sum_l A_g[k, l] * X[cols(g)[l], n]          (as in ks_matmul.cu).
// Thread t computes one Y[r, n]: r = (i*b + k)*d + j gives (i, k, j), and the sum runs over
// l with the weight row of A_g and the column of X read from global memory (L1 and L2 serve
// the reuse). Consecutive threads take consecutive elements of Y in memory (n fastest in
// batch-size-last, r fastest in batch-size-first), so stores are coalesced.
//
// What it is for: one instantiation per scalar type, pattern and strides as run-time
// arguments, no unrolled tiles, so NVRTC compiles every type in a fraction of the time one
// tuned kernel takes. `auto` runs it while the tuned kernel for a problem compiles in the
// background (kscupy/kernels/nvrtc.py); `backend="direct"` names it. It is correct for
// every pattern, layout and strided operand, and slow for wide blocks and batches.
//
// X and Y are addressed through element strides (feature f, batch n) as in ks_matmul.cu;
// the block element (k, l) is at W[g*b*c + k*w_sk + l*w_sl] (a transposed view swaps the
// strides); `conjugate` conjugates the weights. Offsets are 64-bit.
//
// A chain's permutations fold into the first and last factor (kscupy/planner.py,
// DirectStep): with `x_rows` the input feature f is read from row x_rows[f] of X (a
// gather), with `y_rows` output feature r is written to row y_rows[r] of Y (a scatter);
// either may be null.
#include "ks_scalar.cuh"

namespace ks {

template <class T>
__global__ void ks_direct(const T* __restrict__ X, T* __restrict__ Y, const T* __restrict__ W,
                          const int* __restrict__ x_rows, const int* __restrict__ y_rows,
                          int b, int c, int d, long long M, long long B,
                          long long sx_f, long long sx_b, long long sy_f, long long sy_b,
                          int w_sk, int w_sl, int conjugate, int batch_fastest) {
  using C = typename compute_of<T>::type;
  const long long outputs = M * B;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < outputs; t += step) {
    const long long r = batch_fastest ? t / B : t % M;
    const long long n = batch_fastest ? t % B : t / M;
    const unsigned ru = (unsigned)r, ik = ru / d, j = ru - ik * d;
    const unsigned i = ik / b, k = ik - i * b;
    const T* w = W + (long long)(i * d + j) * b * c + (long long)k * w_sk;
    const long long f0 = (long long)i * c * d + j;        // the feature of l = 0
    const T* x = X + n * sx_b;
    C acc = zero(C());
#pragma unroll 1
    for (int l = 0; l < c; ++l) {
      const long long f = f0 + (long long)l * d;
      const T wl = conjugate ? conj(w[l * w_sl]) : w[l * w_sl];
      acc = fma(widen(wl), widen(x[(x_rows ? x_rows[f] : f) * sx_f]), acc);
    }
    Y[(y_rows ? y_rows[r] : r) * sy_f + n * sy_b] = narrow<T>(acc);
  }
}

}  // namespace ks
