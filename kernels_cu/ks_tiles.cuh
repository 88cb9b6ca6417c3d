// How the single-factor kernels (ks_matmul.cu, ks_mma.cu) walk their tiles and find a group's
// rows and columns. Both take the same parameter list (kscupy/kernels/operands.py, launch_tiles).
//
// NVRTC-compilable: no host headers.
#pragma once

namespace ks {

// Where a tile starts: output row k0, batch column n0, first group g0.
struct TileOrigin {
  int k0;
  long long n0;
  int g0;
};

// Tile `id` of a 1-D grid that strides over ktiles x ntiles x gtiles tiles. The row tile
// varies fastest (blocks that share an X tile run together); then, with BATCH_NEXT, the batch
// tile (same weights, next stretch of the same rows), else the group tile (blocks that run
// together read adjacent column runs of the same rows of X, so DRAM sees whole lines).
template <int BM, int BN, int SLOTS, bool BATCH_NEXT>
__device__ __forceinline__ TileOrigin tile_origin(long long id, int ktiles, int gtiles,
                                                  long long tiles) {
  const long long rest = id / ktiles, ntiles = (tiles / ktiles) / gtiles;
  const long long nt = BATCH_NEXT ? rest % ntiles : rest / gtiles;
  const int gt = (int)(BATCH_NEXT ? rest / ntiles : rest % gtiles);
  return {(int)(id % ktiles) * BM, nt * BN, gt * SLOTS};
}

// Threads tid < SLOTS write gx[tid], gy[tid]: the offsets of X[cols(g)[0], 0] and
// Y[rows(g)[0], 0] for group g = g0 + tid = i*d + j, where cols(g)[0] = i*c*d + j and
// rows(g)[0] = i*b*d + j. The caller synchronises before reading them.
template <int SLOTS>
__device__ __forceinline__ void group_offsets(int tid, int g0, int G, int b, int c, int d,
                                              long long sx_f, long long sy_f,
                                              long long* gx, long long* gy) {
  if (tid < SLOTS && g0 + tid < G) {
    const int g = g0 + tid, i = g / d, j = g - i * d;
    gx[tid] = ((long long)i * c * d + j) * sx_f;
    gy[tid] = ((long long)i * b * d + j) * sy_f;
  }
}

}  // namespace ks
