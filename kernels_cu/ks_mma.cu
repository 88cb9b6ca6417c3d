// Fused output-stationary Kronecker-sparse multiply on the tensor cores.
//
// (float32's group order in tiles of one warp per group and 64 or more batch columns, the
// heuristic's for long batches, runs ks_mma_group.cu instead: the same product and layout
// with bulk-copied weights. The ROW_SUMS and SPREAD_W paths below serve the other float32
// group-order tiles with such pieces that the autotuner tries.)
//
// Same product as ks_matmul.cu (read its header for the pattern and the index names: group
// g = i*d + j, k < b output row, l < c reduction index, n < B batch column):
//   Y[rows(g)[k], n] = sum_l A_g[k, l] * X[cols(g)[l], n]
// For one group this is a GEMM, Y_g (b x B) = A_g (b x c) X_g (c x B), whose operands sit in
// X, Y and W at fixed strides; a block computes a BM x BN tile of it for SLOTS consecutive
// groups, with k as the MMA's M axis, n as its N axis and l as its K axis.
//
// Warps. Warp w works on group slot = w / (WM*WN) and on the (wm, wn) = ((w / WN) % WM,
// w % WN) piece of that group's tile: rows wm*WTM .. +WTM, columns wn*WTN .. +WTN, which it
// covers with MT x NTL MMA tiles (ks_tensor_core.cuh: 16x8x8 TF32 for float, 16x8x8 DMMA for
// double, 16x8x16 for float16 with float accumulators). Complex values multiply as four real products on the same cores,
//   Re += Ar*Xr + (-Ai)*Xi,   Im += Ar*Xi + Ai*Xr,
// which keeps each real product's accuracy (Gauss's three-product form would save a quarter
// of the work but adds cancellation).
//
// Pipeline. The reduction runs in chunks of BK through STAGES shared-memory buffers filled by
// cp.async: while the warps multiply chunk t, chunks t+1 .. t+STAGES-1 are in flight.
// Out-of-range elements are zero-filled by the copy itself (src-size 0), so tails need no
// special case in the arithmetic.
//
// Global -> shared copies move VX (VW) elements of X (W) at once along the axis that is
// contiguous in global memory, the one that neighbouring threads walk:
//   ORDER 0  batch-size-last, contiguous batch: X_g[l, n] rows of n    -> Xs[slot][l][n]
//   ORDER 2  batch-size-first, d == 1: X_g[l, n] runs of l              -> Xs[slot][n][l]
//   ORDER 1  anything else (batch-size-first with d > 1, strided views): lanes walk the
//            slot (adjacent groups j, j+1 are adjacent columns)                -> Xs[slot][n][l]
//            With VX > 1 (contiguous rows, d % VX == 0) a lane loads VX adjacent groups of one
//            (l, n) at once. Those land in VX different slots, which one cp.async cannot
//            scatter, so these copies pass through registers: loaded before a chunk's
//            products, stored to shared memory after them (the buffer they fill was freed at
//            the chunk's barrier and is read STAGES - 1 barriers later).
//   WT 0     stored blocks, A_g[k, l] rows of l                         -> Ws[slot][k][l]
//   WT 1     transposed view, A_g[k, l] runs of k                        -> Ws[slot][l][k]
//   WT 2     packed: the blocks re-laid out as the chunks read them      -> Ws[slot][k][l]
//            (kscupy/kernels/ks_mma.py, packed_weights), W[tile][chunk][slot][k][l] for
//            tile = (group tile) * ktiles + (row tile), zero-filled beyond G, b and c: a
//            chunk's W is one contiguous run that thread tid copies at tid*VW + rep*NT*VW,
//            offsets known at compile time, with no bounds to check.
// A shared row is padded so that the fragment loads of a warp hit distinct banks: rows
// along the reduction (K-major) by 4 elements, rows along k or n by 32 bytes (the fragment
// positions above put lc on the row and lr on the column, or the other way round). float16
// tiles are read only with ldmatrix (8 rows of 16 bytes per phase), so both kinds of row are
// padded by 16 bytes: a row then starts 4 banks after the previous one.
//
// Grid: each block takes a run of consecutive tiles as one pipelined stream of reduction
// steps (see ks_mma below; ks_tiles.cuh has the tile order). Offsets 64-bit.
#include "ks_launch.cuh"
#include "ks_scalar.cuh"
#include "ks_tiles.cuh"
#include "ks_tensor_core.cuh"
#include "ks_mma_layout.cuh"

namespace ks {


// f(rep, e) for the vectors e = tid + rep*NT (e < V) that thread `tid` of NT moves: the copy
// loops of a chunk. Unrolled, so `rep` can index a register array.
template <int V, int NT, class F>
__device__ __forceinline__ void each_vector(int tid, F f) {
#pragma unroll
  for (int rep = 0; rep < (V + NT - 1) / NT; ++rep) {
    const int e = tid + rep * NT;
    if (V % NT != 0 && e >= V) break;
    f(rep, e);
  }
}

// A thread's copy vectors in a chunk, e = tid + rep*NT (each_vector), as digits (d0, d1, d2)
// of radices (R0, R1, ...), d0 fastest: the vector's place in the tile (x_vector, w_vector).
// Where NT is a multiple of R0 and Q = NT / R0 a multiple or a divisor of R1, every rep has
// the thread's own d0 and moves d1 and d2 by amounts known at compile time,
//   d1 = d1(tid) + D1(rep),   d2 = d2(tid) + D2(rep),
// since d1 + R1*d2 = tid / R0 + rep*Q. A thread then finds each of its vectors from its
// first by constant steps along two strides, and checks each against the room left along
// d1 and d2 (Walker).
template <int R0, int R1, int NT>
struct Walk {
  static constexpr int Q = NT / R0;
  static constexpr bool LINEAR = NT % R0 == 0 && (Q % R1 == 0 || R1 % Q == 0);
  static constexpr int PERIOD = Q % R1 == 0 ? 1 : R1 / Q;   // reps per step of d2 (case R1 % Q == 0)
  __host__ __device__ static constexpr int D1(int rep) { return Q % R1 == 0 ? 0 : rep % PERIOD * Q; }
  __host__ __device__ static constexpr int D2(int rep) { return Q % R1 == 0 ? rep * (Q / R1) : rep / PERIOD; }
};

// One operand's copies as a thread walks them (Walk W): where the walk starts in the current
// tile (src, the offset of the first vector in chunk 0, and the rooms, set per tile) and its
// steps, D1 * s1 + D2 * s2 in global memory and D1 * A1 + D2 * A2 in the stage's buffer from
// the first vector's offset at0 (set once). Vector rep is in the problem where
//   l0 + (L_D1 ? D1 : 0) < room_l,   L_D1 || D1 < room1,   D2 < room2
// for chunk offset l0 along the reduction, L_D1 saying whether d1 is the reduction index
// (else d0 is). room_l is c - l of the first vector, 0 when a digit that no rep moves lies
// outside the problem.
template <class W, bool L_D1, int A1, int A2>
struct Walker {
  long long src, s1, s2;
  int room_l, room1, room2, at0;
  __device__ __forceinline__ bool ok(int rep, int l0) const {
    const int d1 = W::D1(rep);
    return l0 + (L_D1 ? d1 : 0) < room_l && (L_D1 || d1 < room1) && W::D2(rep) < room2;
  }
  __device__ __forceinline__ long long origin(int rep) const {
    return src + W::D1(rep) * s1 + W::D2(rep) * s2;
  }
  __device__ __forceinline__ int at(int rep) const { return at0 + W::D1(rep) * A1 + W::D2(rep) * A2; }
};

// min(n, 2^31 - 1) for n >= 0, else 0: a room along the batch as an int.
__device__ __forceinline__ int clamp_room(long long n) {
  return n <= 0 ? 0 : n >= 0x7fffffffLL ? 0x7fffffff : (int)n;
}

// Reports the layout for one instantiation: out = {SMEM_BYTES, NT, XS_LD, WS_LD}.
template <class T, int SLOTS, int BM, int BN, int BK, int WM, int WN, int STAGES, int ORDER, int WT>
__global__ void ks_mma_layout(long long* out) {
  using L = MmaLayout<T, SLOTS, BM, BN, BK, WM, WN, STAGES, ORDER, WT>;
  out[0] = L::SMEM_BYTES; out[1] = L::NT; out[2] = L::XS_LD; out[3] = L::WS_LD;
}

// MIN_BLOCKS: blocks per SM the registers must allow (__launch_bounds__); 2 caps a 256-thread
// block at 128 registers, so that a second block's copies overlap this one's products; 4 a
// 128-thread block likewise.
//
// Block β takes a run of consecutive tiles, ids β*T .. β*T + T - 1 with T = ceil(tiles /
// gridDim.x) (kernels/operands.tile_launcher picks the grid), and its work is one stream of
// steps (tile, reduction chunk) through the STAGES buffers, without a break at tile
// boundaries: while the warps multiply step s and store a finished tile, the copies of steps
// s + 1 .. s + STAGES - 1 (the next tile's first chunks, where the reduction is short) are in
// flight. Ended per tile, the pipeline would wait out a whole load latency each time it
// refilled, and a reduction of one or two chunks is nothing but refills. Runs of consecutive
// ids, rather than ids strided by the grid (a persistent grid), keep the tiles in flight on
// the GPU close together in the tile order: the hardware starts blocks in order as others
// finish, where strided walks drift apart and lose the L2 reuse of X and W between
// neighbouring tiles.
template <class T, int PRECISION, int SLOTS, int BM, int BN, int BK, int WM, int WN, int STAGES,
          int ORDER, int WT, int VX, int VW, int MIN_BLOCKS>
__global__ void __launch_bounds__(32 * SLOTS * WM * WN, MIN_BLOCKS)
ks_mma(const T* __restrict__ X, T* __restrict__ Y, const T* __restrict__ W,
       int G, int b, int c, int d, long long B,
       long long sx_f, long long sx_b, long long sy_f, long long sy_b,
       int w_sk, int w_sl, int conj_w, int ktiles, int gtiles, long long tiles,
       unsigned long long d_magic) {
  using L = MmaLayout<T, SLOTS, BM, BN, BK, WM, WN, STAGES, ORDER, WT>;
  using R = typename L::R;                      // operand values' real type
  using Acc = typename parts_of<T>::acc;        // the accumulators' (float for float16)
  using S = typename L::S;
  using AOp = Operand<R, PRECISION, S::A_REGS>;
  using BOp = Operand<R, PRECISION, S::B_REGS>;
  constexpr int NT = L::NT, PARTS = L::PARTS, MT = L::MT, NTL = L::NTL;
  static_assert((ORDER == 0 ? BN : ORDER == 1 ? SLOTS : BK) % VX == 0 && (WT != 1 ? BK : BM) % VW == 0,
                "copy vectors must divide the tile");
  static_assert(!L::HALF || NTL % 2 == 0, "float16: one ldmatrix loads two N tiles");
  constexpr bool X_STAGED = ORDER == 1 && VX > 1;
  constexpr int XV = SLOTS * BK * BN / VX;            // vectors of X in a chunk
  constexpr int X_REPS = (XV + NT - 1) / NT;          // ... per thread (each_vector)
  constexpr int WV = SLOTS * BM * BK / VW;            // vectors of W in a chunk
  constexpr int W_REPS = (WV + NT - 1) / NT;
  // Keep the copies' origins in registers (three a vector) for few vectors a thread, and
  // only where a thread may have more than 128 registers (NT * MIN_BLOCKS < 512): under that
  // cap they are spilled and reloaded every step. Not in the group order, where they make
  // the float32 2 x 128 x 64 tiles spill.
  constexpr bool HOIST = X_REPS + W_REPS <= 8 && NT * MIN_BLOCKS < 512 && ORDER != 1;
  // Otherwise a thread walks its vectors by constant steps (Walk) where it can: X in the
  // group order (digits es, l, n; the batch column moves) or with one slot (the slot never
  // moves), W always (digits l, k, es or k, l, es; the slot moves by whole blocks; packed
  // weights, WT 2, need only the walk's shared-memory offsets). Worked out
  // anew each chunk, the origins' 64-bit index products would be a large share of the group
  // order's instructions, far more than its MMAs.
  using XWalk = Walk<ORDER == 0 ? BN / VX : ORDER == 2 ? BK / VX : SLOTS / VX, ORDER == 2 ? BN : BK, NT>;
  using WWalk = Walk<WT != 1 ? BK / VW : BM / VW, WT != 1 ? BM : BK, NT>;
  constexpr bool X_WALK = !HOIST && XWalk::LINEAR && (ORDER == 1 || SLOTS == 1);
  constexpr bool W_WALK = !HOIST && WWalk::LINEAR && WT != 2;
  // Whether all of a thread's X vectors lie in one slot, x_slot(tid): in the group order
  // lanes walk the slots and NT is a multiple of SLOTS / VX, so vector tid + rep*NT is
  // always in the same one; in the others only when there is one slot.
  constexpr bool X_ONE_SLOT = ORDER == 1 || SLOTS == 1;
  using XBits = typename Bits<VX * (int)sizeof(T)>::type;
  require_dynamic_smem<L::SMEM_BYTES>();

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const stages = reinterpret_cast<T*>(smem_raw);
  const unsigned stages_s = shared_address(stages);   // the same, as a shared address

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int slot = warp / (WM * WN), wm = (warp / WN) % WM, wn = warp % WN;
  const long long x_step = (long long)d * sx_f;   // X offset between l and l + 1
  const long long y_step = (long long)d * sy_f;   // Y offset between k and k + 1
  const long long bc = (long long)b * c;
  const int chunks = (c + BK - 1) / BK;
  const GroupOrigins origins(b, c, d, d_magic, sx_f, sy_f);
  const BlockRun block_run(tiles, chunks);
  const long long first = block_run.first, steps = block_run.steps;

  // Vector `e` of X in a chunk: its first slot es, reduction index l and batch column n.
  auto x_vector = [&](int e, int& es, int& l, int& n) {
    if constexpr (ORDER == 0)      { n = e % (BN / VX) * VX; l = e / (BN / VX) % BK; es = e / (BN / VX * BK); }
    else if constexpr (ORDER == 2) { l = e % (BK / VX) * VX; n = e / (BK / VX) % BN; es = e / (BK / VX * BN); }
    else                           { es = e % (SLOTS / VX) * VX; l = e / (SLOTS / VX) % BK; n = e / (SLOTS / VX * BK); }
  };
  // Vector `e` of W in a chunk: its slot es, row k and reduction index l.
  auto w_vector = [&](int e, int& es, int& k, int& l) {
    if constexpr (WT != 1) { l = e % (BK / VW) * VW; k = e / (BK / VW) % BM; es = e / (BK / VW * BM); }
    else                   { k = e % (BM / VW) * VW; l = e / (BM / VW) % BK; es = e / (BM / VW * BK); }
  };
  XBits x_staged[X_STAGED ? X_REPS : 1];

  // The block's walk over its tiles (ks_tiles.cuh): r1 is the radix of the second digit.
  using Cursor = TileCursor<BM, BN, SLOTS, ORDER == 0>;
  const long long r1 = ORDER == 0 ? tiles / ktiles / gtiles : gtiles;
  // Consecutive tiles: a stride of one id, added as digits. (A cursor that counts up with
  // its own carries, the same walk, makes the float64 two-blocks-per-SM tile spill.)
  const Cursor stride(1, ktiles, r1);

  // -- the copies: a cursor (load_tile, load_chunk) over the steps, STAGES - 1 ahead of the
  // products, with the origins of the tile it is in.
  Cursor load_tile(first, ktiles, r1);
  int load_chunk = 0;
  TileOrigin lt{};                    // load_tile's origin
  long long x_group = 0;              // X_ONE_SLOT: origin of this thread's X slot's group
  long long w_tile = 0;               // WT 2: where the tile's first chunk starts in W
  // A vector's source offset in chunk 0 of tile lt (chunk t reads t*BK further along l) and
  // its "room", how far along l it may read (c - l; 0 when its group, row or batch column
  // lies outside the problem).
  auto x_origin = [&](int e, long long& src, int& room) {
    int es, l, n;
    x_vector(e, es, l, n);
    const bool ok = lt.g0 + es < G && lt.n0 + n < B;
    const long long group = X_ONE_SLOT ? x_group : origins.x(lt.g0 + es);
    src = ok ? group + l * x_step + (lt.n0 + n) * sx_b : 0;
    room = ok ? c - l : 0;
  };
  auto w_origin = [&](int e, long long& src, int& room) {
    int es, k, l;
    w_vector(e, es, k, l);
    const bool ok = lt.g0 + es < G && lt.k0 + k < b;
    src = ok ? (lt.g0 + es) * bc + (long long)(lt.k0 + k) * w_sk + (long long)l * w_sl : 0;
    room = ok ? c - l : 0;
  };
  // With HOIST, the origins of this thread's vectors are kept in registers from chunk to
  // chunk, computed once per tile: a chunk's copy then costs an add and a compare instead
  // of 64-bit index products. Three registers a vector: only for few vectors per thread, or
  // the accumulators spill.
  long long x_src[HOIST ? X_REPS : 1], w_src[HOIST ? W_REPS : 1];
  int x_room[HOIST ? X_REPS : 1], w_room[HOIST ? W_REPS : 1];
  auto x_at_of = [&](int e) {
    int es, l, n;
    x_vector(e, es, l, n);
    return es * L::XS_SLOT + (L::X_KMAJOR ? n * L::XS_LD + l : l * L::XS_LD + n);
  };
  auto w_at_of = [&](int e) {
    int es, k, l;
    w_vector(e, es, k, l);
    return es * L::WS_SLOT + (L::W_KMAJOR ? k * L::WS_LD + l : l * L::WS_LD + k);
  };
  // With X_WALK / W_WALK, the walks (Walker); d1 is the reduction index but in X's in-group
  // order and W's stored or packed (WT 0, 2) blocks. Steps along d1 and d2: X's l, n (group order), l
  // (batch order) or n (in-group order); W's k or l, then the slot.
  Walker<XWalk, ORDER != 2, ORDER == 1 ? 1 : L::XS_LD, ORDER == 1 ? L::XS_LD : L::XS_SLOT> xw{};
  Walker<WWalk, WT == 1, L::WS_LD, L::WS_SLOT> ww{};
  xw.s1 = ORDER == 2 ? sx_b : x_step;
  xw.s2 = ORDER == 1 ? sx_b : 0;
  xw.at0 = x_at_of(tid);
  ww.s1 = WT == 0 ? w_sk : w_sl;
  ww.s2 = bc;
  ww.at0 = w_at_of(tid);
  auto enter_load_tile = [&]() {
    lt = load_tile.origin();
    if constexpr (X_ONE_SLOT) x_group = origins.x(lt.g0 + (ORDER == 1 ? tid % (SLOTS / VX) * VX : 0));
    if constexpr (HOIST) {
      each_vector<XV, NT>(tid, [&](int rep, int e) { x_origin(e, x_src[rep], x_room[rep]); });
      if constexpr (WT != 2)
        each_vector<WV, NT>(tid, [&](int rep, int e) { w_origin(e, w_src[rep], w_room[rep]); });
    }
    if constexpr (X_WALK) {
      int es, l, n;
      x_vector(tid, es, l, n);
      const int n_room = clamp_room(B - lt.n0 - n);
      // the digits no rep moves (the slot; the batch column in the batch order), and in the
      // in-group order the first vector's batch column, which later reps only move further
      const bool fixed_ok = lt.g0 + es < G && (ORDER == 1 || n_room > 0);
      xw.src = x_group + l * x_step + (lt.n0 + n) * sx_b;
      xw.room_l = fixed_ok ? c - l : 0;
      xw.room1 = ORDER == 2 ? n_room : 1;
      xw.room2 = ORDER == 1 ? n_room : 1;
    }
    if constexpr (WT == 2)
      w_tile = ((long long)(lt.g0 / SLOTS) * ktiles + lt.k0 / BM) * chunks * (SLOTS * BM * BK);
    if constexpr (W_WALK) {
      int es, k, l;
      w_vector(tid, es, k, l);
      ww.src = (lt.g0 + es) * bc + (long long)(lt.k0 + k) * w_sk + (long long)l * w_sl;
      ww.room_l = WT == 0 || lt.k0 + k < b ? c - l : 0;
      ww.room1 = b - lt.k0 - k;
      ww.room2 = G - lt.g0 - es;
    }
  };
  // The copies of the cursor's step into stage buffer `s`: load_x (staged X: into `staged`,
  // for stash_x), load_w for W's vectors rep_lo <= rep < rep_hi of this thread, then
  // next_load moves the cursor to the next step; load does all three.
  auto load_x = [&](int s, XBits (&staged)[X_STAGED ? X_REPS : 1]) {
    const unsigned xs = stages_s + s * L::STAGE * (int)sizeof(T);   // shared address
    const int l0 = load_chunk * BK;
    const T* const x_chunk = X + l0 * x_step;
    each_vector<XV, NT>(tid, [&](int rep, int e) {
      bool ok;
      long long origin;
      int at;
      if constexpr (X_WALK) {
        ok = xw.ok(rep, l0);
        origin = xw.origin(rep);
        at = xw.at(rep);
      } else {
        int room;
        if constexpr (HOIST) { origin = x_src[rep]; room = x_room[rep]; }
        else x_origin(e, origin, room);
        ok = l0 < room;
        at = x_at_of(e);
      }
      const T* src = ok ? x_chunk + origin : X;
      if constexpr (X_STAGED)
        staged[rep] = ok ? *reinterpret_cast<const XBits*>(src) : XBits{};
      else
        cp_async<VX * (int)sizeof(T)>(xs + at * (int)sizeof(T), src, ok);
    });
  };
  auto load_w = [&](int s, int rep_lo, int rep_hi) {
    const unsigned ws = stages_s + (s * L::STAGE + L::XS_SIZE) * (int)sizeof(T);   // shared
    if constexpr (WT == 2) {   // one contiguous run, every vector in the problem or zero
      // this thread's first vector; vector rep lies rep * NT * VW further (an immediate)
      const T* const w_first = W + w_tile + (long long)load_chunk * (SLOTS * BM * BK) + tid * VW;
      each_vector<WV, NT>(tid, [&](int rep, int e) {
        if (rep < rep_lo || rep >= rep_hi) return;
        const int at = WWalk::LINEAR ? ww.at(rep) : w_at_of(e);
        cp_async<VW * (int)sizeof(T)>(ws + at * (int)sizeof(T), w_first + rep * NT * VW, true);
      });
    } else {
      const int l0 = load_chunk * BK;
      const T* const w_chunk = W + (long long)l0 * w_sl;
      each_vector<WV, NT>(tid, [&](int rep, int e) {
        if (rep < rep_lo || rep >= rep_hi) return;
        bool ok;
        long long origin;
        int at;
        if constexpr (W_WALK) {
          ok = ww.ok(rep, l0);
          origin = ww.origin(rep);
          at = ww.at(rep);
        } else {
          int room;
          if constexpr (HOIST) { origin = w_src[rep]; room = w_room[rep]; }
          else w_origin(e, origin, room);
          ok = l0 < room;
          at = w_at_of(e);
        }
        const T* src = ok ? w_chunk + origin : W;
        cp_async<VW * (int)sizeof(T)>(ws + at * (int)sizeof(T), src, ok);
      });
    }
  };
  auto next_load = [&]() {
    if (++load_chunk == chunks) {
      load_chunk = 0;
      load_tile.advance(stride, ktiles, r1);
      enter_load_tile();
    }
  };
  auto load = [&](int s, XBits (&staged)[X_STAGED ? X_REPS : 1]) {
    load_x(s, staged);
    load_w(s, 0, W_REPS);
    next_load();
  };
  // Staged X: the registers `staged` that load(...) filled into stage buffer `s`, one slot
  // per element.
  auto stash_x = [&](int s, const XBits (&staged)[X_STAGED ? X_REPS : 1]) {
    T* const xs = stages + s * L::STAGE;
    each_vector<XV, NT>(tid, [&](int rep, int e) {
      const int at = X_WALK ? xw.at(rep) : x_at_of(e);
      const T* v = reinterpret_cast<const T*>(&staged[rep]);
#pragma unroll
      for (int u = 0; u < VX; ++u) xs[at + u * L::XS_SLOT] = v[u];
    });
  };

  // Y[rows(g)[k], n] of tile `tile` from the accumulators. The staged epilogues pass the
  // tile through shared memory in `area` (MmaLayout): `whole` after the block's last tile,
  // else the buffer of `stage`, which the products just consumed and the next step's
  // barrier guards.
  auto store = [&](const TileOrigin& tile, Acc (&acc)[PARTS][MT][NTL][S::C_REGS], int stage,
                   bool whole) {
    const int k0 = tile.k0, g0 = tile.g0;
    const long long n0 = tile.n0;
    T* const ys = whole ? stages : stages + stage * L::STAGE;
    if constexpr (X_STAGED) {   // the group order (ks_mma_layout.cuh)
      store_group_tile<L, VX>(Y, ys, whole, tile, acc, tid, slot, wm, wn, G, b, B, y_step, sy_b,
                              origins);
    } else if constexpr (ORDER == 0 && VX > 1) {
      // Batch-size-last: Y's rows run along n, contiguous, as X's do; VX | B (copy_vectors)
      // keeps VX-wide pieces of a row aligned. A warp's accumulators hold 8 rows of 8
      // columns per MMA tile; written straight from registers, each row goes as 4-to-32-byte
      // pieces, half a sector or less at a time, which loads L2 far more than DRAM. Through
      // shared memory (Ys, pairs of adjacent n per lane) lanes store whole VX-wide vectors
      // along the rows instead.
      const long long y_group = origins.y(g0);   // slot 0's (SLOTS == 1 but in the tuner)
      constexpr int YS_LD = L::YS_LD;
      const int YR = whole ? L::ys_rows(L::AREA) : L::ys_rows(L::STAGE);
      const int YV = YR * BN / VX;
      for (int r_pass = 0; r_pass < SLOTS * BM; r_pass += YR) {
        __syncthreads();   // the area's readers (products, the previous pass) are done
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int q = 0; q < NTL; ++q)
#pragma unroll
            for (int i = 0; i < S::C_REGS; i += 2) {   // i, i + 1: columns n, n + 1
              const int r = slot * BM + wm * L::WTM + mt * S::M + S::c_row(lane, i) - r_pass;
              const int n = wn * L::WTN + q * S::N + S::c_col(lane, i);
              if (YR == SLOTS * BM || (r >= 0 && r < YR)) {
                vec<T, 2> pair;
                pair.v[0] = from_parts<T>(acc[0][mt][q][i], acc[PARTS - 1][mt][q][i]);
                pair.v[1] = from_parts<T>(acc[0][mt][q][i + 1], acc[PARTS - 1][mt][q][i + 1]);
                *reinterpret_cast<vec<T, 2>*>(ys + r * YS_LD + n) = pair;
              }
            }
        __syncthreads();
#pragma unroll 4
        for (int e = tid; e < YV; e += NT) {
          const int n = e % (BN / VX) * VX, r = r_pass + e / (BN / VX);
          const int es = r / BM, k = r % BM;
          if (g0 + es < G && k0 + k < b && n0 + n < B) {
            const long long group = SLOTS == 1 ? y_group : origins.y(g0 + es);
            *reinterpret_cast<XBits*>(Y + group + (k0 + k) * y_step + n0 + n) =
                *reinterpret_cast<const XBits*>(ys + (r - r_pass) * YS_LD + n);
          }
        }
      }
    } else if (g0 + slot < G) {
      // Straight from the accumulators.
      const long long ybase = origins.y(g0 + slot);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int q = 0; q < NTL; ++q)
#pragma unroll
          for (int i = 0; i < S::C_REGS; ++i) {
            const int k = k0 + wm * L::WTM + mt * S::M + S::c_row(lane, i);
            const long long n = n0 + wn * L::WTN + q * S::N + S::c_col(lane, i);
            if (k < b && n < B)
              Y[ybase + k * y_step + n * sy_b] = from_parts<T>(acc[0][mt][q][i], acc[PARTS - 1][mt][q][i]);
          }
    }
  };

  if (steps == 0) return;
  enter_load_tile();
  // The first STAGES - 1 steps' copies. Staged X is held in registers per step until all
  // are issued, then stored: its loads are in flight together, one memory latency instead
  // of one per step (a block of the group order may run only a few steps, so a wait for
  // each in turn would be a visible share of its time). The accumulators
  // are not live yet, so the registers are free.
  XBits x_first[X_STAGED ? STAGES - 1 : 1][X_STAGED ? X_REPS : 1];
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) {
      load(s, x_first[X_STAGED ? s : 0]);
    }
    cp_async_commit();
  }
  if constexpr (X_STAGED) {
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
      if (s < steps) stash_x(s, x_first[s]);
  }

  Acc acc[PARTS][MT][NTL][S::C_REGS];
  each_register<Acc>(acc, acc, [](Acc& sum, Acc) { sum = Acc(0); });
  Cursor tile(first, ktiles, r1);   // the tile whose products run
  int chunk = 0, stage = 0;
  // 3xTF32 (TWO_LEVEL): products go to partial sums, added to `acc` by FP32 adds (round to
  // nearest). The tensor cores add to their accumulator with truncation (round toward
  // zero): over a whole reduction of length c the error would grow like c, not like
  // sqrt(c). Partial sums of at most 16 steps of the reduction keep it independent of the
  // tile and the chunk (with one sum per chunk, the error grows with the chunk: complex64's
  // chunks of 32 lose accuracy against chunks of 16). DMMA rounds to
  // nearest, and the TF32 opt-in is approximate anyway: their products add to `acc`.
  //   ROW_SUMS (float32 in the group order, warp pieces of 64 columns or more): the sums
  //     of one row of MMA tiles (mt) and one k-step, NTL * 4 registers, with W's fragment
  //     of that row loaded just before. That leaves room for 64 x 64 warp pieces, which
  //     re-read W from L2 half as often as 64 x 32 ones (faster where d >= 16 or
  //     b >= 768). Narrower pieces keep `part`: with row sums their MMAs wait on each other
  //     sooner, which makes 64 x 32 pieces slower.
  //   Otherwise `part`, as many registers as `acc`, added every SUM_K steps (every chunk
  //     the heuristic or the autotuner picks is 8 or a multiple of 16; any other chunk is
  //     summed whole), with every row's W fragment loaded first: complex64 is slower with
  //     row sums, which spill more of its registers.
  constexpr bool TWO_LEVEL = sizeof(R) == 4 && PRECISION == PRECISION_DEFAULT;
  constexpr bool ROW_SUMS = TWO_LEVEL && PARTS == 1 && ORDER == 1 && NTL >= 8;
  constexpr bool PART = TWO_LEVEL && !ROW_SUMS;
  constexpr int SUM_K = PART && BK % 16 == 0 ? 16 : BK;
  static_assert(BK % SUM_K == 0 && SUM_K % S::K == 0, "partial sums tile the chunk");
  // SPREAD_W (ROW_SUMS): W's copies of the next step are spread over the step's products,
  // W_REPS / ITERS of them at the start of each of its ITERS (k-step, row of MMA tiles)
  // iterations, and the cursor moves after them. A cp.async reads its address registers
  // late: issued back to back, each copy after the first waits for the one before to free
  // the registers it reuses; spread, those waits overlap the products.
  // X's copies come first (staged X must land before stash_x at the end of the step). In
  // the other paths, whose copies are fewer per MMA, the same spread is no faster, and
  // sometimes slower (float64, float32 batch order): there every copy is issued at the top
  // of the step.
  constexpr bool SPREAD_W = ROW_SUMS;
  constexpr int ITERS = BK / S::K * MT;
  for (long long step = 0; step < steps; ++step) {
    cp_async_wait<STAGES - 2>();   // this thread's copies of `step` have landed ...
    __syncthreads();               // ... everyone's have, and the buffer refilled next is free
    const int next_stage = stage == 0 ? STAGES - 1 : stage - 1;   // (step + STAGES - 1) % STAGES
    const bool more = step + STAGES - 1 < steps;
    if (more) load_x(next_stage, x_staged);
    if constexpr (!SPREAD_W) {
      if (more) {
        load_w(next_stage, 0, W_REPS);
        next_load();
      }
      cp_async_commit();
    }
    Acc part[PART ? PARTS : 1][PART ? MT : 1][PART ? NTL : 1][S::C_REGS];
    auto sum = [&](int p, int mt, int q) -> Acc (&)[S::C_REGS] {
      if constexpr (PART) return part[p][mt][q]; else return acc[p][mt][q];
    };
    if constexpr (PART) each_register<Acc>(part, part, [](Acc& sum, Acc) { sum = Acc(0); });
    const T* const xs = stages + stage * L::STAGE + slot * L::XS_SLOT;
    const T* const ws = stages + stage * L::STAGE + L::XS_SIZE + slot * L::WS_SLOT;
#pragma unroll
    for (int kk = 0; kk < BK; kk += S::K) {
      if constexpr (ROW_SUMS) {
        BOp x[NTL][1];
        x_fragments<T, L>(x, xs, lane, wn * L::WTN, kk);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int it = kk / S::K * MT + mt;
          if (more) load_w(next_stage, it * W_REPS / ITERS, (it + 1) * W_REPS / ITERS);
          AOp a[1];
          w_fragment<T, L>(a, ws, lane, wm * L::WTM + mt * S::M, kk, conj_w);
          Acc sums[NTL][S::C_REGS];
          each_register<Acc>(sums, sums, [](Acc& sum, Acc) { sum = Acc(0); });
          // Term by term over the row's tiles: consecutive MMAs write different sums.
#pragma unroll
          for (int term = 0; term < Terms<R, PRECISION>::value; ++term)
#pragma unroll
            for (int q = 0; q < NTL; ++q) mma_term<PRECISION>(term, sums[q], a[0], x[q][0]);
          each_register<Acc>(acc[0][mt], sums, [](Acc& sum, Acc v) { sum += v; });
        }
      } else {
        warp_k_step<T, L, PRECISION>(ws, xs, lane, wm, wn, kk, conj_w, sum);
        if constexpr (PART) close_partial_sums<SUM_K, S::K, Acc>(kk, acc, part);
      }
    }
    if constexpr (SPREAD_W) {
      if (more) next_load();
      cp_async_commit();
    }
    if constexpr (X_STAGED) {
      if (more) stash_x(next_stage, x_staged);
    }
    if (++chunk == chunks) {   // the tile is complete
      store(tile.origin(), acc, stage, step == steps - 1);
      each_register<Acc>(acc, acc, [](Acc& sum, Acc) { sum = Acc(0); });
      chunk = 0;
      tile.advance(stride, ktiles, r1);
    }
    stage = stage == STAGES - 1 ? 0 : stage + 1;
  }
  cp_async_wait<0>();   // only empty groups remain; leave none behind
}

}  // namespace ks
