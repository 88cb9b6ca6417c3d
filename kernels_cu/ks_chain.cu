// Fused application of a segment of a KS chain: Y = K_F ... K_2 K_1 X in one kernel.
//
// Every factor K_f = I_{a_f} ⊗ 1_{b_f × c_f} ⊗ I_{d_f} of the segment is also
// I_AS ⊗ (dense) ⊗ I_DS with AS = gcd(a_f) and DS = gcd(d_f), so the segment acts
// independently on AS·DS "super-groups": super-group g = (i', j') holds the n elements
//
//     p = i'·n·DS + t·DS + j'          (t < n; n = NIN at the input, NOUT at the output)
//
// of a feature vector. A block owns a tile of RT batch rows × SLOTS super-groups (`slot` is
// a super-group's place in the tile), loads it into shared memory once, applies every
// factor there (barrier between factors) and stores it once: the batch is read and written
// once per segment instead of once per factor.
//
// Index names as in ks_matmul.cu and kscupy/pattern.py: k < b output row of a block, l < c
// reduction index. Inside super-group g, factor f splits into S_f = (a_f/AS)·(d_f/DS)
// sub-groups s = (i_s, j_s) with df = d_f/DS; sub-group s maps input t = i_s·c·df + l·df + j_s
// (l < c) to output t = i_s·b·df + k·df + j_s (k < b) through the b × c block of the
// factor's global group (i_f, j_f) = (i'·a_f/AS + i_s, j_s·DS + j').
//
// Work item of a stage: TM outputs (k0 .. k0+TM) of one sub-group of one super-group for RW
// rows, a TM × RW register tile: acc[m][r] += w[k0+m, l] · x[r, l] over l < c. Weights come
// from global memory (L1/L2-resident) and are reused across the RW rows; inputs come from
// shared memory and are reused across the TM outputs. A factor with b == c whose work item
// covers its whole block (TM == b) is applied in place: the work item reads its c inputs
// before it writes its b outputs over them, and no other work item touches them.
//
// Permutations of the chain are folded into the global accesses: element p of the segment's
// input is read from column src[p] (when src is given) and element p of its output is
// written to column dst[p]. gorder (optional) lists the super-groups in the order tiles take
// them, so that a permuted read still walks contiguous columns.
#include "ks_launch.cuh"
#include "ks_scalar.cuh"

namespace ks {

// Pattern (A, B, C, D) of one factor and its work-item shape: TM outputs × RW rows.
// VEC = 1: a work item covers the whole block (TM == B) and loads it with 16-byte vector
// loads (the block's bytes are a multiple of 16 and its storage is 16-byte aligned); TR = 1
// then says the block is stored transposed (a transposed view). VEC = 0 reads element by
// element through the run-time strides of `meta`.
template <int A_, int B_, int C_, int D_, int TM_, int RW_, int TR_ = 0, int VEC_ = 0>
struct Factor {
  static constexpr int a = A_, b = B_, c = C_, d = D_, tm = TM_, rw = RW_;
  static constexpr bool transposed = TR_ != 0, vec = VEC_ != 0;
  static_assert(B_ % TM_ == 0, "TM must divide b");
  static_assert(!VEC_ || TM_ == B_, "a vector-loaded block is one work item's");
  static constexpr bool in_place = (B_ == C_) && (TM_ == B_);
};

__host__ __device__ constexpr int gcd(int x, int y) { return y == 0 ? x : gcd(y, x % y); }
__host__ __device__ constexpr int cmax(int x, int y) { return x > y ? x : y; }

template <class... Fs> struct Segment;
template <class F> struct Segment<F> {
  static constexpr int AS = F::a, DS = F::d;
  static constexpr int NF = 1;
};
template <class F, class... Rest> struct Segment<F, Rest...> {
  static constexpr int AS = gcd(F::a, Segment<Rest...>::AS);
  static constexpr int DS = gcd(F::d, Segment<Rest...>::DS);
  static constexpr int NF = 1 + sizeof...(Rest);
};

// Lengths (per super-group) of factor F's input and output inside a segment (AS, DS).
template <class F, int AS, int DS> struct Span {
  static constexpr int af = F::a / AS, df = F::d / DS;
  static constexpr int n_in = af * F::c * df, n_out = af * F::b * df;
};

template <int AS, int DS, class... Fs> struct MaxLen;
template <int AS, int DS> struct MaxLen<AS, DS> { static constexpr int value = 0; };
template <int AS, int DS, class F, class... Rest> struct MaxLen<AS, DS, F, Rest...> {
  static constexpr int value = cmax(cmax(Span<F, AS, DS>::n_in, Span<F, AS, DS>::n_out),
                                    MaxLen<AS, DS, Rest...>::value);
};

template <class... Fs> struct First;
template <class F, class... Rest> struct First<F, Rest...> { using type = F; };
template <class... Fs> struct Last;
template <class F> struct Last<F> { using type = F; };
template <class F, class... Rest> struct Last<F, Rest...> { using type = typename Last<Rest...>::type; };

// Per-factor run-time data, packed by the host into one int64 array of 4·NF entries:
//   meta[f]        address of factor f's pre-tiled values (block of group (i, j) at (i·d + j)·b·c)
//   meta[NF + f]   sk, meta[2NF + f] sl: element (k, l) of a block at k·sk + l·sl (a
//                  transposed view swaps them)
//   meta[3NF + f]  1 to use conj(w) (adjoint and conjugate views of complex factors)
// Shared-memory tile: element (row, t, slot) of a row of NMAX·SLOTS elements at
// row·ROW + q + q/PAD, q = t·SLOTS + slot: one padding element every 128 bytes, so that
// strided sub-group accesses spread over the banks, and one after each row. A fixed row
// stride lets the RW rows of a work item differ by compile-time offsets.
template <class T, int NMAX, int SLOTS>
struct Tile {
  static constexpr int PAD = 128 / sizeof(T) > 0 ? 128 / sizeof(T) : 1;
  static constexpr int ROW = NMAX * SLOTS + (NMAX * SLOTS) / PAD + 1;
  T* base;
  __device__ __forceinline__ static int offset(int t, int slot) {
    const int q = t * SLOTS + slot;
    return q + q / PAD;
  }
  __device__ __forceinline__ int index(int row, int t, int slot) const { return row * ROW + offset(t, slot); }
  __device__ __forceinline__ T& at(int row, int t, int slot) const { return base[index(row, t, slot)]; }
  __host__ __device__ static constexpr int elements(int rows) { return rows * ROW; }
};

// One stage: apply factor F (index FI of the segment) from tile `in` to tile `out`.
template <class T, int RT, int SLOTS, int NT, int AS, int DS, int NMAX, int FI, class F, int NF>
__device__ __forceinline__ void stage(const Tile<T, NMAX, SLOTS>& in,
                                      const Tile<T, NMAX, SLOTS>& out,
                                      const long long* __restrict__ meta,
                                      const int (&sg)[2][SLOTS]) {
  using SP = Span<F, AS, DS>;
  constexpr int b = F::b, c = F::c, TM = F::tm, RW = F::rw;
  constexpr int S = SP::af * SP::df;
  constexpr int work = SLOTS * S * (b / TM) * (RT / RW);
  const T* __restrict__ w = reinterpret_cast<const T*>(meta[FI]);
  const int sk = (int)meta[NF + FI], sl = (int)meta[2 * NF + FI];
  const bool cj = meta[3 * NF + FI] != 0;
  for (int item = threadIdx.x; item < work; item += NT) {
    // item -> (slot fastest, sub-group s, output chunk, row chunk)
    const int slot = item % SLOTS;
    int rest = item / SLOTS;
    const int s = rest % S;
    rest /= S;
    const int k0 = (rest % (b / TM)) * TM;
    const int r0 = (rest / (b / TM)) * RW;
    const int i_s = s / SP::df, j_s = s % SP::df;
    const int i_g = sg[0][slot], j_g = sg[1][slot];     // super-group (i', j') of the slot
    const long long group = (long long)(i_g * SP::af + i_s) * F::d + (j_s * DS + j_g);
    const T* __restrict__ wg = w + group * (b * c) + k0 * sk;
    const int t_in = i_s * c * SP::df + j_s;             // + l·df
    const int t_out = i_s * b * SP::df + j_s;            // + k·df

    using C = typename compute_of<T>::type;   // float for float16 values
    C acc[TM][RW];
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
      for (int r = 0; r < RW; ++r) acc[m][r] = zero(C());
    // VEC: the whole b × c block in registers, fetched with 16-byte loads up front.
    constexpr int WORDS = F::vec ? b * c * (int)sizeof(T) / 16 : 1;
    uint4 block[WORDS];
    if constexpr (F::vec) {
      const uint4* src4 = reinterpret_cast<const uint4*>(wg);
#pragma unroll
      for (int i = 0; i < WORDS; ++i) block[i] = __ldg(src4 + i);
    }
#pragma unroll(c <= 16 ? c : 4)
    for (int l = 0; l < c; ++l) {
      C x[RW], wv[TM];
#pragma unroll
      for (int r = 0; r < RW; ++r) x[r] = widen(in.at(r0 + r, t_in + l * SP::df, slot));
#pragma unroll
      for (int m = 0; m < TM; ++m) {
        T v;
        if constexpr (F::vec)
          v = reinterpret_cast<const T*>(block)[F::transposed ? l * b + m : m * c + l];
        else
          v = wg[m * sk + l * sl];
        wv[m] = widen(cj ? ks::conj(v) : v);
      }
#pragma unroll
      for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int r = 0; r < RW; ++r) acc[m][r] = ks::fma(wv[m], x[r], acc[m][r]);
    }
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
      for (int r = 0; r < RW; ++r) out.at(r0 + r, t_out + (k0 + m) * SP::df, slot) = narrow<T>(acc[m][r]);
  }
}

// Apply factors FI, FI+1, ... alternating between the two buffers as needed; CUR is the
// buffer holding the current vector. `Result::buffer` is where the last factor leaves it.
template <class T, int RT, int SLOTS, int NT, int AS, int DS, int NMAX, int NF, int FI, int CUR,
          class... Fs>
struct Stages {
  static constexpr int buffer = CUR;
  __device__ static void run(const Tile<T, NMAX, SLOTS> (&)[2], const long long*,
                             const int (&)[2][SLOTS]) {}
};
template <class T, int RT, int SLOTS, int NT, int AS, int DS, int NMAX, int NF, int FI, int CUR,
          class F, class... Rest>
struct Stages<T, RT, SLOTS, NT, AS, DS, NMAX, NF, FI, CUR, F, Rest...> {
  static constexpr int NEXT = F::in_place ? CUR : 1 - CUR;
  using Tail = Stages<T, RT, SLOTS, NT, AS, DS, NMAX, NF, FI + 1, NEXT, Rest...>;
  static constexpr int buffer = Tail::buffer;
  __device__ static void run(const Tile<T, NMAX, SLOTS> (&buf)[2], const long long* meta,
                             const int (&sg)[2][SLOTS]) {
    stage<T, RT, SLOTS, NT, AS, DS, NMAX, FI, F, NF>(buf[CUR], buf[NEXT], meta, sg);
    __syncthreads();
    Tail::run(buf, meta, sg);
  }
};

template <class... Fs>
__host__ __device__ constexpr bool all_in_place() { return (Fs::in_place && ...); }

// Elements each thread moves between global and shared memory per round of a tile's load
// and store.
constexpr int UNROLL = 8;

// Order in which a tile's elements are walked in global memory (neighbouring threads take
// neighbouring elements along this axis): the batch row, the super-group slot or t.
enum WalkOrder { WALK_ROW = 0, WALK_SLOT = 1, WALK_T = 2 };

template <int RT, int SLOTS, int N>
__device__ __forceinline__ void walk(int e, int order, int& row, int& t, int& slot) {
  if (order == WALK_ROW) {
    row = e % RT; e /= RT; slot = e % SLOTS; t = e / SLOTS;
  } else if (order == WALK_SLOT) {
    slot = e % SLOTS; e /= SLOTS; t = e % N; row = e / N;
  } else {
    t = e % N; e /= N; slot = e % SLOTS; row = e / SLOTS;
  }
}

// Column of tile element (t, slot) in a segment's input (N = NIN) or output (N = NOUT):
// p = i'·N·DS + t·DS + j', through the permutation table when there is one.
template <int N, int DS, int SLOTS>
__device__ __forceinline__ long long column(int t, int slot, const int (&sg)[2][SLOTS],
                                            const int* __restrict__ table) {
  const long long p = (long long)sg[0][slot] * N * DS + (long long)t * DS + sg[1][slot];
  return table ? (long long)table[p] : p;
}

// The fast path of load_tile / store_tile: the offsets of this thread's elements of a row,
// in global memory (column · stride) and in a shared-memory row (-1: no element).
template <int SLOTS, int NT, int N, int DS, int EACH, class Tl>
__device__ __forceinline__ void row_offsets(int (&goff)[EACH], int (&soff)[EACH], int order,
                                            long long s_f, const int (&sg)[2][SLOTS],
                                            const int* __restrict__ table) {
#pragma unroll
  for (int i = 0; i < EACH; ++i) {
    const int e = threadIdx.x + i * NT;
    int row, t = 0, slot = 0;
    if (e < N * SLOTS) walk<1, SLOTS, N>(e, order, row, t, slot);
    goff[i] = e < N * SLOTS ? (int)(column<N, DS, SLOTS>(t, slot, sg, table) * s_f) : 0;
    soff[i] = e < N * SLOTS ? Tl::offset(t, slot) : -1;
  }
}

// Global -> shared: the tile's RT rows of N·SLOTS elements. Fast path (the walk runs along the
// row, i.e. not WALK_ROW, and column offsets fit in 32 bits): each thread works out the
// column offsets and shared-memory offsets of its elements once, and then only adds a row
// base per row. Otherwise every element's position is computed from its flat index, UNROLL
// elements at a time so that each thread keeps several loads in flight.
template <class T, int RT, int SLOTS, int NT, int N, int DS, class Tl>
__device__ __forceinline__ void load_tile(const Tl& tile, const T* __restrict__ X, long long B,
                                          long long row0, long long s_f, long long s_b,
                                          const int* __restrict__ table, const int (&sg)[2][SLOTS],
                                          int order, int narrow) {
  constexpr int PER_ROW = N * SLOTS, EACH = (PER_ROW + NT - 1) / NT;
  if (order != WALK_ROW && narrow && EACH <= 16) {
    int goff[EACH], soff[EACH];
    row_offsets<SLOTS, NT, N, DS, EACH, Tl>(goff, soff, order, s_f, sg, table);
#pragma unroll 2
    for (int row = 0; row < RT; ++row) {
      const bool live = row0 + row < B;
      const T* __restrict__ xr = X + (live ? (row0 + row) * s_b : 0);
      T v[EACH];
#pragma unroll
      for (int i = 0; i < EACH; ++i) v[i] = (live && soff[i] >= 0) ? xr[goff[i]] : zero(T());
#pragma unroll
      for (int i = 0; i < EACH; ++i)
        if (soff[i] >= 0) tile.base[row * Tl::ROW + soff[i]] = v[i];
    }
    return;
  }
  constexpr int ALL = RT * PER_ROW;
  for (int e0 = threadIdx.x; e0 < ALL; e0 += NT * UNROLL) {
    T v[UNROLL];
    int q[UNROLL];
#pragma unroll
    for (int i = 0; i < UNROLL; ++i) {
      const int e = e0 + i * NT;
      int row = 0, t = 0, slot = 0;
      if (e < ALL) walk<RT, SLOTS, N>(e, order, row, t, slot);
      q[i] = e < ALL ? tile.index(row, t, slot) : -1;
      const long long col = e < ALL ? column<N, DS, SLOTS>(t, slot, sg, table) : 0;
      v[i] = (e < ALL && row0 + row < B) ? X[(row0 + row) * s_b + col * s_f] : zero(T());
    }
#pragma unroll
    for (int i = 0; i < UNROLL; ++i)
      if (q[i] >= 0) tile.base[q[i]] = v[i];
  }
}

// Shared -> global, the mirror image of load_tile.
template <class T, int RT, int SLOTS, int NT, int N, int DS, class Tl>
__device__ __forceinline__ void store_tile(const Tl& tile, T* __restrict__ Y, long long B,
                                           long long row0, long long s_f, long long s_b,
                                           const int* __restrict__ table, const int (&sg)[2][SLOTS],
                                           int order, int narrow) {
  constexpr int PER_ROW = N * SLOTS, EACH = (PER_ROW + NT - 1) / NT;
  if (order != WALK_ROW && narrow && EACH <= 16) {
    int goff[EACH], soff[EACH];
    row_offsets<SLOTS, NT, N, DS, EACH, Tl>(goff, soff, order, s_f, sg, table);
#pragma unroll 2
    for (int row = 0; row < RT; ++row) {
      if (row0 + row >= B) break;
      T* __restrict__ yr = Y + (row0 + row) * s_b;
#pragma unroll
      for (int i = 0; i < EACH; ++i)
        if (soff[i] >= 0) yr[goff[i]] = tile.base[row * Tl::ROW + soff[i]];
    }
    return;
  }
  constexpr int ALL = RT * PER_ROW;
  for (int e0 = threadIdx.x; e0 < ALL; e0 += NT * UNROLL) {
    T v[UNROLL];
    long long addr[UNROLL];
#pragma unroll
    for (int i = 0; i < UNROLL; ++i) {
      const int e = e0 + i * NT;
      int row = 0, t = 0, slot = 0;
      if (e < ALL) walk<RT, SLOTS, N>(e, order, row, t, slot);
      const long long col = e < ALL ? column<N, DS, SLOTS>(t, slot, sg, table) : 0;
      addr[i] = (e < ALL && row0 + row < B) ? (row0 + row) * s_b + col * s_f : -1;
      v[i] = tile.at(row, t, slot);
    }
#pragma unroll
    for (int i = 0; i < UNROLL; ++i)
      if (addr[i] >= 0) Y[addr[i]] = v[i];
  }
}

// The segment's geometry and shared-memory layout, the one definition that the kernel uses
// and that ks_chain_layout reports (kscupy/kernels/ks_chain.py mirrors it; a GPU test
// compares): one buffer of Tile::elements(RT) when every stage is in place, else two.
template <class T, int RT, int SLOTS, class... Fs>
struct ChainLayout {
  using Seg = Segment<Fs...>;
  static constexpr int AS = Seg::AS, DS = Seg::DS, NF = Seg::NF;
  static constexpr int NMAX = MaxLen<AS, DS, Fs...>::value;
  static constexpr int NIN = Span<typename First<Fs...>::type, AS, DS>::n_in;
  static constexpr int NOUT = Span<typename Last<Fs...>::type, AS, DS>::n_out;
  static constexpr int BUFFERS = all_in_place<Fs...>() ? 1 : 2;
  static constexpr int SMEM_BYTES = BUFFERS * Tile<T, NMAX, SLOTS>::elements(RT) * (int)sizeof(T);
};

// Reports the layout of one instantiation: out = {SMEM_BYTES, AS, DS, NIN, NOUT, NMAX, BUFFERS}.
template <class T, int RT, int SLOTS, class... Fs>
__global__ void ks_chain_layout(long long* out) {
  using L = ChainLayout<T, RT, SLOTS, Fs...>;
  out[0] = L::SMEM_BYTES; out[1] = L::AS; out[2] = L::DS; out[3] = L::NIN; out[4] = L::NOUT;
  out[5] = L::NMAX; out[6] = L::BUFFERS;
}

// Fs: the segment's factors in the order they are applied (first applied first).
// X: element (row, column) at row·sx_b + column·sx_f; Y likewise with sy_*.
// Tiles: `stiles` super-group tiles (AS·DS / SLOTS) × ceil(B / RT) row tiles, super fastest.
template <class T, int RT, int SLOTS, int NT, class... Fs>
__global__ void __launch_bounds__(NT, 2048 / NT / 4 > 0 ? 2048 / NT / 4 : 1) ks_chain(
    const T* __restrict__ X, T* __restrict__ Y, const long long* __restrict__ meta,
    long long B, long long sx_f, long long sx_b, long long sy_f, long long sy_b,
    const int* __restrict__ src, const int* __restrict__ dst, const int* __restrict__ gorder,
    int load_order, int store_order, int narrow, long long tiles) {
  using L = ChainLayout<T, RT, SLOTS, Fs...>;
  constexpr int AS = L::AS, DS = L::DS, NF = L::NF, NMAX = L::NMAX;
  constexpr int NIN = L::NIN, NOUT = L::NOUT, BUFFERS = L::BUFFERS;
  constexpr int STILES = AS * DS / SLOTS;
  static_assert((AS * DS) % SLOTS == 0, "SLOTS must divide the number of super-groups");
  using TileT = Tile<T, NMAX, SLOTS>;
  using Run = Stages<T, RT, SLOTS, NT, AS, DS, NMAX, NF, 0, 0, Fs...>;
  require_dynamic_smem<L::SMEM_BYTES>();

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const TileT buf[2] = {TileT{smem}, TileT{smem + (BUFFERS - 1) * TileT::elements(RT)}};
  __shared__ int sg[2][SLOTS];   // (i', j') of the tile's super-group slots

  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int stile = (int)(tile % STILES);
    const long long row0 = (tile / STILES) * RT;
    for (int slot = threadIdx.x; slot < SLOTS; slot += NT) {
      const int g = gorder ? gorder[stile * SLOTS + slot] : stile * SLOTS + slot;
      sg[0][slot] = g / DS;
      sg[1][slot] = g % DS;
    }
    __syncthreads();

    load_tile<T, RT, SLOTS, NT, NIN, DS>(buf[0], X, B, row0, sx_f, sx_b, src, sg, load_order, narrow);
    __syncthreads();
    Run::run(buf, meta, sg);
    store_tile<T, RT, SLOTS, NT, NOUT, DS>(buf[Run::buffer], Y, B, row0, sy_f, sy_b, dst, sg,
                                        store_order, narrow);
    __syncthreads();   // the next tile overwrites sg and the buffers
  }
}

}  // namespace ks
