// The group order on the tensor cores for float32, float16 and bfloat16: ks_mma.cu's
// batch-size-first product with d > 1 (ORDER 1, also strided views), in tiles of one warp per
// group and 64 or more batch columns (the heuristic's tiles for batches of 8192 and more).
//
// The same product, parameters, tiles, tile order, shared-memory layout (MmaLayout, plus an
// mbarrier per stage after it) and epilogue (store_group_tile) as ks_mma.cu's group order
// (read its header first). A block takes SLOTS consecutive groups; warp `slot` computes the
// BM x BN piece of group g0 + slot as MT x NTL MMA tiles of 16 x 8 (rows k x batch columns
// n), reducing over l in chunks of BK.
//
// What differs is the copies. ks_mma.cu's copies add to a step about as much time as its
// products take, or more: X's and W's 16-byte vectors lie in 32-byte pieces of global
// memory, each costing the load/store unit a lookup of its own. Here
//   - a step's W tile is one contiguous run of packed weights that one thread copies with a
//     bulk copy on the Tensor Memory Accelerator (W_BULK);
//   - X's vectors go by cp.async into a swizzled image of global memory's order where that
//     pays (X_ASYNC), else into slot-major rows through registers, loaded a step ahead or,
//     for 16-bit X, read back from a ring that cp.async filled earlier (X_LEAD);
//   - every address is fixed once per block or per tile and moved by constants, shared memory
//     by 32-bit offsets. (ks_mma.cu's 64-bit copy origins and generic pointers are a large
//     share of a warp's instructions a step; cutting them alone does not make a step faster.)
//
// 16-bit X (E == 2): a row n of X holds VX adjacent groups' values at each reduction index l
// (one vector), but an MMA fragment register holds two values of one group at l and l + 1.
// So a thread loads the vectors at (n, l) and (n, l + 1) for an even l, and packs value u of
// each into one 32-bit word (l in the low half, as the fragments hold it) for group u:
// VX words, each stored to its group's K-major row Xs[slot][n][l .. l + 1], from which
// ldmatrix reads the fragments as for float32 (16-byte rows: eight 16-bit values, four
// floats). A warp owns one group, so the regrouping cannot stay in registers: the other
// groups' words cross to their warps through shared memory. W arrives by bulk copies in
// chunks of 16 (32-byte rows, as float32's chunks of 8), the products are m16n8k16 MMAs
// into float32 accumulators, and the epilogue rounds them once (store_group_tile).
//
// Products (3xTF32, PRECISION_DEFAULT): the three products of one row of MMA tiles and one
// k-step go to fresh sums (MMAs whose first term adds to zero), which FP32 adds to the
// accumulators (round to nearest): the tensor cores truncate as they accumulate, and sums of
// 8 products keep the error of a long reduction at float32's (ks_mma.cu, ROW_SUMS). The
// TF32 opt-in adds its one product to the accumulators directly. (Two rows of MMA tiles at a
// time, 16 independent products, spill and do not make the products faster.)
//
// Pipeline: as ks_mma.cu's, STAGES buffers filled STAGES - 1 steps ahead (a step is one
// chunk of one tile; a block runs a run of consecutive tiles as one stream of steps), with
// the copies a thread issues spread over the step's (k-step, row tile) iterations
// (ks_mma.cu, SPREAD_W). Register-staged X is loaded before a step's products and stored to
// shared memory after them: its loads have one step's products to land in, and the registers
// they need cap the bytes in flight (one block an SM).
//
// X_LEAD > 0 (16-bit X, X's ring): X's vectors go by cp.async into a ring of X_LEAD + 1
// chunks after the stages (each thread's own vectors, which it alone reads back: no barrier,
// no bank conflict), issued X_LEAD steps before the step that regroups them into the stage's
// rows (as stash_x does from registers). X is then in flight X_LEAD + 1 steps instead of
// one, in shared memory instead of registers. W's bulk copies keep their lead (STAGES - 1):
// they follow a cursor of their own, X_LEAD steps behind X's.
//
// Clusters (ks_mma_group_cluster, ROWS x QB blocks, 16-bit X through its ring): the kernel
// is bound by L2's bandwidth, not DRAM's, and L2 serves the same bytes many times: each X
// chunk once per row tile (b / BM), each W tile once per batch tile. A cluster takes one
// group tile and QB consecutive batch tiles; block rank = ri + ROWS qi takes batch tile qi
// and row tiles ri, ri + ROWS, ...
//   - X: the ROWS blocks of one batch tile need the same chunks. Each copies and regroups
//     the X vectors of its warps slot = ri (mod ROWS) only, and stores each regrouped word
//     into the same place of the ROWS blocks' stages by st.async;
//   - W: the QB blocks of one row tile need the same tiles. Each copies a QB-th of the tile
//     by a bulk copy multicast to the same place of the QB blocks' stages.
// Both count their bytes on the stage's barrier of the block they write (which expects W's
// tile and the whole X chunk). Before a block writes a stage of the others, every block of
// the cluster must be done reading it: a second mbarrier per stage ("free", after the ring)
// takes one arrival from each block at the top of the step that refills the stage, and the
// writers wait on their own block's. Every remote write or arrival is waited on by the block
// it targets, so no block leaves while another may still touch its memory.
#include "ks_cluster.cuh"
#include "ks_launch.cuh"
#include "ks_mma_layout.cuh"

namespace ks {

// The product of both kernels below: clusters of ROWS x QB blocks (1 x 1: none).
template <class T, int PRECISION, int SLOTS, int BM, int BN, int BK, int STAGES, int WT, int VX,
          int VW, bool X_ASYNC, int X_LEAD, int ROWS, int QB>
__device__ __forceinline__ void
group_product(const T* __restrict__ X, T* __restrict__ Y, const T* __restrict__ W,
              int G, int b, int c, int d, long long B,
              long long sx_f, long long sx_b, long long sy_f, long long sy_b,
              int w_sk, int w_sl, int conj_w, int ktiles, int gtiles, long long tiles,
              unsigned long long d_magic) {
  using L = MmaLayout<T, SLOTS, BM, BN, BK, 1, 1, STAGES, 1, WT>;
  using S = typename L::S;
  using R = typename L::R;
  using AOp = Operand<R, PRECISION, S::A_REGS>;
  using BOp = Operand<R, PRECISION, S::B_REGS>;
  constexpr int NT = L::NT, MT = L::MT, NTL = L::NTL, E = (int)sizeof(T);   // E: bytes an element
  static_assert(E == 4 || E == 2, "float32, float16 or bfloat16");
  using XBits = typename Bits<VX * E>::type;
  // 16-bit X moves in pairs of reduction indices (the header): XU values of l a unit
  constexpr bool PAIRS = E == 2;
  constexpr int XU = PAIRS ? 2 : 1;
  // float32's default precision sums each k-step's three products apart (ROW_SUMS below)
  constexpr bool ROW_SUMS = Terms<R, PRECISION>::value > 1;
  static_assert(WT == 0 || WT == 2 || WT == 3, "stored (WT 0) or packed (WT 2, 3) blocks");
  // WT 3 (W_BULK): packed blocks whose rows are unpadded, their two 16-byte halves swapped
  // where k / 4 is odd (kernels/ks_mma.py, packed_weights; ldmatrix stays conflict-free):
  // a step's W tile is one contiguous run that thread 0 copies with one bulk copy on the
  // Tensor Memory Accelerator, counted on the stage's mbarrier (after the layout's area), so
  // W takes the load/store unit no work. With cp.asyncs each 16-byte vector of a 32-byte row
  // piece costs the unit a tag lookup of its own; the bulk copy is faster on most patterns,
  // though not on all.
  constexpr bool W_BULK = WT == 3;
  static_assert(!W_BULK || BK * E == 32, "bulk W: rows of 32 bytes (chunks of 8 floats, 16 halves)");
  static_assert(PAIRS ? W_BULK && !X_ASYNC : true, "16-bit: bulk W, register-staged X");
  constexpr unsigned W_TILE_BYTES = SLOTS * BM * BK * E;
  // X's vectors: e = tid + rep * NT has digits (slot / VX, l / XU, n), the first fastest. NT
  // is a multiple of SLOTS / VX and NT / (SLOTS / VX) = 32 * VX one of BK / XU, so every rep
  // of a thread has its slot x_es and index x_l and moves the batch column by X_NSTEP.
  constexpr int XR0 = SLOTS / VX, XL = BK / XU, X_NSTEP = 32 * VX / XL, X_REPS = BN / X_NSTEP;
  static_assert(32 * VX % XL == 0 && BN % X_NSTEP == 0, "X's copies tile the chunk");
  // X_ASYNC (vectors of four groups, 16 bytes): X's vectors are cp.asyncs like W's, issued
  // STAGES - 1 steps ahead, into the stage's X area in global memory's order: row n of the
  // chunk holds CH = BK * SLOTS / 4 16-byte pieces, piece (l, h) (groups 4h .. 4h + 3 at
  // reduction index l) at place (l * SLOTS / 4 + h) ^ x_swizzle(n). A warp then reads its
  // group's fragment values one word at a time with 4-way bank conflicts (each word lies at
  // place slot % 4 of its piece, and the 32 lanes' pieces can fill only the 8 piece positions
  // of a 128-byte row: the swizzle gives odd rows the positions that even rows leave free).
  // That costs shared-memory bandwidth; in exchange no X passes through registers, and X is in
  // flight STAGES - 1 steps ahead instead of one. The launch takes it for 48-row tiles of eight
  // slots (b = 48 or 96: short reductions against the loads), where it is faster than
  // register-staged X; elsewhere staged X is faster. Without it X's vectors pass through
  // registers and land in slot-major rows
  // (ks_mma.cu's layout).
  static_assert(!X_ASYNC || VX == 4, "X_ASYNC: vectors of four groups");
  constexpr int CH = BK * SLOTS / 4;
  auto x_swizzle = [](int n) { return (n & 1) * (SLOTS == 8 ? 1 : 4); };
  static_assert(!X_ASYNC || SLOTS == 4 || SLOTS == 8, "X_ASYNC's swizzle: four or eight slots");
  static_assert(!X_ASYNC || CH * BN <= L::XS_SIZE / 4, "X_ASYNC's chunk fits the X area");
  // W's vectors: digits (l / VW, k, slot); rep moves the pair (k, slot) by WQ.
  constexpr int WR0 = BK / VW, WQ = NT / WR0, W_REPS = SLOTS * BM / WQ;
  static_assert(SLOTS * BM % WQ == 0, "W's copies tile the chunk");
  static_assert(X_REPS <= 32 && W_REPS <= 32, "a bit a vector in x_ok, w_ok");
  constexpr int ITERS = BK / S::K * MT;   // (k-step, row tile) iterations of a step
  // X's ring (X_LEAD > 0): RING chunks of X_CHUNK_BYTES from RING_AT, thread tid's vector
  // (rep, u) at ((rep * XU + u) * NT + tid) * X_VECTOR bytes into a chunk
  constexpr bool X_RING = X_LEAD > 0;
  static_assert(!X_RING || (PAIRS && !X_ASYNC), "X's ring: 16-bit X, regrouped at stash time");
  constexpr int RING_CHUNKS = X_LEAD + 1;
  constexpr unsigned X_VECTOR = VX * E, X_CHUNK_BYTES = NT * X_REPS * XU * X_VECTOR;
  constexpr unsigned RING_AT = round_up(L::SMEM_BYTES, 16);
  // clusters (the header): blocks regroup X into, and copy W to, each other's stages
  constexpr int CS = ROWS * QB;
  constexpr bool CLUSTER = CS > 1;
  static_assert(!CLUSTER || (X_RING && W_BULK), "a cluster: 16-bit X through the ring, bulk W");
  static_assert(SLOTS % ROWS == 0, "each block of a cluster regroups SLOTS / ROWS warps' X");
  static_assert(W_TILE_BYTES % (16 * QB) == 0, "W's tile in QB parts of whole 16 bytes");
  // the bytes a cluster's blocks regroup into a stage of each: every thread's words, once
  constexpr unsigned X_STAGE_BYTES = NT * X_REPS * VX * 4;
  // CLUSTER: stage s's "free" barrier at EMPTY_AT + 8 s (after the ring)
  constexpr unsigned EMPTY_AT = RING_AT + RING_CHUNKS * X_CHUNK_BYTES;
  require_dynamic_smem<CLUSTER ? EMPTY_AT + 8 * STAGES
                               : X_RING ? EMPTY_AT : L::SMEM_BYTES>();

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const area = reinterpret_cast<T*>(smem_raw);   // the epilogue's generic view
  const unsigned smem = shared_address(smem_raw);

  const int tid = threadIdx.x, lane = tid & 31, slot = tid >> 5;
  const long long x_step = (long long)d * sx_f;   // X offset between l and l + 1
  const long long y_step = (long long)d * sy_f;   // Y offset between k and k + 1
  const long long bc = (long long)b * c;
  const int chunks = (c + BK - 1) / BK;
  const GroupOrigins origins(b, c, d, d_magic, sx_f, sy_f);
  const unsigned rank = CLUSTER ? cluster_rank() : 0;   // ri + ROWS qi (the header)
  const int ri = rank % ROWS, qi = rank / ROWS;
  const BlockRun block_run = CLUSTER ? BlockRun(ktiles, gtiles, chunks, ROWS, QB, rank)
                                     : BlockRun(tiles, chunks);
  const long long first = block_run.first;
  // a block's steps: at most TILE_RUN tiles (kernels/operands.py) of c / BK chunks, an int
  const int steps = (int)block_run.steps;
  if (steps == 0) return;   // (every block of a cluster alike)

  // -- this thread's copies, fixed for the kernel
  // 16-bit vectors of every slot's group (XR0 == 1) in chunks of 16: a warp's lanes take 4
  // pairs x 8 rows, (pair, row) = (lane % 4 + 4 (slot % 2), lane / 4 + 8 (slot / 2)), whose
  // words (rows XS_LD / 2 = 12 words apart) fall in 32 distinct banks; e's digits above would
  // put 8 pairs x 4 rows in a warp, a two-way conflict on every store
  constexpr bool X_SPREAD = PAIRS && XR0 == 1 && BK == 16 && SLOTS % 2 == 0;
  const int x_es = tid % XR0 * VX;
  const int x_l = (X_SPREAD ? (lane & 3) + 4 * (slot & 1) : tid / XR0 % XL) * XU;
  const int x_n = X_SPREAD ? (lane >> 2) + 8 * (slot >> 1) : tid / (XR0 * XL);
  // where vector rep = 0 lands in a stage (later reps X_NSTEP rows further)
  const unsigned x_at = X_ASYNC ? (x_n * CH + ((x_l * (SLOTS / 4) + x_es / 4) ^ x_swizzle(x_n))) * 16
                                : (x_es * L::XS_SLOT + x_n * L::XS_LD + x_l) * E;
  const long long x_nstride = X_NSTEP * sx_b;     // X offset between reps
  const int w_l = tid % WR0 * VW;
  // W vector rep: (k, slot) = (w_t + rep * WQ) % BM, / BM. Where WQ is a multiple of BM a
  // thread keeps its row and moves the slot by W_ESTEP each rep: its vectors lie a constant
  // step apart in shared and global memory. Otherwise (BM = 48, say) each rep is decoded.
  constexpr bool W_LINEAR = WQ % BM == 0;
  constexpr int W_ESTEP = WQ / BM;
  const int w_t = tid / WR0;
  auto w_k = [&](int rep) { return W_LINEAR ? w_t % BM : (w_t + rep * WQ) % BM; };
  auto w_es = [&](int rep) { return W_LINEAR ? w_t / BM + rep * W_ESTEP : (w_t + rep * WQ) / BM; };
  const unsigned w_at0 = (L::XS_SIZE + w_es(0) * L::WS_SLOT + w_k(0) * L::WS_LD + w_l) * E;
  // where W vector rep lands in a stage, from w_at0, and lies in W, from w_src (WT 0)
  auto w_at = [&](int rep) {
    return W_LINEAR ? w_at0 + rep * W_ESTEP * L::WS_SLOT * E
                    : (L::XS_SIZE + w_es(rep) * L::WS_SLOT + w_k(rep) * L::WS_LD + w_l) * E;
  };
  const long long w_estride = W_ESTEP * bc;
  auto w_off = [&](int rep) {
    return W_LINEAR ? rep * w_estride
                    : (w_es(rep) - w_es(0)) * bc + (long long)(w_k(rep) - w_k(0)) * w_sk;
  };
  // ldmatrix rows of a lane: X tiles (q, q + 1) at n = 8q + (lane & 7) + 8 (lane >> 4),
  // 16 bytes into the k-step where (lane >> 3) & 1 (l = kk + 4 of floats, kk + 8 of halves);
  // W row tile mt at k = 16 mt + (lane & 15), 16 bytes in where lane >> 4 (W_BULK: the half
  // the packing put there). Each matrix is then one fragment register: W's a0 .. a3, and the
  // B registers of X tiles q and q + 1, in both element sizes.
  const unsigned x_frag = (slot * L::XS_SLOT + ((lane & 7) + 8 * (lane >> 4)) * L::XS_LD) * E
                          + 16 * ((lane >> 3) & 1);
  const unsigned w_frag = W_BULK
      ? (L::XS_SIZE + slot * BM * BK + (lane & 15) * BK) * E + ((lane >> 4) ^ ((lane >> 2) & 1)) * 16
      : (L::XS_SIZE + slot * L::WS_SLOT + (lane & 15) * L::WS_LD + 4 * (lane >> 4)) * E;
  const unsigned bars = smem + L::AREA * E;   // W_BULK: stage s's mbarrier at bars + 8 s
  // X_ASYNC: B fragment register i of tile q at k-step kk is X[n = 8q + lr][l = kk + lc + 4i]
  // of this warp's group (lr = lane / 4, lc = lane % 4): x_word[i] plus constants
  auto x_word = [&](int i) {
    const int lr = lane >> 2, lc = lane & 3;
    return (unsigned)((lr * CH + (((lc + 4 * i) * (SLOTS / 4) + slot / 4) ^ x_swizzle(lr))) * 16
                      + (slot & 3) * E);
  };
  const unsigned x_word0 = x_word(0), x_word1 = x_word(1);

  auto stage_at = [&](int stage) { return smem + stage * (L::STAGE * E); };

  // -- the copies' cursor: (load_tile, load_chunk), STAGES - 1 steps ahead of the products
  // (STAGES - 1 + X_LEAD with X's ring, whose W copies follow a cursor of their own)
  using Cursor = TileCursor<BM, BN, SLOTS, false>;
  const long long r1 = gtiles;
  const Cursor stride(ROWS, ktiles, r1);   // a cluster's blocks: every ROWS-th row tile
  Cursor load_tile(first, ktiles, r1);
  int load_chunk = 0;
  const T* x_src = X;   // this thread's first X vector in the load tile's chunk
  // W_BULK: the load tile's chunk; WT 2: this thread's first vector in it; WT 0: its vector
  // rep = 0 in the load tile's chunk
  const T* w_src = W;
  unsigned x_ok = 0, w_ok = 0;   // bit rep: vector rep lies in the problem (but for l)
  auto enter_load_tile = [&]() {
    const TileOrigin lt = load_tile.origin();
    const bool group = lt.g0 + x_es < G;
    x_src = X + (group ? origins.x(lt.g0 + x_es) + x_l * x_step + (lt.n0 + x_n) * sx_b : 0);
    x_ok = 0;
#pragma unroll
    for (int rep = 0; rep < X_REPS; ++rep)
      x_ok |= (unsigned)(group && lt.n0 + x_n + rep * X_NSTEP < B) << rep;
    if constexpr (WT >= 2) {   // packed: the tile's chunks one run after the other, zero-filled
      w_src = W + ((long long)(lt.g0 / SLOTS) * ktiles + lt.k0 / BM) * chunks * (SLOTS * BM * BK)
              + (W_BULK ? 0 : tid * VW);
    } else {
      w_src = W + (lt.g0 + w_es(0)) * bc + (long long)(lt.k0 + w_k(0)) * w_sk + w_l * w_sl;
      w_ok = 0;
#pragma unroll
      for (int rep = 0; rep < W_REPS; ++rep)
        w_ok |= (unsigned)(lt.g0 + w_es(rep) < G && lt.k0 + w_k(rep) < b) << rep;
    }
  };
  // The copies of the cursor's step into stage `s` (shared address of its base): X by load_x
  // into registers (stash_x stores them) or by copy_x; W by load_w (its vectors rep_lo <= rep
  // < rep_hi) or, W_BULK, by thread 0's bulk_w (whole tile); next_load moves the cursor on.
  // register-staged (not X_ASYNC): vector u of a rep at l + u (u < XU)
  auto load_x = [&](XBits (&staged)[X_REPS][XU]) {
#pragma unroll
    for (int u = 0; u < XU; ++u) {
      const unsigned ok_bits = load_chunk * BK + x_l + u < c ? x_ok : 0;
#pragma unroll
      for (int rep = 0; rep < X_REPS; ++rep) {
        const bool ok = ok_bits >> rep & 1;
        staged[rep][u] = ok ? *reinterpret_cast<const XBits*>(x_src + rep * x_nstride + u * x_step)
                            : XBits{};
      }
    }
  };
  auto copy_x = [&](unsigned s, int rep_lo, int rep_hi) {   // X_ASYNC
    const unsigned ok_bits = load_chunk * BK + x_l < c ? x_ok : 0;
#pragma unroll
    for (int rep = 0; rep < X_REPS; ++rep) {
      if (rep < rep_lo || rep >= rep_hi) continue;
      const bool ok = ok_bits >> rep & 1;
      cp_async<16>(s + x_at + rep * X_NSTEP * CH * 16, ok ? x_src + rep * x_nstride : X, ok);
    }
  };
  // group u of each rep to its slot's row: floats one by one; 16-bit values as the words of
  // group u's values at l and l + 1 (the header)
  // CLUSTER: each word to the same place in every block of the cluster (st.async), counted on
  // the stage's barrier there (`bar`: this block's address of it)
  // CLUSTER: this block's shared window mapped to that of the q-th block of its batch tile
  unsigned mapped[ROWS];
#pragma unroll
  for (int q = 0; q < ROWS; ++q) mapped[q] = CLUSTER ? map_to_rank(smem, q + ROWS * qi) : smem;
  auto stash_x = [&](unsigned s, const XBits (&staged)[X_REPS][XU], unsigned bar) {
    if constexpr (CLUSTER && X_SPREAD && VX % 4 == 0) {
      // the quad's lanes (lane % 4 = p) hold, per group u, the four words of one 16-byte
      // piece of u's row (l-pair p of the eight at x_l - 2p): a transpose in the quad gives
      // lane p the pieces of groups p * GL + j whole, one 16-byte st.async each
      constexpr int GL = VX / 4;
      const int p = lane & 3;
#pragma unroll
      for (int rep = 0; rep < X_REPS; ++rep) {
        const unsigned short* lo = reinterpret_cast<const unsigned short*>(&staged[rep][0]);
        const unsigned short* hi = reinterpret_cast<const unsigned short*>(&staged[rep][1]);
        unsigned w[VX];
#pragma unroll
        for (int u = 0; u < VX; ++u) w[u] = (unsigned)lo[u] | (unsigned)hi[u] << 16;
#pragma unroll
        for (int j = 0; j < GL; ++j) {
          unsigned g[4];   // g[r]: word (p + r) % 4 of the piece of group p * GL + j
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int k = (p - r) & 3;   // the lane that reads this one this round
            const unsigned send = k == 0 ? w[j] : k == 1 ? w[GL + j]
                                : k == 2 ? w[2 * GL + j] : w[3 * GL + j];
            g[r] = __shfl_sync(0xffffffffu, send, (lane & ~3) | ((p + r) & 3));
          }
          uint4 piece = {g[0], g[1], g[2], g[3]};   // rotated by p into word order
          if (p & 1) piece = {piece.w, piece.x, piece.y, piece.z};
          if (p & 2) piece = {piece.z, piece.w, piece.x, piece.y};
          const unsigned at = s + x_at - 4 * p
                              + ((p * GL + j) * L::XS_SLOT + rep * X_NSTEP * L::XS_LD) * E;
#pragma unroll
          for (int q = 0; q < ROWS; ++q)
            st_async(mapped[q] + (at - smem), piece, mapped[q] + (bar - smem));
        }
      }
      return;
    }
#pragma unroll
    for (int rep = 0; rep < X_REPS; ++rep) {
#pragma unroll
      for (int u = 0; u < VX; ++u) {
        const unsigned at = s + x_at + (u * L::XS_SLOT + rep * X_NSTEP * L::XS_LD) * E;
        if constexpr (PAIRS) {
          const unsigned short* lo = reinterpret_cast<const unsigned short*>(&staged[rep][0]);
          const unsigned short* hi = reinterpret_cast<const unsigned short*>(&staged[rep][1]);
          const unsigned word = (unsigned)lo[u] | (unsigned)hi[u] << 16;
          if constexpr (CLUSTER) {
#pragma unroll
            for (int q = 0; q < ROWS; ++q)
              st_async(mapped[q] + (at - smem), word, mapped[q] + (bar - smem));
          } else {
            st_shared_f32(at, __uint_as_float(word));
          }
        } else {
          st_shared_f32(at, reinterpret_cast<const float*>(&staged[rep][0])[u]);
        }
      }
    }
  };
  // X_RING: W's cursor (w_tile, w_chunk; w_run the chunk its bulk copy reads), X_LEAD steps
  // behind the copies' cursor, which runs X's ring (every thread keeps it; thread 0 alone
  // reads it)
  Cursor w_tile(first, ktiles, r1);
  int w_chunk = 0;
  auto w_tile_run = [&]() {
    const TileOrigin o = w_tile.origin();
    return W + ((long long)(o.g0 / SLOTS) * ktiles + o.k0 / BM) * chunks * (SLOTS * BM * BK);
  };
  const T* w_run = X_RING ? w_tile_run() : W;
  auto next_w = [&]() {
    if (++w_chunk == chunks) {
      w_chunk = 0;
      w_tile.advance(stride, ktiles, r1);
      w_run = w_tile_run();
    } else {
      w_run += SLOTS * BM * BK;
    }
  };
  // QB > 1: this block's QB-th of the tile, to the blocks of its row tiles (w_ranks)
  constexpr unsigned W_PART = W_TILE_BYTES / QB;
  unsigned short w_ranks = 0;
#pragma unroll
  for (int q = 0; q < QB; ++q) w_ranks |= (unsigned short)(1u << (ri + ROWS * q));
  auto bulk_w = [&](int stage) {   // W_BULK, thread 0
    mbarrier_arrive_expect_tx(bars + 8 * stage, W_TILE_BYTES + (CLUSTER ? X_STAGE_BYTES : 0));
    const T* src = X_RING ? w_run : w_src;
    if constexpr (QB > 1) {
      cp_async_bulk_multicast(stage_at(stage) + L::XS_SIZE * E + qi * W_PART,
                              src + qi * (W_PART / E), W_PART, bars + 8 * stage, w_ranks);
    } else {
      cp_async_bulk(stage_at(stage) + L::XS_SIZE * E, src, W_TILE_BYTES, bars + 8 * stage);
    }
  };
  // X_RING: this thread's vectors of reps rep_lo <= rep < rep_hi into ring chunk `at` (its
  // shared address), and all of them back from one into registers
  const unsigned ring = smem + RING_AT + tid * X_VECTOR;
  auto copy_ring = [&](unsigned at, int rep_lo, int rep_hi) {
#pragma unroll
    for (int u = 0; u < XU; ++u) {
      const unsigned ok_bits = load_chunk * BK + x_l + u < c ? x_ok : 0;
#pragma unroll
      for (int rep = 0; rep < X_REPS; ++rep) {
        if (rep < rep_lo || rep >= rep_hi) continue;
        const bool ok = ok_bits >> rep & 1;
        cp_async<X_VECTOR>(at + (rep * XU + u) * NT * X_VECTOR,
                           ok ? x_src + rep * x_nstride + u * x_step : X, ok);
      }
    }
  };
  auto ring_x = [&](unsigned at, XBits (&staged)[X_REPS][XU]) {
#pragma unroll
    for (int rep = 0; rep < X_REPS; ++rep)
#pragma unroll
      for (int u = 0; u < XU; ++u)
        staged[rep][u] = *reinterpret_cast<const XBits*>(
            smem_raw + (at - smem) + (rep * XU + u) * NT * X_VECTOR);
  };
  auto load_w = [&](unsigned s, int rep_lo, int rep_hi) {
    if constexpr (W_BULK) return;
    const unsigned ok_bits = load_chunk * BK + w_l < c ? w_ok : 0;
#pragma unroll
    for (int rep = 0; rep < W_REPS; ++rep) {
      if (rep < rep_lo || rep >= rep_hi) continue;
      if constexpr (WT == 2) {
        cp_async<VW * E>(s + w_at(rep), w_src + rep * NT * VW, true);
      } else {
        const bool ok = ok_bits >> rep & 1;
        cp_async<VW * E>(s + w_at(rep), ok ? w_src + w_off(rep) : W, ok);
      }
    }
  };
  auto next_load = [&]() {
    if (++load_chunk == chunks) {
      load_chunk = 0;
      load_tile.advance(stride, ktiles, r1);
      enter_load_tile();
    } else {
      x_src += BK * x_step;
      w_src += WT >= 2 ? SLOTS * BM * BK : BK * w_sl;
    }
  };
  const unsigned empty = smem + EMPTY_AT;   // CLUSTER: stage s's "free" barrier at empty + 8 s
  if constexpr (W_BULK) {
    if (tid == 0) {
#pragma unroll
      for (int s = 0; s < STAGES; ++s) {
        mbarrier_init(bars + 8 * s, 1);
        if (CLUSTER) mbarrier_init(empty + 8 * s, CS);   // one arrival from each block
      }
      mbarrier_init_fence();
    }
    // the cluster's barriers are ready before any block writes to another
    if constexpr (CLUSTER) cluster_sync();
    else __syncthreads();
  }
  // CLUSTER: the warps whose X vectors this block regroups for the cluster (the others' ranks
  // regroup the rest); ROWS = 1: all
  const bool producer = !CLUSTER || slot % ROWS == ri;
  // The first STAGES - 1 steps' copies (staged X: all loads in flight before any is stored;
  // X's ring: X_LEAD steps' more, each step regrouped as soon as its copies land).
  enter_load_tile();
  unsigned ring_fill = ring, ring_take = ring;   // X_RING: the chunks copied to and regrouped
  auto ring_next = [&](unsigned at) {
    return at + X_CHUNK_BYTES == ring + RING_CHUNKS * X_CHUNK_BYTES ? ring : at + X_CHUNK_BYTES;
  };
  if constexpr (X_RING) {
#pragma unroll
    for (int s = 0; s < X_LEAD; ++s) {
      if (s < steps) {
        if (producer) copy_ring(ring_fill, 0, X_REPS);
        next_load();
      }
      cp_async_commit();
      ring_fill = ring_next(ring_fill);
    }
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s + X_LEAD < steps) {
        if (producer) copy_ring(ring_fill, 0, X_REPS);
        next_load();
      }
      cp_async_commit();
      ring_fill = ring_next(ring_fill);
      cp_async_wait<X_LEAD>();   // step s's vectors have landed
      if (s < steps) {
        if (producer) {
          XBits v[X_REPS][XU];
          ring_x(ring_take, v);
          stash_x(stage_at(s), v, bars + 8 * s);
        }
        if (tid == 0) bulk_w(s);
        next_w();
      }
      ring_take = ring_next(ring_take);
    }
  }
  XBits x_first[X_ASYNC || X_RING ? 1 : STAGES - 1][X_REPS][XU];
#pragma unroll
  for (int s = 0; s < (X_RING ? 0 : STAGES - 1); ++s) {
    if (s < steps) {
      if constexpr (X_ASYNC) copy_x(stage_at(s), 0, X_REPS);
      else load_x(x_first[s]);
      load_w(stage_at(s), 0, W_REPS);
      if (W_BULK && tid == 0) bulk_w(s);
      next_load();
    }
    cp_async_commit();
  }
  if constexpr (!X_ASYNC && !X_RING) {
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
      if (s < steps) stash_x(stage_at(s), x_first[s], bars + 8 * s);
  }

  float acc[1][MT][NTL][S::C_REGS];
  each_register<float>(acc, acc, [](float& sum, float) { sum = 0.0f; });
  Cursor tile(first, ktiles, r1);   // the tile whose products run
  int chunk = 0, stage = 0;
  unsigned phase = 0;   // W_BULK: of the current stage's barrier
  XBits x_staged[X_ASYNC || X_RING ? 1 : X_REPS][XU];
  for (int step = 0; step < steps; ++step) {
    // this thread's copies of `step` have landed (X's ring: regrouped a step ago) ...
    if constexpr (!X_RING) cp_async_wait<STAGES - 2>();
    if constexpr (CLUSTER) mbarrier_wait_cluster(bars + 8 * stage, phase);   // X from all ranks
    else if constexpr (W_BULK) mbarrier_wait(bars + 8 * stage, phase);
    __syncthreads();               // ... everyone's have, and the buffer refilled next is free
    const int next_stage = stage == 0 ? STAGES - 1 : stage - 1;   // (step + STAGES - 1) % STAGES
    const bool more = step + STAGES - 1 < steps;
    // CLUSTER: this block is done with step - 1's stage (its reads, and the epilogue's use of
    // it as scratch: the barrier above must come first), which the cluster refills this step:
    // thread q < CS tells rank q, whose writers here wait for every rank's word. The parity
    // of that wait: the refills of next_stage are the completions of its "free" barrier,
    // the one of (step - 1) / STAGES here, phase's parity flipped at stage 0.
    if (CLUSTER && more && step > 0 && tid < CS)
      mbarrier_arrive_cluster(map_to_rank(empty + 8 * next_stage, tid));
    const unsigned free_parity = phase ^ (stage == 0);
    if (QB > 1 && more && step > 0 && tid == 0)   // W goes to the other blocks too
      mbarrier_wait_cluster(empty + 8 * next_stage, free_parity);
    // the copies' cursor's step: X_LEAD further with X's ring
    const bool more_x = step + STAGES - 1 + X_LEAD < steps;
    const unsigned base = stage_at(stage), next = stage_at(next_stage);
    if (W_BULK && more && tid == 0) bulk_w(next_stage);
    if constexpr (X_RING) {
      if (more) next_w();
    } else if constexpr (!X_ASYNC) {
      if (more) load_x(x_staged);
    }
#pragma unroll
    for (int kk = 0; kk < BK; kk += S::K) {
      BOp x[NTL];
      if constexpr (X_ASYNC) {
#pragma unroll
        for (int q = 0; q < NTL; ++q) {
          const unsigned at = base + (q * S::N * CH + kk * (SLOTS / 4)) * 16;
          const float v[2] = {ld_shared_f32(at + x_word0), ld_shared_f32(at + x_word1)};
          x[q].set(v);
        }
      } else {
#pragma unroll
        for (int q = 0; q < NTL; q += 2) {   // one ldmatrix: registers 0, 1 tile q's, 2, 3 q + 1's
          unsigned r[4];
          ldmatrix_x4(r, base + x_frag + (q * S::N * L::XS_LD + kk) * E);
          if constexpr (PAIRS) {
            x[q].v[0] = r[0], x[q].v[1] = r[1], x[q + 1].v[0] = r[2], x[q + 1].v[1] = r[3];
          } else {
            const float lo[2] = {__uint_as_float(r[0]), __uint_as_float(r[1])};
            const float hi[2] = {__uint_as_float(r[2]), __uint_as_float(r[3])};
            x[q].set(lo);
            x[q + 1].set(hi);
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int it = kk / S::K * MT + mt;
        if (X_ASYNC && more) copy_x(next, it * X_REPS / ITERS, (it + 1) * X_REPS / ITERS);
        if (X_RING && more_x && producer)
          copy_ring(ring_fill, it * X_REPS / ITERS, (it + 1) * X_REPS / ITERS);
        if (more) load_w(next, it * W_REPS / ITERS, (it + 1) * W_REPS / ITERS);
        AOp a;
        if constexpr (PAIRS) {
          ldmatrix_x4(a.v, base + w_frag + (mt * S::M * BK + kk) * E);
        } else {
          unsigned r[4];
          ldmatrix_x4(r, base + w_frag + (mt * S::M * (W_BULK ? BK : L::WS_LD) + kk) * E);
          const float v[4] = {__uint_as_float(r[0]), __uint_as_float(r[1]),
                              __uint_as_float(r[2]), __uint_as_float(r[3])};
          a.set(v);
        }
        if constexpr (ROW_SUMS) {
          float sums[NTL][S::C_REGS];
          each_register<float>(sums, sums, [](float& sum, float) { sum = 0.0f; });
          // term by term over the row's tiles: consecutive MMAs write different sums
#pragma unroll
          for (int term = 0; term < Terms<R, PRECISION>::value; ++term)
#pragma unroll
            for (int q = 0; q < NTL; ++q) mma_term<PRECISION>(term, sums[q], a, x[q]);
          each_register<float>(acc[0][mt], sums, [](float& sum, float v) { sum += v; });
        } else {
#pragma unroll
          for (int q = 0; q < NTL; ++q) mma_term<PRECISION>(0, acc[0][mt][q], a, x[q]);
        }
      }
    }
    if (more_x) next_load();
    cp_async_commit();
    if constexpr (X_RING) {
      cp_async_wait<X_LEAD>();   // step + STAGES - 1's vectors have landed
      if (more && producer) {
        XBits v[X_REPS][XU];
        ring_x(ring_take, v);
        // CLUSTER: every rank is done with the stage (from step 1 on: the first fill of
        // stage STAGES - 1 comes at step 0)
        if (CLUSTER && step > 0) mbarrier_wait_cluster(empty + 8 * next_stage, free_parity);
        stash_x(next, v, bars + 8 * next_stage);
      }
      ring_fill = ring_next(ring_fill);
      ring_take = ring_next(ring_take);
    } else if constexpr (!X_ASYNC) {
      if (more) stash_x(next, x_staged, bars + 8 * next_stage);
    }
    if (++chunk == chunks) {   // the tile is complete
      store_group_tile<L, VX>(Y, step == steps - 1 ? area : area + stage * L::STAGE,
                              step == steps - 1, tile.origin(), acc, tid, slot, 0, 0, G, b, B,
                              y_step, sy_b, origins);
      // the epilogue wrote this stage's W bytes, which the next step's bulk copy refills
      // (after the barrier at the loop's top)
      if constexpr (W_BULK) fence_proxy_async_shared();
      each_register<float>(acc, acc, [](float& sum, float) { sum = 0.0f; });
      chunk = 0;
      tile.advance(stride, ktiles, r1);
    }
    if (stage == STAGES - 1) {
      stage = 0;
      phase ^= 1;
    } else {
      ++stage;
    }
  }
  cp_async_wait<0>();   // only empty groups remain; leave none behind
}

// One block a tile.
template <class T, int PRECISION, int SLOTS, int BM, int BN, int BK, int STAGES, int WT, int VX,
          int VW, bool X_ASYNC, int X_LEAD>
__global__ void __launch_bounds__(32 * SLOTS, 1)
ks_mma_group(const T* __restrict__ X, T* __restrict__ Y, const T* __restrict__ W,
             int G, int b, int c, int d, long long B,
             long long sx_f, long long sx_b, long long sy_f, long long sy_b,
             int w_sk, int w_sl, int conj_w, int ktiles, int gtiles, long long tiles,
             unsigned long long d_magic) {
  group_product<T, PRECISION, SLOTS, BM, BN, BK, STAGES, WT, VX, VW, X_ASYNC, X_LEAD, 1, 1>(
      X, Y, W, G, b, c, d, B, sx_f, sx_b, sy_f, sy_b, w_sk, w_sl, conj_w, ktiles, gtiles, tiles,
      d_magic);
}

// A cluster of ROWS x QB blocks a group tile and QB batch tiles (the header).
template <class T, int PRECISION, int SLOTS, int BM, int BN, int BK, int STAGES, int WT, int VX,
          int VW, bool X_ASYNC, int X_LEAD, int ROWS, int QB>
__global__ void __cluster_dims__(ROWS * QB, 1, 1) __launch_bounds__(32 * SLOTS, 1)
ks_mma_group_cluster(const T* __restrict__ X, T* __restrict__ Y, const T* __restrict__ W,
                     int G, int b, int c, int d, long long B,
                     long long sx_f, long long sx_b, long long sy_f, long long sy_b,
                     int w_sk, int w_sl, int conj_w, int ktiles, int gtiles, long long tiles,
                     unsigned long long d_magic) {
  group_product<T, PRECISION, SLOTS, BM, BN, BK, STAGES, WT, VX, VW, X_ASYNC, X_LEAD, ROWS, QB>(
      X, Y, W, G, b, c, d, B, sx_f, sx_b, sy_f, sy_b, w_sk, w_sl, conj_w, ktiles, gtiles, tiles,
      d_magic);
}

}  // namespace ks
