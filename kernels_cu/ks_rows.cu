// Whole feature vectors through a run of small square KS factors, from registers (issue #11).
//
// Factors K_1 ... K_F (in the order they are applied), each square with small blocks:
// K_f = I_{a_f} ⊗ 1_{r_f × r_f} ⊗ I_{d_f} with a_f·r_f·d_f = N, the length of every feature
// vector. Factor f maps input t' = i·r·d + l·d + j to output t = i·r·d + k·d + j through the
// r × r block of group g = i·d + j (k < r output row, l < r reduction index, as everywhere).
//
// A block owns a tile of RT batch rows, each a whole feature vector, and applies every factor
// to it in shared memory, the chain's gathers folded into where elements are read and
// written. Batch-size-first, it loads the tile once (V-element vectors along t) and stores it
// once, or lets the last pass write Y; batch-size-last, where a feature's rows are contiguous,
// the first pass reads X and the last writes Y themselves, lanes along the rows.
//
// Passes. Consecutive factors whose digits nest are applied in one pass from registers:
// with DLO the smallest d of the pass and E the product of its radices, when each factor's
// d equals DLO times the product of the radices of the pass's factors with a smaller d, the
// elements
//
//     t = hi·(E·DLO) + u·DLO + lo          (u < E, lo < DLO, hi < N / (E·DLO))
//
// of one (hi, lo) are closed under every factor of the pass: factor f mixes the digit of u
// at stride s_f = d_f / DLO. A work item reads the blocks its (hi, lo) needs into registers,
// then applies them to its rows: the E elements of a row into registers, the pass's factors
// one after the other, back where they came from; a barrier separates passes. The blocks
// are the kernel's heaviest traffic (r values per element per factor), so each load of them
// serves several rows: batch-size-first, an item keeps them while it walks several rows;
// batch-size-last, the lanes of one (hi, lo) take neighbouring rows and read the same
// addresses. FFT, Hadamard and butterfly chains nest, so a pass there does several stages
// per round trip through shared memory.
#include "ks_cluster.cuh"
#include "ks_launch.cuh"
#include "ks_scalar.cuh"

namespace ks {

// How a factor's blocks are had: loaded (STORED), or computed for a radix-2 DFT stage
// (kscupy/structure.py) whose block of group (i, j) is scale · F_2 · diag(1, t_j):
// HADAMARD_STAGE without twiddles (t_j = 1), TWIDDLED_STAGE with t_j read from a table of d
// values. A stage is a butterfly, y0 = a + t·b, y1 = a - t·b, instead of a 2 x 2 product,
// and needs at most one value per block instead of four.
enum Stage { STORED = 0, HADAMARD_STAGE = 1, TWIDDLED_STAGE = 2 };

// One factor: radix R (its b = c), stride D (its d); TR: a transposed view (element (k, l)
// of a block stored at l·R + k instead of k·R + l; a stage's twiddles then come after its
// butterfly, (F_2 diag(t))^T = diag(t) F_2); VEC: its blocks are read as 16-byte words from
// a copy interleaved by word (not transposed, R·R·sizeof(T) a multiple of 16; see
// load_weights); STAGE: see Stage; SCALED: a stage whose scale is not 1.
template <int R_, int D_, int TR_ = 0, int VEC_ = 0, int STAGE_ = STORED, int SCALED_ = 0>
struct Radix {
  static constexpr int r = R_, d = D_, stage = STAGE_;
  static constexpr bool transposed = TR_ != 0, vec = VEC_ != 0, scaled = SCALED_ != 0;
  static_assert(stage == STORED || (r == 2 && !vec), "computed stages are radix 2");
  static_assert(stage != STORED || !scaled, "stored blocks carry their own scale");
  // Values a work item of a pass (E elements, smallest stride DLO) keeps for this factor:
  // E/r blocks of r² values; a stage's distinct twiddles (d / DLO of them: see
  // load_weights), then its scale.
  __host__ __device__ static constexpr int weights(int E, int DLO) {
    return stage == STORED ? E * r : (stage == TWIDDLED_STAGE ? d / DLO : 0) + (scaled ? 1 : 0);
  }
};

// The smallest of ds[0..n).
__host__ __device__ constexpr int smallest(const int* ds, int n) {
  int m = ds[0];
  for (int f = 1; f < n; ++f) m = ds[f] < m ? ds[f] : m;
  return m;
}

// Whether factors of radices rs and strides ds nest (see the header): distinct strides,
// each the smallest one times the product of the radices below it.
__host__ __device__ constexpr bool nest(const int* rs, const int* ds, int n) {
  for (int f = 0; f < n; ++f) {
    int below = 1;
    for (int g = 0; g < n; ++g) {
      if (g != f && ds[g] == ds[f]) return false;
      if (ds[g] < ds[f]) below *= rs[g];
    }
    if (below * smallest(ds, n) != ds[f]) return false;
  }
  return true;
}

template <class... Fs>
struct Pass {
  static constexpr int NF = sizeof...(Fs);
  static constexpr int rs[NF] = {Fs::r...}, ds[NF] = {Fs::d...};
  static constexpr int E = (Fs::r * ... * 1);
  static constexpr int DLO = smallest(ds, NF);
  static_assert(nest(rs, ds, NF), "a pass's factors must nest (see ks_rows.cu)");
};

// either<B, A, C>::type: A when B, else C.
template <bool B, class A, class C> struct either { using type = A; };
template <class A, class C> struct either<false, A, C> { using type = C; };

// log2 of a power of two.
__host__ __device__ constexpr int log2_of(int x) { return x > 1 ? 1 + log2_of(x / 2) : 0; }

// The batch-size-first tile: element t of tile row `row` at row·ROW + (t ^ swizzle(line)),
// line = t / PADQ the 128-byte line of t: the lines' elements are XOR-swizzled (a bijection
// within each line) by SKEW times the XOR of the line number's log2(PADQ)-bit digits, so that
// both the strided accesses of the passes (DLO = 1, 4, 16: a warp's elements E·DLO apart)
// and the digit-reversed landing places of a gathered load (a warp's elements N/32 or more
// apart: lines that differ only in their high digits) spread over the banks. Skewed by the
// line number alone, a gathered load's stores would conflict many ways, its lines differing
// only in their high digits; with the digits folded they are conflict-free (8-byte elements
// counted by half-warps, as the banks serve them), and the passes stay close to
// conflict-free. A row holds whole lines, plus one element, so that rows start on different
// banks.
template <class T, int N, int RT>
struct RowsLayout {
  static constexpr int PADQ = 128 / (int)sizeof(T) > 0 ? 128 / (int)sizeof(T) : 1;
  static constexpr int SKEW = 5;
  static constexpr int ROW = (N + PADQ - 1) / PADQ * PADQ + 1;
  static constexpr int ROW_STEP = ROW;   // at(row + 1, t) - at(row, t), as ColsLayout's
  static constexpr int SMEM_BYTES = RT * ROW * (int)sizeof(T);
  static constexpr int DIGIT = log2_of(PADQ) > 0 ? log2_of(PADQ) : 1;
  static constexpr int DIGITS = (log2_of(ROW / PADQ) + DIGIT) / DIGIT;   // covers every line
  __device__ __forceinline__ static int swizzle(int line) {
    int folded = 0;
#pragma unroll
    for (int k = 0; k < DIGITS; ++k) folded ^= (line >> (k * DIGIT)) & (PADQ - 1);
    return SKEW * folded % PADQ;
  }
  __device__ __forceinline__ static int at(int row, int t) {
    return row * ROW + (t ^ swizzle(t / PADQ));
  }
  template <bool DISJOINT>
  __device__ __forceinline__ static int at(int row, int t0, int du) { return at(row, t0 + du); }
};

// 2^K for ColsLayout: the features a 128-byte wavefront covers with runs of RUN bytes, at
// most what divides N (so that slot stays below N).
__host__ __device__ constexpr int spread_of(int n, int run) {
  int s = run >= 128 ? 1 : 128 / run;
  while (n % s) s /= 2;
  return s;
}

// The bits of a 32-bit word at positions j, j + k, j + 2k, ...
__host__ __device__ constexpr unsigned every_kth_bit(int j, int k) {
  unsigned m = 0;
  for (int p = j; p < 32; p += k) m |= 1u << p;
  return m;
}

// The batch-size-last tile: element (row, t) at slot(t)·RT + row, the tile's RT rows of a
// feature side by side as they are in X and Y. A pass's lanes take neighbouring rows (see
// PassRun), so one access of a warp covers SPREAD = 2^K features' runs of RT·sizeof(T)
// bytes in a 128-byte wavefront, and they fall on distinct banks when their slots differ in
// the low K bits. slot(t) XORs t's low K bits with the XOR of its higher K-bit digits (a
// bijection on [0, N)): the features of a wavefront differ in K consecutive bits of t (the
// low ones where they are neighbouring lo, DLO >= SPREAD; K bits from log2(E) up where
// DLO = 1 and they are neighbouring hi), and K consecutive bits fold onto K distinct ones.
// Bit j of the fold is the parity of t's bits j + K, j + 2K, ... (one popc each).
template <class T, int N, int RT>
struct ColsLayout {
  static constexpr int SPREAD = spread_of(N, RT * (int)sizeof(T));
  static constexpr int K = log2_of(SPREAD);
  static constexpr int SMEM_BYTES = RT * N * (int)sizeof(T);
  static constexpr int ROW_STEP = 1;     // at(row + 1, t) - at(row, t), as RowsLayout's
  __device__ __forceinline__ static int slot(int t) {
    int folded = 0;
#pragma unroll
    for (int j = 0; j < K; ++j)
      folded |= (__popc((unsigned)t & (every_kth_bit(j, K) << K)) & 1) << j;
    return t ^ folded;
  }
  // Element t0 + du of tile row `row`, t0 an item's first element, du = u·DLO < E·DLO.
  // DISJOINT (E and DLO powers of two): t0's bits and du's do not overlap, t0 + du =
  // t0 ^ du, and slot, linear over XOR, splits into slot(t0), once per item, and slot(du),
  // a constant of the unrolled loop over u.
  template <bool DISJOINT>
  __device__ __forceinline__ static int at(int row, int t0, int du) {
    return (DISJOINT ? slot(t0) ^ slot(du) : slot(t0 + du)) * RT + row;
  }
};

// Which axis a tile's global accesses walk: t within a row (the rows are batch-size-first
// feature vectors; RowsLayout) or the batch row (batch-size-last; ColsLayout).
enum Along { ALONG_T = 0, ALONG_ROW = 1 };

template <class T, int N, int RT, int ALONG>
using TileLayout = typename either<ALONG == ALONG_T, RowsLayout<T, N, RT>,
                                   ColsLayout<T, N, RT>>::type;

// Reports the layout of one instantiation: out = {SMEM_BYTES, ROW, PADQ} (ALONG_T) or
// {SMEM_BYTES, RT, SPREAD} (ALONG_ROW).
template <class T, int N, int RT, int ALONG>
__global__ void ks_rows_layout(long long* out) {
  using L = TileLayout<T, N, RT, ALONG>;
  out[0] = L::SMEM_BYTES;
  if constexpr (ALONG == ALONG_T) {
    out[1] = L::ROW; out[2] = L::PADQ;
  } else {
    out[1] = RT; out[2] = L::SPREAD;
  }
}

// The weights of a pass that one work item holds in registers: each factor's
// Radix::weights, one factor after the other (factor f's from OFF_f, the sum of those
// before it).
template <class P, class... Fs> struct PassWeights {
  static constexpr int COUNT = (Fs::weights(P::E, P::DLO) + ... + 0);
};

// Per factor FI, three entries of the kernel's meta table: the address of its values (block
// of group g at g·r·r; for VEC, their copy interleaved by 16-byte word, of the conjugated
// values for a conjugated view; a twiddled stage: its table of d twiddles, already
// conjugated for a conjugated view), 1 to use conj(w) (stored blocks read in place), the
// bits of its scale as a double (stages).
constexpr int META = 3;

// Factor F's blocks for the work item (hi, lo) of pass P into w[OFF ...], conjugated when
// asked, widened to C: for each value o of the other digits of u, the block of the group
// of the elements u0 + m·s (m < r), N the vector's length. 16-byte words where VEC (from the
// interleaved copy), else element by element through the view's strides.
//
// A twiddled stage needs t_j, j = t0 mod d for the elements t0 of block o. Since d = s·DLO
// divides E·DLO, t0 mod d = (u0 mod s)·DLO + lo = (o mod s)·DLO + lo: the item's blocks
// share s twiddles, twiddle m at w[OFF + m]. Neighbouring lanes read neighbouring j.
template <class T, class C, int N, class P, class F, int FI, int OFF, int NW>
__device__ __forceinline__ void load_weights(C (&w)[NW], int hi, int lo,
                                             const long long* __restrict__ meta) {
  constexpr int r = F::r, d = F::d, E = P::E, s = F::d / P::DLO;
  const T* __restrict__ W = reinterpret_cast<const T*>(meta[META * FI]);
  if constexpr (F::stage != STORED) {
    constexpr int TW = F::stage == TWIDDLED_STAGE ? s : 0;
#pragma unroll
    for (int m = 0; m < TW; ++m) w[OFF + m] = widen(W[m * P::DLO + lo]);
    if constexpr (F::scaled) {
      C sc = zero(C());
      reinterpret_cast<typename parts_of<C>::real*>(&sc)[0] =
          (typename parts_of<C>::real)__longlong_as_double(meta[META * FI + 2]);
      w[OFF + TW] = sc;
    }
    return;
  }
  // conjugates, for blocks read in place (an interleaved copy holds them already: the host's
  // copy of a conjugated view is of the conjugated values, so VEC reads need no select, which
  // cost two issue slots a complex value)
  const bool cj = !F::vec && meta[META * FI + 1] != 0;
#pragma unroll
  for (int o = 0; o < E / r; ++o) {
    const int u0 = (o / s) * (s * r) + o % s;           // u with F's digit zero
    const int t0 = hi * (E * P::DLO) + u0 * P::DLO + lo;
    const int g = (t0 / (r * d)) * d + t0 % d;           // group (i, j) of t0
    T raw[r * r];
    if constexpr (F::vec) {
      // Word m of group g's block at m·G + g (G = N / r groups; ks_rows.py,
      // Factor.interleaved_words): neighbouring lanes, which take neighbouring groups, read
      // neighbouring words. Read in place, a block of 128 bytes (complex64 radix 4) would put
      // every lane of a load on its own cache line, and a radix-4 pass would be slower than
      // the two radix-2 stages it merges.
      static_assert(r * r * sizeof(T) % 16 == 0 && !F::transposed, "blocks of 16-byte words");
      constexpr int WORDS = r * r * (int)sizeof(T) / 16, G = N / r;
      const uint4* __restrict__ src = reinterpret_cast<const uint4*>(W) + g;
      uint4* dst = reinterpret_cast<uint4*>(raw);
#pragma unroll
      for (int m = 0; m < WORDS; ++m) dst[m] = __ldg(src + (long long)m * G);
    } else {
      const T* __restrict__ wg = W + (long long)g * (r * r);
#pragma unroll
      for (int k = 0; k < r; ++k)
#pragma unroll
        for (int l = 0; l < r; ++l) raw[k * r + l] = wg[F::transposed ? l * r + k : k * r + l];
    }
#pragma unroll
    for (int i = 0; i < r * r; ++i) w[OFF + o * r * r + i] = widen(cj ? ks::conj(raw[i]) : raw[i]);
  }
}

// Factor F on one vector's E elements x of pass P, with its blocks at w[OFF ...]: the r
// elements u0 + m·s of each value o of the other digits through block o.
template <class C, class P, class F, int OFF, int NW>
__device__ __forceinline__ void apply_factor(C (&x)[P::E], const C (&w)[NW]) {
  constexpr int r = F::r, E = P::E, s = F::d / P::DLO;
  if constexpr (F::stage != STORED) {        // the butterfly of scale · F_2 · diag(1, t)
    constexpr bool tw = F::stage == TWIDDLED_STAGE;
    constexpr int SC = OFF + (tw ? s : 0);   // where load_weights put the scale
#pragma unroll
    for (int o = 0; o < E / 2; ++o) {
      const int u0 = (o / s) * (2 * s) + o % s;
      C a = x[u0], b = x[u0 + s];
      if constexpr (tw && !F::transposed) b = mul(w[OFF + o % s], b);
      C y0 = add(a, b), y1 = sub(a, b);
      if constexpr (tw && F::transposed) y1 = mul(w[OFF + o % s], y1);
      if constexpr (F::scaled) { y0 = scale_by(y0, w[SC]); y1 = scale_by(y1, w[SC]); }
      x[u0] = y0;
      x[u0 + s] = y1;
    }
    return;
  }
#pragma unroll
  for (int o = 0; o < E / r; ++o) {
    const int u0 = (o / s) * (s * r) + o % s;
    C y[r];
#pragma unroll
    for (int k = 0; k < r; ++k) {
      C acc = zero(C());
#pragma unroll
      for (int l = 0; l < r; ++l) acc = ks::fma(w[OFF + (o * r + k) * r + l], x[u0 + l * s], acc);
      y[k] = acc;
    }
#pragma unroll
    for (int k = 0; k < r; ++k) x[u0 + k * s] = y[k];
  }
}

// The pass's factors in order: load all their weights, or apply them all to one vector.
template <class T, class C, int N, class P, int FI, int OFF, int NW, class... Fs>
struct Factors {
  __device__ __forceinline__ static void load(C (&)[NW], int, int, const long long*) {}
  __device__ __forceinline__ static void apply(C (&)[P::E], const C (&)[NW]) {}
};
template <class T, class C, int N, class P, int FI, int OFF, int NW, class F, class... Rest>
struct Factors<T, C, N, P, FI, OFF, NW, F, Rest...> {
  using Tail = Factors<T, C, N, P, FI + 1, OFF + F::weights(P::E, P::DLO), NW, Rest...>;
  __device__ __forceinline__ static void load(C (&w)[NW], int hi, int lo, const long long* meta) {
    load_weights<T, C, N, P, F, FI, OFF, NW>(w, hi, lo, meta);
    Tail::load(w, hi, lo, meta);
  }
  __device__ __forceinline__ static void apply(C (&x)[P::E], const C (&w)[NW]) {
    apply_factor<C, P, F, OFF, NW>(x, w);
    Tail::apply(x, w);
  }
};

// Rows a work item of a batch-size-first pass with q items per row walks: doubled while the
// RT / RG row groups times q items still give each of the NT threads one.
__host__ __device__ constexpr int rows_per_item(int rt, int q, int nt) {
  int rg = 1;
  while (rt % (2 * rg) == 0 && (rt / (2 * rg)) * q >= nt) rg *= 2;
  return rg;
}

// t with its log2(N) bits in reverse order (N a power of two).
template <int N>
__device__ __forceinline__ int bit_reversed(int t) {
  static_assert(N > 1 && (N & (N - 1)) == 0, "bit reversal needs a power of two");
  return (int)(__brev((unsigned)t) >> (32 - log2_of(N)));
}

// 32-bit registers a thread has when MINB blocks of NT threads share an SM's 65536 (at most
// 255, in the allocation's steps of 8), and those a work item needs besides its elements and
// weights (ks_rows.py's REGISTER_OVERHEAD).
__host__ __device__ constexpr int registers_per_thread(int nt, int minb) {
  const int r = 65536 / (nt * minb) / 8 * 8;
  return r < 255 ? r : 255;
}
constexpr int REGISTER_OVERHEAD = 32;

// 32-bit registers a value of the compute type C takes.
template <class C>
__host__ __device__ constexpr int words_of() { return (int)(sizeof(C) + 3) / 4; }

// Batch-size-last rows a work item takes as one vector: the most, a power of two up to vmax
// (what the launch's alignment allows), whose e elements each (values of `words` registers)
// come to at most ITEM_WORDS registers and, with the pass's nw weights, fit the registers a
// thread has; one row where even that is more (a pass of 32 elements). More rows per item
// serve more rows per load of the weights and move more bytes per access, but past 16
// registers of elements the loads in flight no longer grow, and more rows only cost
// registers (passes of 16 elements, as in Hadamard chains, are slower on 2 rows than on 1).
constexpr int ITEM_WORDS = 16;
__host__ __device__ constexpr int rows_per_lane(int vmax, int words, int e, int nw,
                                                int registers) {
  int rv = vmax;
  while (rv > 1 && (words * e * rv > ITEM_WORDS ||
                    words * (e * rv + nw) + REGISTER_OVERHEAD > registers))
    rv /= 2;
  return rv;
}

// What the passes of one launch share: storage type T, vector length N, RT rows a tile, NT
// threads, MINB blocks per SM (so the registers a thread has), the axis global accesses walk
// (ALONG) and so the tile's layout, V (batch-size-last: the most rows an access may move as
// one vector), REVERSED (the input gather is the bit reversal), TO_Y (the last pass writes
// Y), and the cluster (below).
//
// Clusters (CS > 1 blocks a cluster, N a power of two): the cluster holds one tile, each
// block the N / CS features whose rank bits, log2(CS) bits of t, are its rank, as a tile of
// its own (TileLayout of N / CS features at local_t(t), t with the rank bits taken out). The
// rank bits are L1 = log2(CS) - L2 bits at SH and L2 at SH2 (above them; L2 = 0 in all but
// the case below), the rank's low and high bits. A pass whose digits miss the rank bits
// finds all of a work item's elements in one block; one whose digits hold them reads and
// writes other blocks (PassRun::REMOTE), between cluster barriers.
//  - Batch-size-last: a tile of 128-byte runs (32 rows of float32) of n = 4096 is 512 KiB,
//    more than an SM has, and runs of 32 bytes (8 rows, one lone block an SM) fall far
//    short of the memory's bandwidth. The host puts the rank bits among
//    the first pass's digits, so the first pass (which reads X) scatters its results to the
//    cluster's blocks, and the middle passes stay in their own block. Where the cluster
//    needs more bits than the first pass's digits hold (128-byte runs of n = 4096 float32 on
//    8 blocks, over radix-4 passes), the rest (L2) are the top of the last pass's digits: it
//    reads the other blocks as it writes Y.
//  - Batch-size-first: the rank bits are t's top bits, so that a block loads and stores one
//    contiguous share of each row. A tile of 4 rows of n = 4096 float32 (2 of complex64)
//    reads every factor's blocks for 4 rows; spread over a cluster of 4, 16 rows (8) share
//    each read of them, and a work item's setup serves four times the rows.
template <class T_, int N_, int RT_, int NT_, int MINB_, int ALONG_, int V_, bool REVERSED_,
          bool TO_Y_, int CS_ = 1, int SH_ = 0, int SH2_ = 0, int L2_ = 0>
struct Launch {
  using T = T_;
  using C = typename compute_of<T>::type;
  static constexpr int N = N_, RT = RT_, NT = NT_, ALONG = ALONG_, V = V_;
  static constexpr int REGISTERS = registers_per_thread(NT_, MINB_);
  static constexpr bool REVERSED = REVERSED_, TO_Y = TO_Y_;
  static constexpr int CS = CS_, SH = SH_, LCS = log2_of(CS_), SH2 = SH2_, L2 = L2_, L1 = LCS - L2_;
  static_assert(CS == 1 || ((N & (N - 1)) == 0 && (CS & (CS - 1)) == 0 && SH + L1 <= log2_of(N)
                            && (ALONG == ALONG_ROW || SH + LCS == log2_of(N))),
                "clusters: N and CS powers of two, rank bits within t (batch-size-first: the top)");
  static_assert(L2 == 0 || (ALONG == ALONG_ROW && L1 > 0 && SH + L1 <= SH2 && SH2 + L2 <= log2_of(N)),
                "rank bits in two places: batch-size-last, the high ones above the low ones");
  using L = TileLayout<T, N / CS, RT, ALONG>;
  // Batch-size-last, the first pass's writes of rows of rv elements go to the other blocks
  // as st.async counted on each block's mbarrier (8 bytes after the tile, at BAR_OFFSET), so
  // that a block waits for its own tile's bytes instead of the cluster's barrier (whose
  // release waits for every store in flight, a large share of the warps' stalls); st.async
  // moves 4 bytes or more.
  static constexpr int BAR_OFFSET = (L::SMEM_BYTES + 7) / 8 * 8;
  __host__ __device__ static constexpr bool async_rows(int rv) {
    return ALONG == ALONG_ROW && CS > 1 && rv * (int)sizeof(T) >= 4;
  }
  // x without its k bits at `at` (linear over disjoint bits); x with `bits` (k of them)
  // put in at `at`
  __host__ __device__ static constexpr int without(int x, int at, int k) {
    return ((x >> (at + k)) << at) | (x & ((1 << at) - 1));
  }
  __host__ __device__ static constexpr int with(int x, int at, int k, int bits) {
    return ((x >> at) << (at + k)) | (bits << at) | (x & ((1 << at) - 1));
  }
  // t without its rank bits (the high ones first, so that the low ones stay in place), and
  // its block in the cluster
  __host__ __device__ static constexpr int local_t(int t) {
    return CS == 1 ? t : without(without(t, SH2, L2), SH, L1);
  }
  __host__ __device__ static constexpr int rank_of(int t) {
    return ((t >> SH) & ((1 << L1) - 1)) | (((t >> SH2) & ((1 << L2) - 1)) << L1);
  }
};

// The operands of the tile of batch rows row0 ... row0 + RT - 1: X and Y, element (row,
// column) at row·s_b + column·s_f; in batch-size-last, the folded gathers as the first pass
// reads and the last writes them (element t of the input is column src[t] of X, element t
// of the output goes to column dst[t] of Y; null: t).
// parity: of the tile's phase of the mbarrier of a batch-size-last cluster's exchange
// (Launch::async_rows; the cluster's n-th tile, n from 0: n mod 2).
template <class T>
struct Ends {
  const T* __restrict__ X;
  T* __restrict__ Y;
  long long B, row0, sx_f, sx_b, sy_f, sy_b;
  const int* __restrict__ src;
  const int* __restrict__ dst;
  unsigned parity;
};

// Where a pass reads and writes the elements of its work items (each side is made from the
// tile and the launch's Ends, and uses what it needs): element u of the item whose first
// element is t0, of tile row `row`, is element t0 + u·DLO of that row.
// (DISJOINT: the pass's E and DLO are powers of two; see ColsLayout::at.)
template <class Lc, int DLO, bool DISJOINT>
struct TileSide {
  using T = typename Lc::T;
  T* tile;
  __device__ __forceinline__ TileSide(T* tile_, const Ends<T>&) : tile(tile_) {}
  // In a cluster, the item's elements are this block's (a pass whose digits miss the rank
  // bits), at their local t.
  __device__ __forceinline__ T read(int t0, int row, int u) const { return tile[at(t0, row, u)]; }
  __device__ __forceinline__ void write(int t0, int row, int u, T v) const {
    tile[at(t0, row, u)] = v;
  }
  // Rows row ... row + RV - 1 of element u as one vector (batch-size-last: adjacent in
  // ColsLayout, row a multiple of RV).
  template <int RV>
  __device__ __forceinline__ vec<T, RV> read_rows(int t0, int row, int u) const {
    return *reinterpret_cast<const vec<T, RV>*>(tile + at(t0, row, u));
  }
  template <int RV>
  __device__ __forceinline__ void write_rows(int t0, int row, int u, const vec<T, RV>& v) const {
    *reinterpret_cast<vec<T, RV>*>(tile + at(t0, row, u)) = v;
  }
  __device__ __forceinline__ static int at(int t0, int row, int u) {
    return Lc::L::template at<DISJOINT>(row, Lc::local_t(t0), Lc::local_t(u * DLO));
  }
};

// The cluster's tile (Launch, CS > 1) as a pass whose digits hold the rank bits reads and
// writes it: element t of a row in block rank_of(t), at local_t(t), over the SM-to-SM
// network (E and DLO powers of two, so t0's bits and u·DLO's are disjoint and each splits
// apart). Batch-size-last, the first pass holds them (it reads X and writes rows as one
// vector), and the last may hold the high ones (it reads rows as one vector and writes Y);
// batch-size-first, any pass, element by element (as TileSide).
template <class Lc, int DLO>
struct ClusterSide {
  using T = typename Lc::T;
  unsigned base;   // the tile's shared-window address in this block
  __device__ __forceinline__ ClusterSide(T* tile, const Ends<T>&) : base(shared_window(tile)) {}
  // the cluster-mapped address of element t0 + u·DLO's block's exchange mbarrier
  __device__ __forceinline__ unsigned bar(int t0, int u) const {
    return map_to_rank(base + (unsigned)Lc::BAR_OFFSET, Lc::rank_of(t0) | Lc::rank_of(u * DLO));
  }
  // element t0 + u·DLO of tile row `row`, mapped to the block that holds it: row 0's
  // mapped (a window's addresses map to the same offsets in the other block's window), then
  // the row's offset, so that an item maps its E elements once for all the rows it walks
  __device__ __forceinline__ unsigned at(int t0, int row, int u) const {
    const int du = u * DLO;
    const int local = Lc::L::template at<true>(0, Lc::local_t(t0), Lc::local_t(du));
    return map_to_rank(base + (unsigned)(local * (int)sizeof(T)),
                       Lc::rank_of(t0) | Lc::rank_of(du)) +
           (unsigned)(row * Lc::L::ROW_STEP * (int)sizeof(T));
  }
  __device__ __forceinline__ T read(int t0, int row, int u) const {
    return ld_cluster<T>(at(t0, row, u));
  }
  __device__ __forceinline__ void write(int t0, int row, int u, T v) const {
    st_cluster(at(t0, row, u), v);
  }
  template <int RV>
  __device__ __forceinline__ vec<T, RV> read_rows(int t0, int row, int u) const {
    return ld_cluster<vec<T, RV>>(at(t0, row, u));
  }
  template <int RV>
  __device__ __forceinline__ void write_rows(int t0, int row, int u, const vec<T, RV>& v) const {
    if constexpr (Lc::async_rows(RV)) st_async(at(t0, row, u), v, bar(t0, u));
    else st_cluster(at(t0, row, u), v);
  }
};

// X as the first pass's source (batch-size-last): element t of batch rows row0 + row ...
// row0 + row + RV - 1 is column src[t] (REVERSED: the bit reversal of t, computed), read as
// one vector where they are all below B (the host checked alignment and contiguity for
// RV > 1); rows past B read as zeros (computed, never stored). A warp's lanes take
// neighbouring rows of a few features (see PassRun), so each access reads runs of
// RT·sizeof(T) contiguous bytes. The reads stream (evict first), so that they do not push
// the pass's blocks, read by every item, out of L1.
template <class Lc, int DLO>
struct XSide {
  using T = typename Lc::T;
  const Ends<T>& e;
  __device__ __forceinline__ XSide(T*, const Ends<T>& e_) : e(e_) {}
  template <int RV>
  __device__ __forceinline__ vec<T, RV> read_rows(int t0, int row, int u) const {
    const long long b = e.row0 + row;
    const int t = t0 + u * DLO;
    int col = t;
    if constexpr (Lc::REVERSED) col = bit_reversed<Lc::N>(t);
    else if (e.src) col = e.src[t];
    const T* p = e.X + b * e.sx_b + (long long)col * e.sx_f;
    vec<T, RV> v;
    if (b + RV - 1 < e.B) {
      v = load_streaming(reinterpret_cast<const vec<T, RV>*>(p));
    } else {
#pragma unroll
      for (int r = 0; r < RV; ++r) v.v[r] = b + r < e.B ? p[r * e.sx_b] : zero(T());
    }
    return v;
  }
};

// Y as the last pass's destination: element t of batch row row0 + row goes to column dst[t],
// rows past B not at all.
//  - Batch-size-first (write, element by element): Y is new and C-ordered and never
//    gathered (ks_rows.py's prepare: sy_f = 1, sy_b = N, no dst), so element t of row b is
//    at b·N + t: one address per row and item, offset by the constant u·DLO (with the
//    strides and the gather read at run time, the last pass would spend several
//    instructions an element on 64-bit index math).
//  - Batch-size-last (write_rows): rows row ... row + RV - 1 as one vector where they are all
//    below B.
template <class Lc, int DLO>
struct YSide {
  using T = typename Lc::T;
  const Ends<T>& e;
  __device__ __forceinline__ YSide(T*, const Ends<T>& e_) : e(e_) {}
  __device__ __forceinline__ void write(int t0, int row, int u, T v) const {
    static_assert(Lc::ALONG == ALONG_T, "batch-size-last writes rows of a feature");
    const long long b = e.row0 + row;
    if (b < e.B) (e.Y + b * Lc::N + t0)[u * DLO] = v;
  }
  template <int RV>
  __device__ __forceinline__ void write_rows(int t0, int row, int u, const vec<T, RV>& v) const {
    const long long b = e.row0 + row;
    const int t = t0 + u * DLO;
    T* p = e.Y + b * e.sy_b + (long long)(e.dst ? e.dst[t] : t) * e.sy_f;
    if (b + RV - 1 < e.B) {
      *reinterpret_cast<vec<T, RV>*>(p) = v;
    } else {
#pragma unroll
      for (int r = 0; r < RV; ++r)
        if (b + r < e.B) p[r * e.sy_b] = v.v[r];
    }
  }
};

// One pass over the tile, reading X where FROM_X and writing Y where TO_Y, else the tile.
// Work item = (q, rows), q = hi·DLO + lo, which reads the pass's weights for its (hi, lo)
// into registers (Factors::load) and applies them to the E elements of each of its rows.
//  - Batch-size-first (ALONG_T): neighbouring lanes take neighbouring q (adjacent elements
//    of a row where DLO allows); an item walks RG tile rows, RU at a time (their loads in
//    flight together), so that each block is read once per RG vectors (rows_per_item).
//  - Batch-size-last (ALONG_ROW): an item is RV adjacent rows, moved as vectors, and
//    neighbouring lanes take neighbouring items of one q, so the first pass reads X and the
//    last writes Y in runs of RT·sizeof(T) bytes, without the tile's loads and stores of
//    batch-size-first (the lanes of a q read the same weights, served by one load). RV:
//    rows_per_lane; U items in flight together (2 where an item has fewer than 8 elements
//    and two items' elements and weights fit the registers); with one, the next item's
//    weights in flight during this one's work where they fit too (PREFETCH).
template <class Lc, class P, int FI0, bool FROM_X, bool TO_Y> struct PassRun;
template <class Lc, int FI0, bool FROM_X, bool TO_Y, class... Fs>
struct PassRun<Lc, Pass<Fs...>, FI0, FROM_X, TO_Y> {
  using T = typename Lc::T;
  using C = typename Lc::C;
  using P = Pass<Fs...>;
  static constexpr int N = Lc::N, RT = Lc::RT, NT = Lc::NT;
  // NW: the weights' registers (one unused where a pass has none: Hadamard stages)
  static constexpr int NW = PassWeights<P, Fs...>::COUNT > 0 ? PassWeights<P, Fs...>::COUNT : 1;
  using Fc = Factors<T, C, N, P, FI0, 0, NW, Fs...>;
  static constexpr int E = P::E, DLO = P::DLO, Q = N / E;
  static constexpr bool BSL = Lc::ALONG == ALONG_ROW;
  // (a cluster's block takes 1 / CS of the items: as many per thread as NT · CS threads)
  static constexpr int RG = BSL ? 1 : rows_per_item(RT, Q, NT * Lc::CS);
  static constexpr int RU = RG < 2 ? RG : 2;
  static constexpr int RV = BSL ? rows_per_lane(Lc::V, words_of<C>(), E, NW, Lc::REGISTERS) : 1;
  static constexpr int U = BSL && E * RV < 8 &&
      2 * words_of<C>() * (E * RV + NW) + REGISTER_OVERHEAD <= Lc::REGISTERS ? 2 : 1;
  // Batch-size-last, one item at a time: the next item's values are loaded during this one
  // where it has some and the registers hold both sets (where they do not, as in complex64
  // butterflies, the prefetch is slower than none).
  static constexpr bool PREFETCH = BSL && U == 1 && PassWeights<P, Fs...>::COUNT > 0 &&
      words_of<C>() * (2 * NW + E * RV) + REGISTER_OVERHEAD <= Lc::REGISTERS;
  static constexpr int WORK = (RT / RG / RV) * Q;
  static_assert(N % (E * DLO) == 0, "a pass's element sets tile the vector");
  static_assert(RT % RG == 0, "rows of a work item tile the rows of the tile");
  static constexpr bool DISJOINT = (E & (E - 1)) == 0 && (DLO & (DLO - 1)) == 0;
  // In a cluster (Launch): whether the pass's digits, bits log2(DLO) ... log2(E·DLO) - 1 of
  // t, hold rank bits, so that an item's elements lie in several blocks (ClusterSide).
  static constexpr int LO_BIT = log2_of(DLO), HI_BIT = log2_of(E * DLO);
  __host__ __device__ static constexpr bool holds(int at, int k) {
    return k > 0 && LO_BIT < at + k && at < HI_BIT;
  }
  static constexpr bool REMOTE = Lc::CS > 1 && (holds(Lc::SH, Lc::L1) || holds(Lc::SH2, Lc::L2));
  static_assert(Lc::CS == 1 || DISJOINT, "clusters: radices and strides powers of two");
  static_assert(!REMOTE || !BSL || (FROM_X && !TO_Y) || (Lc::L2 > 0 && TO_Y && !FROM_X),
                "batch-size-last clusters: the first pass holds the rank bits (it reads X and "
                "writes the tile), and the last maybe the high ones (it writes Y)");
  // its writes to other blocks counted on their mbarriers (Launch::async_rows)
  static constexpr bool ASYNC = REMOTE && !TO_Y && Lc::async_rows(RV);
  using Tile = typename either<REMOTE, ClusterSide<Lc, DLO>, TileSide<Lc, DLO, DISJOINT>>::type;
  using In = typename either<FROM_X, XSide<Lc, DLO>, Tile>::type;
  using Out = typename either<TO_Y, YSide<Lc, DLO>, Tile>::type;
  // Items w = q·LANES + (row / RV), LANES = RT / RV (batch-size-last), or w = (row / RG)·Q +
  // q (batch-size-first). A cluster's block `rank` takes the WORK / CS of them whose rank
  // bits are its rank (item_of): where the pass misses the rank bits, the L1 bits at WSH and
  // the L2 at WSH2 of w are those of t0 = hi·E·DLO + lo at SH and SH2, found in q at the
  // same bit (in lo, below the pass's digits) or log2(E) lower (in hi, above them), so that
  // the block's items are its own elements; where it holds them, any share (the top
  // log2(CS) bits at WSH, the low part of the rank below the high).
  static constexpr int LANES_LOG = BSL ? log2_of(RT / RV) : 0;
  __host__ __device__ static constexpr int in_q(int at) { return at >= HI_BIT ? at - log2_of(E) : at; }
  static constexpr int WSH = !REMOTE ? in_q(Lc::SH) + LANES_LOG : log2_of(WORK) - Lc::LCS;
  static constexpr int WSH2 = !REMOTE ? in_q(Lc::SH2) + LANES_LOG : WSH + Lc::L1;
  static_assert(Lc::CS == 1 || (WORK % Lc::CS == 0 && (WORK & (WORK - 1)) == 0 && WSH >= 0 &&
                                (Lc::L2 == 0 || WSH + Lc::L1 <= WSH2)),
                "clusters: a power-of-two count of items, split over the blocks");
  static constexpr int MY_WORK = WORK / Lc::CS;
  __device__ __forceinline__ static int item_of(int j, int rank) {
    if constexpr (Lc::CS == 1) return j;
    // the low bits of the rank first, then the high ones at their place in w
    return Lc::with(Lc::with(j, WSH, Lc::L1, rank & ((1 << Lc::L1) - 1)), WSH2, Lc::L2,
                    rank >> Lc::L1);
  }

  __device__ __forceinline__ static void run(T* tile, const long long* meta, const Ends<T>& e,
                                             int rank) {
    const In in{tile, e};
    const Out out{tile, e};
    if constexpr (Lc::ALONG == ALONG_T) {
      for (int j = threadIdx.x; j < MY_WORK; j += NT) {
        // (unsigned: signed index math pays for the sign at each division)
        const unsigned w = (unsigned)item_of(j, rank), q = w % Q;
        const int row0 = (int)(w / Q) * RG, lo = (int)(q % DLO), hi = (int)(q / DLO);
        const int t0 = hi * (E * DLO) + lo;
        C wts[NW];
        Fc::load(wts, hi, lo, meta);
        for (int row = row0; row < row0 + RG; row += RU) {
          C x[RU][E];
#pragma unroll
          for (int r = 0; r < RU; ++r)
#pragma unroll
            for (int u = 0; u < E; ++u) x[r][u] = widen(in.read(t0, row + r, u));
#pragma unroll
          for (int r = 0; r < RU; ++r) Fc::apply(x[r], wts);
#pragma unroll
          for (int r = 0; r < RU; ++r)
#pragma unroll
            for (int u = 0; u < E; ++u) out.write(t0, row + r, u, narrow<T>(x[r][u]));
        }
      }
    } else {
      constexpr int LANES = RT / RV;              // items, so lanes, of one q
      struct Item { int hi, lo, t0, row; };       // q as (hi, lo); first element and row
      auto item = [&](int j) {
        const int w = item_of(j, rank), q = w / LANES, lo = q % DLO, hi = q / DLO;
        return Item{hi, lo, hi * (E * DLO) + lo, (w % LANES) * RV};
      };
      auto read_item = [&](C (&x)[RV][E], const Item& it) {
#pragma unroll
        for (int u = 0; u < E; ++u) {
          const vec<T, RV> v = in.template read_rows<RV>(it.t0, it.row, u);
#pragma unroll
          for (int r = 0; r < RV; ++r) x[r][u] = widen(v.v[r]);
        }
      };
      auto apply_write_item = [&](C (&x)[RV][E], const C (&wts)[NW], const Item& it) {
#pragma unroll
        for (int r = 0; r < RV; ++r) Fc::apply(x[r], wts);
#pragma unroll
        for (int u = 0; u < E; ++u) {
          vec<T, RV> v;
#pragma unroll
          for (int r = 0; r < RV; ++r) v.v[r] = narrow<T>(x[r][u]);
          out.template write_rows<RV>(it.t0, it.row, u, v);
        }
      };
      if constexpr (U == 1) {
        // One item at a time; with PREFETCH the next item's values are loaded while this
        // one's elements are read, applied and written, so that it does not start by
        // waiting on L2 for them.
        C wts[NW], next[NW];
        if (PREFETCH && threadIdx.x < MY_WORK) {
          const Item first = item(threadIdx.x);
          Fc::load(next, first.hi, first.lo, meta);
        }
        // Unrolled by 4 on clusters where an item loads values and not the next item's
        // ahead, so that the compiler can issue the next item's loads above this item's
        // products. Not with PREFETCH, nor on one block a tile, nor for passes without values
        // (Hadamard stages, where complex64 spills with it): there unrolling is slower, and
        // unrolling by 2 is slower everywhere.
#pragma unroll ((PREFETCH || PassWeights<P, Fs...>::COUNT == 0 || Lc::CS == 1) ? 1 : 4)
        for (int j = threadIdx.x; j < MY_WORK; j += NT) {
          const Item it = item(j);
          if constexpr (PREFETCH) {
#pragma unroll
            for (int m = 0; m < NW; ++m) wts[m] = next[m];
            if (j + NT < MY_WORK) {
              const Item following = item(j + NT);
              Fc::load(next, following.hi, following.lo, meta);
            }
          } else {
            Fc::load(wts, it.hi, it.lo, meta);
          }
          C x[RV][E];
          read_item(x, it);
          apply_write_item(x, wts, it);
        }
      } else {
        // U items in flight together: all their loads, then all their products
        for (int j0 = threadIdx.x; j0 < MY_WORK; j0 += NT * U) {
          C wts[U][NW], x[U][RV][E];
          Item its[U];
#pragma unroll
          for (int i = 0; i < U; ++i) {
            if (j0 + i * NT >= MY_WORK) break;
            its[i] = item(j0 + i * NT);
            Fc::load(wts[i], its[i].hi, its[i].lo, meta);
            read_item(x[i], its[i]);
          }
#pragma unroll
          for (int i = 0; i < U; ++i) {
            if (j0 + i * NT >= MY_WORK) break;
            apply_write_item(x[i], wts[i], its[i]);
          }
        }
      }
    }
  }
};

// The passes in order, a barrier between two (the next reads what the last wrote): the
// cluster's where either of the two reaches other blocks (PassRun::REMOTE), else the
// block's; after a pass that wrote other blocks by st.async (PassRun::ASYNC), a wait on this
// block's mbarrier for the bytes written to it instead. In batch-size-last the first reads
// X; the last writes Y where the launch's TO_Y says so.
template <class Lc, int FI, class... Ps>
struct Passes {
  static constexpr bool FIRST_REMOTE = false, FIRST_ASYNC = false, LAST_REMOTE = false,
                        ANY_REMOTE = false, FIRST_PREFETCH = false;
  __device__ __forceinline__ static void run(typename Lc::T*, const long long*,
                                             const Ends<typename Lc::T>&, int) {}
};
template <class Lc, int FI, class P, class... Rest>
struct Passes<Lc, FI, P, Rest...> {
  static constexpr bool FIRST = FI == 0, LAST = sizeof...(Rest) == 0;
  using T = typename Lc::T;
  using Run = PassRun<Lc, P, FI, FIRST && Lc::ALONG == ALONG_ROW, LAST && Lc::TO_Y>;
  using Next = Passes<Lc, FI + P::NF, Rest...>;
  // whether this pass (the first of the list), the last or any pass reaches other blocks;
  // whether this one writes them by st.async (PassRun::ASYNC), and loads an item's values
  // during the item before (PassRun::PREFETCH)
  static constexpr bool FIRST_REMOTE = Run::REMOTE, ANY_REMOTE = Run::REMOTE || Next::ANY_REMOTE,
                        LAST_REMOTE = LAST ? Run::REMOTE : Next::LAST_REMOTE,
                        FIRST_ASYNC = Run::ASYNC, FIRST_PREFETCH = Run::PREFETCH;
  __device__ __forceinline__ static void run(T* tile, const long long* meta, const Ends<T>& e,
                                             int rank) {
    Run::run(tile, meta, e, rank);
    if constexpr (!LAST) {
      // After st.async writes this block's tile is complete when its mbarrier's phase is;
      // where the next pass reads the other blocks' too, a cluster barrier follows, which
      // each block reaches after its own wait.
      if constexpr (Run::ASYNC) {
        mbarrier_wait_cluster(shared_window(tile) + Lc::BAR_OFFSET, e.parity);
        if constexpr (Next::FIRST_REMOTE) {
          __syncwarp();   // (the wait's retry loop may leave a warp apart; the barrier is .aligned)
          cluster_sync();
        }
      } else if constexpr (Run::REMOTE || Next::FIRST_REMOTE) cluster_sync();
      else __syncthreads();
      Next::run(tile, meta, e, rank);
    }
  }
};

// Vectors each thread moves per round of a load or store: loads in flight before the
// shared-memory writes.
constexpr int ROUND = 4;

// The vectors of a batch-size-first tile that a thread moves between global and shared
// memory (load_tile, store_tile): column c (elements c·V ... c·V + V - 1) of tile rows r0,
// r0 + rs, r0 + 2·rs, ...; with VR = N / V vectors a row, columns threadIdx.x,
// threadIdx.x + NT, ... of every row where VR >= NT, else column threadIdx.x mod VR of rows
// threadIdx.x / VR + k·NT / VR (threads past that many rows' worth idle). Neighbouring lanes
// take neighbouring vectors of a row. A thread keeps its columns over the rows, so where a
// column's elements land in a row (the swizzle, or a gather's table) is found once for all
// rows: found per element, it would be most of the instructions of an element's load.
template <int N, int NT, int V, class Column>
__device__ __forceinline__ void for_each_column(Column&& column) {
  constexpr int VR = N / V;
  if constexpr (VR >= NT) {
    for (int c = threadIdx.x; c < VR; c += NT) column(c, 0, 1);
  } else if (threadIdx.x < NT / VR * VR) {
    column(threadIdx.x % VR, threadIdx.x / VR, NT / VR);
  }
}

// The tile's rows below B: rows row0 ... row0 + RT - 1 of the batch that exist.
template <int RT>
__device__ __forceinline__ int rows_below(long long B, long long row0) {
  return B - row0 < RT ? (int)(B - row0) : RT;
}

// Batch-size-first, global -> shared: tile row `row` is batch row row0 + row; element (row,
// t) is read from column t of X, V elements along t per load, and lands at position
// load_to[t] (t without an input gather; REVERSED: at the bit reversal of t, N a power of
// two, the digit reversal of a radix-2 FFT computed instead of read from a table, which saves
// the table's loads). Rows past B are zero-filled (computed, never stored).
template <class T, int N, int RT, int NT, int V, bool REVERSED>
__device__ __forceinline__ void load_tile(T* tile, const T* __restrict__ X, long long B,
                                          long long row0, long long s_f, long long s_b,
                                          const int* __restrict__ load_to) {
  using L = RowsLayout<T, N, RT>;
  using Vec = vec<T, V>;
  const int rows = rows_below<RT>(B, row0);
  for_each_column<N, NT, V>([&](int c, int r0, int rs) {
    const int t = c * V;
    int to[V];   // where element t + m lands in a row
#pragma unroll
    for (int m = 0; m < V; ++m) {
      int d = load_to ? load_to[t + m] : t + m;
      if constexpr (REVERSED) d = bit_reversed<N>(t + m);
      to[m] = L::at(0, d);
    }
    const T* x = X + (row0 + r0) * s_b + t * s_f;
    const long long step = rs * s_b;
    for (int row = r0; row < RT; row += rs * ROUND, x += ROUND * step) {
      Vec v[ROUND];
#pragma unroll
      for (int i = 0; i < ROUND; ++i) {
        if (row + i * rs < rows) {
          v[i] = *reinterpret_cast<const Vec*>(x + i * step);
        } else {
#pragma unroll
          for (int m = 0; m < V; ++m) v[i].v[m] = zero(T());
        }
      }
#pragma unroll
      for (int i = 0; i < ROUND; ++i) {
        if (row + i * rs >= RT) break;
        T* line = tile + (row + i * rs) * L::ROW;
#pragma unroll
        for (int m = 0; m < V; ++m) line[to[m]] = v[i].v[m];
      }
    }
  });
}

// Batch-size-first, shared -> global, the mirror image: column t of batch row row0 + row of
// Y is tile element (row, store_from[t]) (t without an output gather).
template <class T, int N, int RT, int NT, int V>
__device__ __forceinline__ void store_tile(const T* tile, T* __restrict__ Y, long long B,
                                           long long row0, long long s_f, long long s_b,
                                           const int* __restrict__ store_from) {
  using L = RowsLayout<T, N, RT>;
  using Vec = vec<T, V>;
  const int rows = rows_below<RT>(B, row0);
  for_each_column<N, NT, V>([&](int c, int r0, int rs) {
    const int t = c * V;
    int from[V];   // where element t + m is in a row
#pragma unroll
    for (int m = 0; m < V; ++m) from[m] = L::at(0, store_from ? store_from[t + m] : t + m);
    T* y = Y + (row0 + r0) * s_b + t * s_f;
    for (int row = r0; row < rows; row += rs, y += rs * s_b) {
      const T* line = tile + row * L::ROW;
      Vec v;
#pragma unroll
      for (int m = 0; m < V; ++m) v.v[m] = line[from[m]];
      *reinterpret_cast<Vec*>(y) = v;
    }
  });
}

// Batch-size-last, a tile's X asked of L2 before its first pass reads it: features rank·N/CS
// ... (rank + 1)·N/CS - 1 (the share of block `rank` of a cluster of CS, whichever block's
// first pass reads them) of batch rows row0 ... row0 + RT - 1, one prefetch a 128-byte line
// of each feature's run (contiguous: sx_b = 1; features that share a line ask for it more
// than once, which costs issue slots only). A thread's first pass reads X item by item, most
// of an item's loads after the last one's products, so without it the pass waited on DRAM
// about once per item; with it the first item's loads do, the rest find their lines in L2
// or on their way. The kernels ask for it where the first pass does not load an item's values
// during the item before (PassRun::PREFETCH); where it does (float32 butterflies), the
// prefetch is no faster, and mostly slower. The bulk prefetch (cp.async.bulk.prefetch.L2,
// one a run) is slower than none; so are prefetches of later tiles (the tile a cluster
// starting 1 to 64 tiles later takes).
template <class T, int N, int RT, int NT, int CS>
__device__ __forceinline__ void prefetch_tile_l2(const T* X, long long B, long long row0,
                                                 long long sx_f, int rank) {
  constexpr int NB = N / CS;
  const long long bytes = (B - row0 < RT ? B - row0 : RT) * (long long)sizeof(T);
  for (int t = rank * NB + threadIdx.x; t < (rank + 1) * NB; t += NT) {
    const unsigned long long at = __cvta_generic_to_global(X + (long long)t * sx_f + row0);
    for (unsigned long long line = at & ~127ull; line < at + bytes; line += 128)
      asm volatile("prefetch.global.L2 [%0];" :: "l"(line));
  }
}

// Y = K_F ... K_1 X on whole feature vectors of length N. Ps: the passes (Pass<Radix...>),
// factors in the order they are applied. X: element (row, column) at row·sx_b + column·sx_f;
// Y likewise with sy_*. MINB: blocks per SM the registers must allow (several blocks per SM
// overlap one's loads with another's arithmetic). meta: META entries per factor (see
// load_weights). Tiles: ceil(B / RT).
//  - Batch-size-first (ALONG_T): the tile is loaded (load_tile, VX elements along t per
//    load, 1 for any strides, more only where the host checked contiguity and alignment),
//    the passes run on it, and it is stored (store_tile, VY). in_map / out_map: the folded
//    gathers as load_to / store_from (null: none); REVERSED: the input gather is the bit
//    reversal, computed. TO_Y (no output gather): the last pass writes Y itself instead of
//    store_tile, which saves a round trip of the tile through shared memory, the kernel's
//    busiest path. The first pass does not read X the same way: a row's elements would be
//    scattered over the lanes' loads, which is slower than load_tile.
//  - Batch-size-last (ALONG_ROW; TO_Y, VX = VY): the first pass reads X and the last writes
//    Y (XSide, YSide: a warp's lanes walk the contiguous batch rows, up to VX rows an access
//    where the host checked contiguity and alignment), so the tile goes through shared
//    memory once per pass after the first. in_map / out_map: the gathers as src / dst (null:
//    none; REVERSED: src is the bit reversal, computed). Where X's rows are contiguous
//    (sx_b = 1), the tile's X is asked of L2 first (prefetch_tile_l2).
template <class T, int N, int RT, int NT, int MINB, int ALONG, int VX, int VY, bool REVERSED,
          bool TO_Y, class... Ps>
__global__ void __launch_bounds__(NT, MINB) ks_rows(
    const T* __restrict__ X, T* __restrict__ Y, const long long* __restrict__ meta,
    long long B, long long sx_f, long long sx_b, long long sy_f, long long sy_b,
    const int* __restrict__ in_map, const int* __restrict__ out_map, long long tiles) {
  using Lc = Launch<T, N, RT, NT, MINB, ALONG, VX, REVERSED, TO_Y>;
  static_assert(ALONG == ALONG_T ? N % VX == 0 && N % VY == 0 : TO_Y && VX == VY && RT % VX == 0,
                "batch-size-first vectors tile a row; batch-size-last passes read X, write Y");
  require_dynamic_smem<Lc::L::SMEM_BYTES>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* tile = reinterpret_cast<T*>(smem_raw);
  constexpr bool bsl = ALONG == ALONG_ROW;
  for (long long it = blockIdx.x; it < tiles; it += gridDim.x) {
    const long long row0 = it * RT;
    const Ends<T> ends{X, Y, B, row0, sx_f, sx_b, sy_f, sy_b,
                       bsl ? in_map : nullptr, bsl ? out_map : nullptr, 0u};
    if (bsl && !Passes<Lc, 0, Ps...>::FIRST_PREFETCH && sx_b == 1)
      prefetch_tile_l2<T, N, RT, NT, 1>(X, B, row0, sx_f, 0);
    if constexpr (!bsl) {
      load_tile<T, N, RT, NT, VX, REVERSED>(tile, X, B, row0, sx_f, sx_b, in_map);
      __syncthreads();
    }
    Passes<Lc, 0, Ps...>::run(tile, meta, ends, 0);
    if constexpr (!TO_Y) {
      __syncthreads();
      store_tile<T, N, RT, NT, VY>(tile, Y, B, row0, sy_f, sy_b, out_map);
    }
    __syncthreads();   // the next tile overwrites the shared memory
  }
}

// The last of a list of passes.
template <class P, class... Rest> struct last_of { using type = typename last_of<Rest...>::type; };
template <class P> struct last_of<P> { using type = P; };

#if __CUDA_ARCH__ >= 900   // clusters: Hopper on (the Python side asks for none before)
// ks_rows with each tile held by a cluster of CS blocks, the rank bits of t at SH (Launch),
// and LAST_BITS of them (the rank's high bits) instead at the top of the last pass's digits:
// the same parameters; the grid is CS blocks per cluster, and each cluster walks the tiles.
// The cluster's barriers (Passes) order a pass that reaches other blocks against its
// neighbours. One at the end of a tile orders its last accesses to a block against the next
// tile's first, where the cluster has a next tile, and keeps every block's memory until no
// partner reads it, where the last pass reads other blocks; elsewhere a block leaves
// without it (the barrier's release would wait for the tile's stores of Y).
//  - Batch-size-last (VX = VY, TO_Y): the first pass (which holds the rank bits, or the low
//    ones) reads X and writes to every block of the cluster; the last, where it holds the
//    high ones, reads them as it writes Y. Each block asks L2 for its share of the tile's X
//    first (prefetch_tile_l2), where X's rows are contiguous.
//  - Batch-size-first (no gathers: REVERSED false, no tables): the rank bits are t's top
//    bits, so block `rank` loads and stores features rank·N/CS ... (rank + 1)·N/CS - 1 of
//    each row, one contiguous share; the passes whose digits hold them read and write the
//    other blocks.
template <class T, int N, int RT, int NT, int MINB, int ALONG, int VX, int VY, bool REVERSED,
          bool TO_Y, int CS, int SH, int LAST_BITS, class... Ps>
__global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(NT, MINB) ks_rows_cluster(
    const T* __restrict__ X, T* __restrict__ Y, const long long* __restrict__ meta,
    long long B, long long sx_f, long long sx_b, long long sy_f, long long sy_b,
    const int* __restrict__ in_map, const int* __restrict__ out_map, long long tiles) {
  using Last = typename last_of<Ps...>::type;
  using Lc = Launch<T, N, RT, NT, MINB, ALONG, VX, REVERSED, TO_Y, CS, SH,
                    LAST_BITS ? log2_of(Last::E * Last::DLO) - LAST_BITS : 0, LAST_BITS>;
  using All = Passes<Lc, 0, Ps...>;
  constexpr bool bsl = ALONG == ALONG_ROW;
  constexpr int NB = N / CS;   // features a block holds
  static_assert(CS > 1, "a cluster of blocks");
  static_assert(!bsl || (TO_Y && VX == VY && RT % VX == 0 && All::FIRST_REMOTE),
                "batch-size-last: the passes read X and write Y, vectors of rows tile the rows, "
                "the rank bits among the first pass's digits");
  static_assert(bsl || (!REVERSED && NB % VX == 0 && NB % VY == 0 && All::ANY_REMOTE),
                "batch-size-first: no input gather, vectors tile a block's share of a row, "
                "a pass holds the rank bits");
  constexpr bool exchange = All::FIRST_ASYNC;   // the first pass writes by st.async
  static_assert(!exchange || Lc::L::SMEM_BYTES < (1 << 20), "an mbarrier counts under 2^20 bytes");
  require_dynamic_smem<exchange ? Lc::BAR_OFFSET + 8 : Lc::L::SMEM_BYTES>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* tile = reinterpret_cast<T*>(smem_raw);
  const int rank = (int)cluster_rank();
  const unsigned bar = shared_window(tile) + Lc::BAR_OFFSET;
  if (exchange && threadIdx.x == 0) {
    mbarrier_init(bar);
    mbarrier_init_fence();
  }
  cluster_sync_relaxed();   // every block of the cluster runs (and its mbarrier is set up)
  unsigned parity = 0;      // before any reaches another
  for (long long it = cluster_index(); it < tiles; it += cluster_count(), parity ^= 1u) {
    const long long row0 = it * RT;
    // this tile's phase of the mbarrier: this block's arrival and the tile's bytes, which the
    // cluster's first pass writes
    if (exchange && threadIdx.x == 0) mbarrier_arrive_expect_tx(bar, Lc::L::SMEM_BYTES);
    const Ends<T> ends{X, Y, B, row0, sx_f, sx_b, sy_f, sy_b,
                       bsl ? in_map : nullptr, bsl ? out_map : nullptr, parity};
    if (bsl && !All::FIRST_PREFETCH && sx_b == 1)
      prefetch_tile_l2<T, N, RT, NT, CS>(X, B, row0, sx_f, rank);
    if constexpr (!bsl) {
      load_tile<T, NB, RT, NT, VX, false>(tile, X + (long long)rank * NB * sx_f, B, row0, sx_f,
                                          sx_b, nullptr);
      if constexpr (All::FIRST_REMOTE) cluster_sync();
      else __syncthreads();
    }
    All::run(tile, meta, ends, rank);
    if constexpr (!TO_Y) {
      cluster_sync();   // the last pass's writes here (another block's, where it reaches here)
      store_tile<T, NB, RT, NT, VY>(tile, Y + (long long)rank * NB * sy_f, B, row0, sy_f, sy_b,
                                    nullptr);
    }
    // A block leaves once no partner will read its memory: where the last pass read other
    // blocks, after a barrier. In a tile of B's rows alone, the arrival need order nothing:
    // each of a partner's reads then feeds a store of Y that comes before its arrival, and a
    // warp issues in order, so its reads have returned when it arrives. A release would also
    // wait for those stores of Y to complete (MEMBAR.ALL.GPU in SASS).
    // This rests on the hardware's issue order, not on PTX's memory model (a relaxed arrival
    // orders no earlier access): the SASS of the float32 and complex64 butterflies' segments
    // (sm_90, CUDA 13.0; batch-size-first on 4 blocks, and batch-size-last float32
    // butterfly(4096) on 8 with a rank bit in the last pass) has every remote read of the
    // last pass feeding a store of Y before the arrival; check it again where the compiler
    // changes. In the tile with rows past B, whose values are read but not all stored, it
    // releases.
    if (it + cluster_count() < tiles || (All::LAST_REMOTE && row0 + RT > B)) cluster_sync();
    else if (All::LAST_REMOTE) cluster_sync_relaxed();
  }
}
#endif  // __CUDA_ARCH__ >= 900

}  // namespace ks
