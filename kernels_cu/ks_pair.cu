// Two consecutive factors of a chain in one launch on the tensor cores (issue 11's
// large-block fusion): Y = K2 (K1 X), the intermediate Z = K1 X never leaving shared memory.
//
// A block owns BN batch columns n0 .. n0 + BN - 1. It copies their X (N1 features each) into
// shared memory (Xs), applies K1 into Zs (M1 = N2 features), K2 into Ys (M2 features) and
// stores Ys: X and Y cross DRAM once, where factor-by-factor application also writes Z and
// reads it back. Each factor (a, b, c, d) is G = a·d independent b x c products: group
// g = i·d + j maps the inputs t = i·c·d + l·d + j (l < c) to the outputs t = i·b·d + k·d + j
// (k < b) through its b x c block W[g].
//
// A unit of work is one group's row tile of 16·MT outputs k over all BN columns, reduced over
// l in steps of 8 by m16n8k8 TF32 MMAs (ks_tensor_core.cuh; 3xTF32 by default, each step's
// three products summed apart and added to the accumulators in FP32, as ks_mma.cu's row
// sums do): A = rows of W[g] read from global memory (both factors' weights are read once
// per block; they stay in L2), B = the unit's inputs from shared memory, read once for the
// MT row tiles. Warps take units round robin, loading A fragments PREFETCH steps ahead. The
// host packs each factor's blocks as the fragments are read, already split into their TF32
// parts (kernels/ks_pair.py, fragment_weights): step s of unit u is PARTS·MT·512 bytes at
// (u·steps + s)·PARTS·MT·512, lane `lane`'s registers of part p (big, small) of row tile m
// the 16 bytes at ((m·PARTS + p)·32 + lane)·16 in it, zero past the block: each load of a
// warp is one coalesced 512-byte run, and no warp splits a weight.

// Shared memory: element (t, n) of a tile at t·ST + n·SN. Batch-size-first (BSL false) tiles
// are rows of features (ST = 1, SN = the padded row), batch-size-last ones rows of batch
// columns (SN = 1), as X and Y lie in global memory, so that 16-byte copies move them. The
// host (kernels/ks_pair.py) pads the rows to spread a warp's fragment reads over the banks
// and places Ys over Xs (Xs is dead once Zs is complete; its area is sized for both), and
// Zs over Xs too where both factors work in place (z_at = 0, one set of strides).
#include "ks_launch.cuh"
#include "ks_tensor_core.cuh"

namespace ks {

// One factor as the kernel reads it: its pattern and its fragment-packed blocks.
struct PairFactor {
  const float4* W;
  int a, b, c, d;
};

// The parts a packed weight comes in at PRECISION: big and small (3xTF32), or big alone.
template <int PRECISION>
__host__ __device__ constexpr int weight_parts() { return PRECISION == PRECISION_DEFAULT ? 2 : 1; }

// A thread's walk over the elements of a tile of F features x BN columns, V at a time along
// the axis that is contiguous in global memory (t in batch-size-first, n in batch-size-last):
// element e = tid, tid + NT, ... < F·BN / V is (line, along) = (e / per_line, e % per_line·V)
// with per_line vectors a line, lines the columns (batch-size-first) or the features; the
// walk steps by NT with a carry instead of dividing each time.
template <bool BSL, int BN, int V>
struct TileWalk {
  int per_line, lines, line, along, line_step, along_step;
  __device__ __forceinline__ TileWalk(int F, int tid, int nt)
      : per_line(BSL ? BN / V : F / V), lines(BSL ? F : BN) {
    line = tid / per_line;
    along = tid - line * per_line;
    line_step = nt / per_line;
    along_step = nt - line_step * per_line;
  }
  __device__ __forceinline__ bool more() const { return line < lines; }
  __device__ __forceinline__ int t() const { return BSL ? line : along * V; }
  __device__ __forceinline__ int n() const { return BSL ? along * V : line; }
  __device__ __forceinline__ void next() {
    along += along_step;
    line += line_step;
    if (along >= per_line) {
      along -= per_line;
      ++line;
    }
  }
};

// Where feature t of batch column n0 + n lies in X or Y (row or feature stride ld).
template <bool BSL>
__device__ __forceinline__ long long global_at(int t, long long n, long long ld) {
  return BSL ? t * ld + n : n * ld + t;
}

// The extent in elements of a tile of F features x BN columns with strides (st, sn).
template <int BN>
__device__ __forceinline__ int tile_extent(int F, int st, int sn) {
  return (F - 1) * st + (BN - 1) * sn + 1;
}

// A warp's walk over its units (unit, unit + warps, ...) step by step: unit u is group
// g = u / ktiles, rows k0 = ROWS (u % ktiles) .. + ROWS - 1, reduced in steps s < steps
// (l0 = 8 s); t_in and t_out: where its group's inputs l and outputs k lie in the tiles
// (+ l·d, + k·d).
template <int ROWS>
struct UnitCursor {
  int unit, s, k0, t_in, t_out;
  __device__ __forceinline__ void enter(const PairFactor& f, int ktiles) {
    const int g = unit / ktiles, i = g / f.d, j = g - i * f.d;
    k0 = (unit - g * ktiles) * ROWS;
    t_in = i * f.c * f.d + j;
    t_out = i * f.b * f.d + j;
  }
  // Moves on one step; true where that finished the unit.
  __device__ __forceinline__ bool advance(const PairFactor& f, int steps, int warps, int ktiles) {
    if (++s < steps) return false;
    s = 0;
    unit += warps;
    enter(f, ktiles);
    return true;
  }
};

// How many steps ahead a warp loads its A fragments. The weights come from L2, several
// hundred cycles away, and short reductions (c = 32: 4 steps a unit) leave no time within a
// unit: the loads run ahead across units.
constexpr int PREFETCH = 4;

// One factor applied to a tile: dst(t_out + k·d, n) = sum over l < c of W[g](k, l)
// src(t_in + l·d, n) for every group g, output k and column n < BN, in units of MT row
// tiles. MASKED: c is not a multiple of 8 (inputs past c read as zero, not as the next
// group's, which could hold an infinity).
template <int PRECISION, int BN, int MT, bool MASKED>
__device__ __forceinline__ void apply_factor(const PairFactor f, const float* src, int s_st,
                                             int s_sn, float* dst, int d_st, int d_sn,
                                             int warp, int warps, int lane) {
  using S = MmaShape<float>;
  using AOp = Operand<float, PRECISION, S::A_REGS>;
  using BOp = Operand<float, PRECISION, S::B_REGS>;
  constexpr int NQ = BN / S::N, ROWS = MT * S::M, PARTS = weight_parts<PRECISION>();
  constexpr int LOADS = MT * PARTS;   // 16-byte loads a lane a step
  const int lr = lane >> 2, lc = lane & 3;
  const int ktiles = (f.b + ROWS - 1) / ROWS, units = f.a * f.d * ktiles;
  const int steps = (f.c + S::K - 1) / S::K;
  // the fragments of step `at` (past the warp's last unit: not read)
  auto load_a = [&](const UnitCursor<ROWS>& at, float4 (&v)[LOADS]) {
    const float4* w = f.W + ((long long)at.unit * steps + at.s) * (LOADS * 32) + lane;
#pragma unroll
    for (int m = 0; m < LOADS; ++m) v[m] = at.unit < units ? __ldg(w + m * 32) : float4{};
  };
  UnitCursor<ROWS> load{warp, 0}, run{warp, 0};
  load.enter(f, ktiles);
  run.enter(f, ktiles);
  float4 a_ahead[PREFETCH][LOADS];
#pragma unroll
  for (int p = 0; p < PREFETCH; ++p) {
    load_a(load, a_ahead[p]);
    load.advance(f, steps, warps, ktiles);
  }
  // B register r of tile q of step s: src(t_in + (8 s + b_row(r))·d, 8q + lr); x_at: this
  // lane's for register 0 of tile 0 in the current step
  const int x_step = S::K * f.d * s_st, x_reg = 4 * f.d * s_st;
  const float* x_at = src + (run.t_in + lc * f.d) * s_st + lr * s_sn;
  float acc[MT][NQ][S::C_REGS] = {};
  while (run.unit < units) {
#pragma unroll
    for (int p = 0; p < PREFETCH; ++p) {
      if (run.unit >= units) break;
      AOp a[MT];
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int r = 0; r < S::A_REGS; ++r) {
          const float4& big = a_ahead[p][m * PARTS];
          a[m].big[r] = __float_as_uint(r == 0 ? big.x : r == 1 ? big.y : r == 2 ? big.z : big.w);
          if constexpr (PARTS == 2) {
            const float4& small = a_ahead[p][m * PARTS + 1];
            a[m].small[r] = __float_as_uint(r == 0 ? small.x : r == 1 ? small.y
                                            : r == 2 ? small.z : small.w);
          }
        }
      load_a(load, a_ahead[p]);   // the ring's slot p takes the step PREFETCH ahead
      load.advance(f, steps, warps, ktiles);
      float xv[NQ][S::B_REGS];
#pragma unroll
      for (int r = 0; r < S::B_REGS; ++r) {
        const bool in = !MASKED || run.s * S::K + S::b_row(lane, r) < f.c;
#pragma unroll
        for (int q = 0; q < NQ; ++q) xv[q][r] = in ? x_at[r * x_reg + q * S::N * s_sn] : 0.0f;
      }
      BOp x[NQ];
#pragma unroll
      for (int q = 0; q < NQ; ++q) x[q].set(xv[q]);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        float sums[NQ][S::C_REGS];
#pragma unroll
        for (int q = 0; q < NQ; ++q) mma_first_term<PRECISION>(sums[q], a[m], x[q]);
#pragma unroll
        for (int term = 1; term < Terms<float, PRECISION>::value; ++term)
#pragma unroll
          for (int q = 0; q < NQ; ++q) mma_term<PRECISION>(term, sums[q], a[m], x[q]);
#pragma unroll
        for (int q = 0; q < NQ; ++q)
#pragma unroll
          for (int r = 0; r < S::C_REGS; ++r) acc[m][q][r] += sums[q][r];
      }
      const int k0 = run.k0, t_out = run.t_out;
      x_at += x_step;
      if (run.advance(f, steps, warps, ktiles)) {   // the unit is done: its outputs
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int q = 0; q < NQ; ++q)
#pragma unroll
            for (int r = 0; r < S::C_REGS; ++r) {
              const int k = k0 + m * S::M + S::c_row(lane, r), n = q * S::N + S::c_col(lane, r);
              if (k < f.b) dst[(t_out + k * f.d) * d_st + n * d_sn] = acc[m][q][r];
              acc[m][q][r] = 0.0f;
            }
        x_at = src + (run.t_in + lc * f.d) * s_st + lr * s_sn;
      }
    }
  }
}

// The launch: one block per BN batch columns. X and Y: batch-size-first (B x N1, B x M2, row
// n at n·ldx, n·ldy) or batch-size-last (N1 x B, M2 x B, feature t at t·ldx, t·ldy). VX, VY:
// elements per copy of X and Y (4 where every row start is 16-byte aligned, else 1). Shared
// memory: Xs and Ys at 0, Zs at z_at (elements), with strides (x_st, x_sn) and so on.
template <int PRECISION, int BN, int WARPS, bool BSL, int VX, int VY, int MT, bool MASKED>
__global__ void __launch_bounds__(32 * WARPS, 1)
ks_pair(const float* __restrict__ X, float* __restrict__ Y,
        const float4* __restrict__ W1, int a1, int b1, int c1, int d1,
        const float4* __restrict__ W2, int a2, int b2, int c2, int d2,
        long long B, long long ldx, long long ldy, int x_st, int x_sn, int z_at, int z_st,
        int z_sn, int y_st, int y_sn) {
  static_assert(BN % 8 == 0 && BN % VX == 0 && BN % VY == 0, "whole MMA tiles and vectors");
  const PairFactor f1{W1, a1, b1, c1, d1}, f2{W2, a2, b2, c2, d2};
  extern __shared__ __align__(16) float smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long n0 = (long long)blockIdx.x * BN;
  const int N1 = f1.a * f1.c * f1.d, M2 = f2.a * f2.b * f2.d;
  const int M1 = f1.a * f1.b * f1.d;
  // the host's layout must fit the launch's memory: stop loudly rather than write past it
  const int extent = max(tile_extent<BN>(N1, x_st, x_sn),
                         max(z_at + tile_extent<BN>(M1, z_st, z_sn),
                             tile_extent<BN>(M2, y_st, y_sn)));
  if (dynamic_smem_bytes() < 4u * (unsigned)extent) __trap();
  float* const xs = smem;
  float* const zs = smem + z_at;
  float* const ys = smem;   // over Xs
  const int nt = 32 * WARPS;
  for (TileWalk<BSL, BN, VX> e(N1, tid, nt); e.more(); e.next()) {   // past the batch: zeros
    const int t = e.t(), n = e.n();
    const bool ok = n0 + n < B;
    cp_async<4 * VX>(shared_address(xs + t * x_st + n * x_sn),
                     X + (ok ? global_at<BSL>(t, n0 + n, ldx) : 0), ok);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  apply_factor<PRECISION, BN, MT, MASKED>(f1, xs, x_st, x_sn, zs, z_st, z_sn, warp, WARPS, lane);
  __syncthreads();   // Zs complete; Xs free for Ys
  apply_factor<PRECISION, BN, MT, MASKED>(f2, zs, z_st, z_sn, ys, y_st, y_sn, warp, WARPS, lane);
  __syncthreads();
  for (TileWalk<BSL, BN, VY> e(M2, tid, nt); e.more(); e.next()) {
    const int t = e.t(), n = e.n();
    if (n0 + n >= B) continue;
    const float* s = ys + t * y_st + n * y_sn;
    float* out = Y + global_at<BSL>(t, n0 + n, ldy);
    if constexpr (VY == 4) *reinterpret_cast<float4*>(out) = *reinterpret_cast<const float4*>(s);
    else *out = *s;
  }
}

}  // namespace ks
