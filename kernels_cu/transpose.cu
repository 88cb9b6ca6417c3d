// Out-of-place matrix transpose: Y = X^T, Y (C x R) a new C-order array, X (R x C) addressed
// by element strides (s_r, s_c).
//
// What it is for: the tensor-core kernel runs fastest in its batch order (ks_mma.cu, ORDER
// 0), where X and Y are (features x batch) with the batch contiguous. A batch-size-first
// product (X and Y are (batch x features)) can run there between two transposes
// (kscupy/kernels/ks_mma.py, prepare_batch_last), which pays where the product costs more
// than moving X and Y twice (large blocks, d > 1).
//
// A block moves TILE x TILE tiles (TILE = 32 * V) through shared memory. Reading, lane tx
// of warp ty takes V adjacent elements of a row of X (one 8-byte access for V = 4 float16s
// or 2 floats: coalesced along the row where s_c == 1, and twice the bytes per instruction
// of single floats, whose 4-byte accesses reach less of the bandwidth than 8-byte ones);
// writing, it takes V adjacent elements of a row of Y, which are V adjacent rows of the tile
// at one column. A tile row is padded by one element, so that the rows of a warp's column reads
// start 1 (V = 1, 4-byte elements), 2 (8-byte) or 4 (16-byte) banks apart, the width of
// one access: conflict-free. With V > 1 the lanes' rows V*tx + u start V*(TILE + 1)
// elements apart, 2 words for V = 2 floats and V = 4 float16s: two lanes share a bank
// (tx and tx + 16), a two-way conflict on the shared-memory side, which has bandwidth to
// spare against the DRAM traffic this kernel waits on.
//
// Vectors (V > 1) need s_c == 1, V | C, V | R, V | s_r and X aligned to V elements (the
// caller checks; kscupy/kernels/transpose.py; Y is a new array). Offsets are 64-bit; the
// grid strides over the tiles, column tiles fastest.
//
// Few rows (transpose_few_rows): where R fills less than a quarter of a tile (a gradient's
// (d, b*c) blocks with d of 2 to 12, say), the tiled kernel leaves most lanes idle and its
// many small blocks each wait out two memory round trips. There each thread writes one
// element of Y in Y's order, o = q*R + r <- X[r, q]: the writes are coalesced, and a warp's
// reads fall on R runs of about 32 / R adjacent elements of X, one per row, whose sectors
// the neighbouring warps read too (through L2).
#include "ks_scalar.cuh"

namespace ks {

template <class T, int V>
__global__ void __launch_bounds__(256) transpose(const T* __restrict__ X, T* __restrict__ Y,
                                                 long long R, long long C, long long s_r,
                                                 long long s_c, long long col_tiles,
                                                 long long tiles) {
  constexpr int TILE = 32 * V, WARPS = 8;
  __shared__ T tile[TILE][TILE + 1];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    const long long r0 = t / col_tiles * TILE, c0 = t % col_tiles * TILE;
    const long long c = c0 + V * tx;           // this lane's first column of X
#pragma unroll
    for (int r = ty; r < TILE; r += WARPS) {
      if (r0 + r >= R || c >= C) continue;
      const T* x = X + (r0 + r) * s_r + c * s_c;
      if constexpr (V > 1) {
        const vec<T, V> v = *reinterpret_cast<const vec<T, V>*>(x);
#pragma unroll
        for (int u = 0; u < V; ++u) tile[r][V * tx + u] = v.v[u];
      } else {
        tile[r][tx] = *x;
      }
    }
    __syncthreads();
    const long long r = r0 + V * tx;           // this lane's first row of X: column of Y
#pragma unroll
    for (int col = ty; col < TILE; col += WARPS) {
      if (c0 + col >= C || r >= R) continue;
      vec<T, V> v;
#pragma unroll
      for (int u = 0; u < V; ++u) v.v[u] = tile[V * tx + u][col];
      *reinterpret_cast<vec<T, V>*>(Y + (c0 + col) * R + r) = v;
    }
    __syncthreads();   // the tile is free for the next one
  }
}

template <class T>
__global__ void __launch_bounds__(256) transpose_few_rows(const T* __restrict__ X,
                                                          T* __restrict__ Y, long long R,
                                                          long long s_r, long long s_c,
                                                          long long total) {
  for (long long o = blockIdx.x * 256LL + threadIdx.x; o < total; o += gridDim.x * 256LL) {
    const long long q = o / R, r = o - q * R;
    Y[o] = X[r * s_r + q * s_c];
  }
}

}  // namespace ks
