// Whole feature vectors through a run of small square KS factors, from registers (issue #11).
//
// Factors K_1 ... K_F (in the order they are applied), each square with small blocks:
// K_f = I_{a_f} ⊗ 1_{r_f × r_f} ⊗ I_{d_f} with a_f·r_f·d_f = N, the length of every feature
// vector. Factor f maps input t' = i·r·d + l·d + j to output t = i·r·d + k·d + j through the
// r × r block of group g = i·d + j (k < r output row, l < r reduction index, as everywhere).
//
// A block owns a tile of RT batch rows, each a whole feature vector: it loads the tile into
// shared memory once (the chain's input gather folded into where each element lands),
// applies every factor there and stores it once (the output gather folded into where each
// element is read from). Global accesses are V-element vectors along whichever axis is
// contiguous: t within a row (batch-size-first) or the row (batch-size-last).
//
// Passes. Consecutive factors whose digits nest are applied in one pass from registers:
// with DLO the smallest d of the pass and E the product of its radices, when each factor's
// d equals DLO times the product of the radices of the pass's factors with a smaller d, the
// elements
//
//     t = hi·(E·DLO) + u·DLO + lo          (u < E, lo < DLO, hi < N / (E·DLO))
//
// of one (hi, lo) are closed under every factor of the pass: factor f mixes the digit of u
// at stride s_f = d_f / DLO. A work item reads the blocks its (hi, lo) needs into registers
// once, then walks its rows: the E elements of a row into registers, the pass's factors one
// after the other, back where they came from; a barrier separates passes. The blocks are
// the kernel's heaviest traffic (r values per element per factor), so keeping them while
// several rows go by is what lets the tile, not the weights, set the pace. FFT, Hadamard
// and butterfly chains nest, so a pass there does several stages per round trip through
// shared memory.
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

// log2 of a power of two.
__host__ __device__ constexpr int log2_of(int x) { return x > 1 ? 1 + log2_of(x / 2) : 0; }

// The shared-memory tile: element t of tile row `row` at row·ROW + (t ^ swizzle(line)),
// line = t / PADQ the 128-byte line of t: the lines' elements are XOR-swizzled (a bijection
// within each line) by SKEW times the XOR of the line number's log2(PADQ)-bit digits, so that
// both the strided accesses of the passes (DLO = 1, 4, 16: a warp's elements E·DLO apart)
// and the digit-reversed landing places of a gathered load (a warp's elements N/32 or more
// apart: lines that differ only in their high digits) spread over the banks. In a model of
// the banks (half-warps for 8-byte elements, which matched Nsight's counts), the gathered
// loads of DFT(4096) and DFT(16384) complex64 take 1x and 1x the conflict-free wavefronts
// where SKEW times the line alone took 8x and 16x (Nsight: shared stores 6-way conflicted);
// the passes are unchanged, within 12% of conflict-free. A row holds whole lines, plus one
// element, so that rows start on different banks.
template <class T, int N, int RT>
struct RowsLayout {
  static constexpr int PADQ = 128 / (int)sizeof(T) > 0 ? 128 / (int)sizeof(T) : 1;
  static constexpr int SKEW = 5;
  static constexpr int ROW = (N + PADQ - 1) / PADQ * PADQ + 1;
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
};

// Reports the layout of one instantiation: out = {SMEM_BYTES, ROW, PADQ}.
template <class T, int N, int RT>
__global__ void ks_rows_layout(long long* out) {
  using L = RowsLayout<T, N, RT>;
  out[0] = L::SMEM_BYTES; out[1] = L::ROW; out[2] = L::PADQ;
}

// The weights of a pass that one work item holds in registers: each factor's
// Radix::weights, one factor after the other (factor f's from OFF_f, the sum of those
// before it).
template <class P, class... Fs> struct PassWeights {
  static constexpr int COUNT = (Fs::weights(P::E, P::DLO) + ... + 0);
};

// Per factor FI, three entries of the kernel's meta table: the address of its values (block
// of group g at g·r·r; for VEC, their copy interleaved by 16-byte word; a twiddled stage:
// its table of d twiddles, already conjugated for a conjugated view), 1 to use conj(w)
// (stored blocks), the bits of its scale as a double (stages).
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
  const bool cj = meta[META * FI + 1] != 0;
#pragma unroll
  for (int o = 0; o < E / r; ++o) {
    const int u0 = (o / s) * (s * r) + o % s;           // u with F's digit zero
    const int t0 = hi * (E * P::DLO) + u0 * P::DLO + lo;
    const int g = (t0 / (r * d)) * d + t0 % d;           // group (i, j) of t0
    T raw[r * r];
    if constexpr (F::vec) {
      // Word m of group g's block at m·G + g (G = N / r groups; ks_rows.py,
      // Factor.interleaved_words): neighbouring lanes, which take neighbouring groups, read
      // neighbouring words. Read in place, a block of 128 bytes (complex64 radix 4) put
      // every lane of a load on its own cache line; butterfly(1024) complex64 ran 1.5x
      // slower merged to radix 4 than as radix-2 pairs.
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

// Rows a work item of a pass with q items per row walks: doubled while the RT / RG row
// groups times q items still give each of the NT threads one.
__host__ __device__ constexpr int rows_per_item(int rt, int q, int nt) {
  int rg = 1;
  while (rt % (2 * rg) == 0 && (rt / (2 * rg)) * q >= nt) rg *= 2;
  return rg;
}

// The tile's rows of Y, where a last pass that writes Y itself stores (see the kernel).
template <class T>
struct YTile {
  T* __restrict__ Y;
  long long B, row0, sy_f, sy_b;
};

// either<B, A, C>::type: A when B, else C.
template <bool B, class A, class C> struct either { using type = A; };
template <class A, class C> struct either<false, A, C> { using type = C; };

// Where a pass writes its elements (each side is made from the tile and the launch's YTile,
// and uses what it needs). The shared-memory tile: element u of the item whose first
// element is t0 at tile (row, t0 + u·DLO).
template <class T, class L, int DLO>
struct TileSide {
  T* tile;
  __device__ __forceinline__ TileSide(T* tile_, const YTile<T>&) : tile(tile_) {}
  __device__ __forceinline__ void write(int t0, int row, int u, T v) const {
    tile[L::at(row, t0 + u * DLO)] = v;
  }
};

// Y as the last pass's destination (no output gather): element u of the item whose first
// element is t0 goes to column t0 + u·DLO of batch row row0 + row, rows past B not at all.
template <class T, int DLO>
struct GlobalOut {
  const YTile<T>& y;
  __device__ __forceinline__ GlobalOut(T*, const YTile<T>& y_) : y(y_) {}
  __device__ __forceinline__ void write(int t0, int row, int u, T v) const {
    const long long b = y.row0 + row;
    if (b < y.B) y.Y[b * y.sy_b + (long long)(t0 + u * DLO) * y.sy_f] = v;
  }
};

// One pass over the tile. Work item = (q, rows): q = hi·DLO + lo (neighbouring lanes take
// neighbouring lo, adjacent elements where DLO allows), and RG tile rows that it walks, RU at
// a time (their loads in flight together), with the pass's weights in registers, so that each
// block is read once per RG vectors (rows_per_item). TO_Y: the pass writes Y instead of the
// tile (the last pass of a launch, where ks_rows.py found a warp's stores whole sectors).
template <class T, int N, int RT, int NT, class P, int FI0, bool TO_Y> struct PassRun;
template <class T, int N, int RT, int NT, int FI0, bool TO_Y, class... Fs>
struct PassRun<T, N, RT, NT, Pass<Fs...>, FI0, TO_Y> {
  using P = Pass<Fs...>;
  using L = RowsLayout<T, N, RT>;
  using C = typename compute_of<T>::type;
  // NW: the weights' registers (one unused where a pass has none: Hadamard stages)
  static constexpr int NW = PassWeights<P, Fs...>::COUNT > 0 ? PassWeights<P, Fs...>::COUNT : 1;
  using Fc = Factors<T, C, N, P, FI0, 0, NW, Fs...>;
  static constexpr int E = P::E, DLO = P::DLO, Q = N / E;
  static constexpr int RG = rows_per_item(RT, Q, NT);
  static constexpr int RU = RG < 2 ? RG : 2;
  static constexpr int WORK = (RT / RG) * Q;
  static_assert(N % (E * DLO) == 0, "a pass's element sets tile the vector");
  static_assert(RT % RG == 0, "rows of a work item tile the rows of the tile");
  using Out = typename either<TO_Y, GlobalOut<T, DLO>, TileSide<T, L, DLO>>::type;

  __device__ __forceinline__ static void run(T* tile, const long long* meta, const YTile<T>& y) {
    const Out out{tile, y};
    for (int w = threadIdx.x; w < WORK; w += NT) {
      const int q = w % Q, row0 = (w / Q) * RG;
      const int lo = q % DLO, hi = q / DLO;
      const int t0 = hi * (E * DLO) + lo;
      C wts[NW];
      Fc::load(wts, hi, lo, meta);
      for (int row = row0; row < row0 + RG; row += RU) {
        C x[RU][E];
#pragma unroll
        for (int r = 0; r < RU; ++r)
#pragma unroll
          for (int u = 0; u < E; ++u) x[r][u] = widen(tile[L::at(row + r, t0 + u * DLO)]);
#pragma unroll
        for (int r = 0; r < RU; ++r) Fc::apply(x[r], wts);
#pragma unroll
        for (int r = 0; r < RU; ++r)
#pragma unroll
          for (int u = 0; u < E; ++u) out.write(t0, row + r, u, narrow<T>(x[r][u]));
      }
    }
  }
};

// The passes in order, a barrier between two (the next reads what the last wrote); the last
// writes Y when TO_Y (see PassRun).
template <class T, int N, int RT, int NT, int FI, bool TO_Y, class... Ps>
struct Passes {
  __device__ __forceinline__ static void run(T*, const long long*, const YTile<T>&) {}
};
template <class T, int N, int RT, int NT, int FI, bool TO_Y, class P, class... Rest>
struct Passes<T, N, RT, NT, FI, TO_Y, P, Rest...> {
  static constexpr bool LAST = sizeof...(Rest) == 0;
  __device__ __forceinline__ static void run(T* tile, const long long* meta, const YTile<T>& y) {
    PassRun<T, N, RT, NT, P, FI, TO_Y && LAST>::run(tile, meta, y);
    if constexpr (!LAST) {
      __syncthreads();
      Passes<T, N, RT, NT, FI + P::NF, TO_Y, Rest...>::run(tile, meta, y);
    }
  }
};

// Which axis a tile's global accesses walk, V elements per access: t within a row (the rows
// are batch-size-first feature vectors) or the batch row (batch-size-last).
enum Along { ALONG_T = 0, ALONG_ROW = 1 };

// Vector e of the tile -> (row, t) of its first element; its V elements follow along ALONG.
template <int N, int RT, int V, int ALONG>
__device__ __forceinline__ void vector_origin(int e, int& row, int& t) {
  if constexpr (ALONG == ALONG_T) {
    row = e / (N / V); t = (e % (N / V)) * V;
  } else {
    t = e / (RT / V); row = (e % (RT / V)) * V;
  }
}

// Elements each thread moves per round of a load or store: loads in flight before the
// shared-memory writes.
constexpr int ROUND = 4;

// t with its log2(N) bits in reverse order (N a power of two).
template <int N>
__device__ __forceinline__ int bit_reversed(int t) {
  static_assert(N > 1 && (N & (N - 1)) == 0, "bit reversal needs a power of two");
  return (int)(__brev((unsigned)t) >> (32 - log2_of(N)));
}

// Global -> shared: tile row `row` is batch row row0 + row; element (row, t) is read from
// column t of X and lands at position load_to[t] (t without an input gather; REVERSED: at the
// bit reversal of t, N a power of two, the digit reversal of a radix-2 FFT computed instead
// of read from a table: DFT(4096) complex64 0.43 -> 0.39 ms on an H200). Rows past B
// are zero-filled (computed, never stored).
template <class T, int N, int RT, int NT, int V, int ALONG, bool REVERSED>
__device__ __forceinline__ void load_tile(T* tile, const T* __restrict__ X, long long B,
                                          long long row0, long long s_f, long long s_b,
                                          const int* __restrict__ load_to) {
  using L = RowsLayout<T, N, RT>;
  using Vec = vec<T, V>;
  constexpr int VECS = RT * N / V;
  for (int e0 = threadIdx.x; e0 < VECS; e0 += NT * ROUND) {
    Vec v[ROUND];
#pragma unroll
    for (int i = 0; i < ROUND; ++i) {
      const int e = e0 + i * NT;
      int row = 0, t = 0;
      if (e < VECS) vector_origin<N, RT, V, ALONG>(e, row, t);
      const long long b = row0 + row;
      const T* src = X + b * s_b + t * s_f;
      if (e < VECS && b + (ALONG == ALONG_ROW ? V - 1 : 0) < B) {
        v[i] = *reinterpret_cast<const Vec*>(src);
      } else {
#pragma unroll
        for (int m = 0; m < V; ++m) {
          const bool live = e < VECS && b + (ALONG == ALONG_ROW ? m : 0) < B;
          v[i].v[m] = live ? src[ALONG == ALONG_T ? m : m * s_b] : zero(T());
        }
      }
    }
#pragma unroll
    for (int i = 0; i < ROUND; ++i) {
      const int e = e0 + i * NT;
      if (e >= VECS) break;
      int row, t;
      vector_origin<N, RT, V, ALONG>(e, row, t);
#pragma unroll
      for (int m = 0; m < V; ++m) {
        const int tm = ALONG == ALONG_T ? t + m : t, rm = ALONG == ALONG_T ? row : row + m;
        int to = load_to ? load_to[tm] : tm;
        if constexpr (REVERSED) to = bit_reversed<N>(tm);
        tile[L::at(rm, to)] = v[i].v[m];
      }
    }
  }
}

// Shared -> global, the mirror image: column t of batch row row0 + row of Y is tile element
// (row, store_from[t]) (t without an output gather).
template <class T, int N, int RT, int NT, int V, int ALONG>
__device__ __forceinline__ void store_tile(const T* tile, T* __restrict__ Y, long long B,
                                           long long row0, long long s_f, long long s_b,
                                           const int* __restrict__ store_from) {
  using L = RowsLayout<T, N, RT>;
  using Vec = vec<T, V>;
  constexpr int VECS = RT * N / V;
  for (int e = threadIdx.x; e < VECS; e += NT) {
    int row, t;
    vector_origin<N, RT, V, ALONG>(e, row, t);
    const long long b = row0 + row;
    if (b >= B) continue;
    Vec v;
#pragma unroll
    for (int m = 0; m < V; ++m) {
      const int tm = ALONG == ALONG_T ? t + m : t, rm = ALONG == ALONG_T ? row : row + m;
      v.v[m] = tile[L::at(rm, store_from ? store_from[tm] : tm)];
    }
    T* dst = Y + b * s_b + t * s_f;
    if (b + (ALONG == ALONG_ROW ? V - 1 : 0) < B) {
      *reinterpret_cast<Vec*>(dst) = v;
    } else {
#pragma unroll
      for (int m = 0; m < V; ++m)
        if (b + m < B) dst[m * s_b] = v.v[m];     // ALONG_ROW only: a ragged last vector
    }
  }
}

// Y = K_F ... K_1 X on whole feature vectors of length N. Ps: the passes (Pass<Radix...>),
// factors in the order they are applied. X: element (row, column) at row·sx_b + column·sx_f;
// Y likewise with sy_*. VX / VY: elements per global load / store along ALONG (1 for any
// strides; more only where the host checked contiguity and alignment). MINB: blocks per SM
// the registers must allow (several blocks per SM overlap one's loads with another's
// arithmetic). load_to / store_from: the folded gathers (null: none); REVERSED: the input
// gather is the bit reversal, computed (load_tile). TO_Y (batch-size-first, no output
// gather): the last pass writes Y itself instead of store_tile, which saves a round trip of
// the tile through shared memory, the kernel's busiest path (DFT(1024) 0.42 -> 0.38 ms on
// an H200). Reading X in the first pass the same way was slower (0.47 ms: scalar loads, the
// gather's columns per element, exposed latency).
// meta: META entries per factor (see load_weights). Tiles: ceil(B / RT).
template <class T, int N, int RT, int NT, int MINB, int ALONG, int VX, int VY, bool REVERSED,
          bool TO_Y, class... Ps>
__global__ void __launch_bounds__(NT, MINB) ks_rows(
    const T* __restrict__ X, T* __restrict__ Y, const long long* __restrict__ meta,
    long long B, long long sx_f, long long sx_b, long long sy_f, long long sy_b,
    const int* __restrict__ load_to, const int* __restrict__ store_from, long long tiles) {
  using L = RowsLayout<T, N, RT>;
  static_assert(ALONG == ALONG_T ? N % VX == 0 && N % VY == 0 : RT % VX == 0 && RT % VY == 0,
                "vectors tile the walked axis");
  static_assert(ALONG == ALONG_T || !TO_Y, "a pass writes Y itself in batch-size-first only");
  require_dynamic_smem<L::SMEM_BYTES>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* tile = reinterpret_cast<T*>(smem_raw);
  for (long long it = blockIdx.x; it < tiles; it += gridDim.x) {
    const long long row0 = it * RT;
    load_tile<T, N, RT, NT, VX, ALONG, REVERSED>(tile, X, B, row0, sx_f, sx_b, load_to);
    __syncthreads();
    Passes<T, N, RT, NT, 0, TO_Y, Ps...>::run(tile, meta, YTile<T>{Y, B, row0, sy_f, sy_b});
    if constexpr (!TO_Y) {
      __syncthreads();
      store_tile<T, N, RT, NT, VY, ALONG>(tile, Y, B, row0, sy_f, sy_b, store_from);
    }
    __syncthreads();   // the next tile overwrites the shared memory
  }
}

}  // namespace ks
