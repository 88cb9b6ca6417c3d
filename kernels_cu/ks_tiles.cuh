// How the single-factor kernels (ks_matmul.cu, ks_mma.cu) walk their tiles and find a group's
// rows and columns. Both take the same parameter list (kscupy/kernels/operands.py, tile_launcher).
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

// A block's walk over tiles in the order of tile_origin, by a fixed stride of ids, without
// a division per tile (a 64-bit division is a call, and a call makes the registers live
// across it spill). The tile id is kept as its digits in the mixed radix (ktiles, r1, r2):
// the row tile, then the batch tile (BATCH_NEXT) or group tile, then the other; the stride
// as digits of the same radices, added with carries (each digit sum is below twice its
// radix, so one subtraction carries). A cursor past the last tile yields origins outside the
// problem, which every copy and store checks.
template <int BM, int BN, int SLOTS, bool BATCH_NEXT>
struct TileCursor {
  int kt;             // row tile
  long long t1, t2;   // then the batch (or group) tile, then the other

  // Tile (or stride) `id` as digits.
  __device__ __forceinline__ TileCursor(long long id, int ktiles, long long r1)
      : kt((int)(id % ktiles)), t1((id / ktiles) % r1), t2((id / ktiles) / r1) {}

  __device__ __forceinline__ TileOrigin origin() const {
    return {kt * BM, (BATCH_NEXT ? t1 : t2) * BN, (int)(BATCH_NEXT ? t2 : t1) * SLOTS};
  }
  // Moves on by the tiles that `stride` holds as digits.
  __device__ __forceinline__ void advance(const TileCursor& stride, int ktiles, long long r1) {
    kt += stride.kt;
    const int carry0 = kt >= ktiles;
    kt -= carry0 ? ktiles : 0;
    t1 += stride.t1 + carry0;
    const int carry1 = t1 >= r1;
    t1 -= carry1 ? r1 : 0;
    t2 += stride.t2 + carry1;
  }
};

// A block's run of consecutive tiles (tile_launcher's runs, kernels/operands.py): blocks take
// runs of ceil(tiles / gridDim.x) tiles from tile `first` on, the last run shorter, and a
// block walks its run as one stream of `steps` steps, a step one chunk of a tile's reduction.
struct BlockRun {
  long long first, steps;
  __device__ __forceinline__ BlockRun(long long tiles, int chunks) {
    const long long run = (tiles + gridDim.x - 1) / gridDim.x;
    first = blockIdx.x * run;
    steps = (first < tiles ? min(run, tiles - first) : 0) * chunks;
  }
};

// n / d for 0 <= n < 2^32 and a run-time d >= 1, by one multiply-high instead of a division
// (about 20 instructions for a 32-bit one). The host passes m = floor((2^64 - 1) / d) + 1 (0
// for d = 1; operands.division_magic), which is floor(2^64 / d) + 1 or, for d a power of two,
// 2^64 / d exactly:
//   n * m / 2^64 = n / d + n * e / (d * 2^64),   e = d - (2^64 mod d) <= d,
// and n * e < 2^64 keeps the excess below 1/d, too little to reach the next integer.
struct Divider {
  unsigned long long m;
  int d;
  __device__ __forceinline__ int operator()(int n) const {
    return d > 1 ? (int)__umul64hi((unsigned long long)n, m) : n;
  }
};

// Where group g = i*d + j starts in X and Y: the offsets of X[cols(g)[0], 0] and
// Y[rows(g)[0], 0], where cols(g)[0] = i*c*d + j and rows(g)[0] = i*b*d + j.
struct GroupOrigins {
  Divider by_d;
  long long cd, bd, sx_f, sy_f;
  __device__ __forceinline__ GroupOrigins(int b, int c, int d, unsigned long long d_magic,
                                          long long sx_f_, long long sy_f_)
      : by_d{d_magic, d}, cd((long long)c * d), bd((long long)b * d), sx_f(sx_f_), sy_f(sy_f_) {}
  __device__ __forceinline__ long long x(int g) const {
    const int i = by_d(g);
    return (i * cd + (g - i * by_d.d)) * sx_f;
  }
  __device__ __forceinline__ long long y(int g) const {
    const int i = by_d(g);
    return (i * bd + (g - i * by_d.d)) * sy_f;
  }
};

// Threads tid < SLOTS write gx[tid], gy[tid]: the origins of group g0 + tid (GroupOrigins).
// The caller synchronises before reading them.
template <int SLOTS>
__device__ __forceinline__ void group_offsets(int tid, int g0, int G, const GroupOrigins& origins,
                                              long long* gx, long long* gy) {
  if (tid < SLOTS && g0 + tid < G) {
    gx[tid] = origins.x(g0 + tid);
    gy[tid] = origins.y(g0 + tid);
  }
}

}  // namespace ks
