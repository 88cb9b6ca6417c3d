// What the tensor-core kernels share: the block's shared-memory layout (MmaLayout), the
// operands' fragment loads from it (w_fragment, x_fragments), a warp's loads and products of
// one k-step (warp_k_step, warp_products), the partial sums' close (close_partial_sums) and
// the group order's epilogue
// through it (store_group_tile). ks_mma.cu runs every order and dtype; ks_mma_group.cu the
// group order alone for float32, float16 and bfloat16, with the same layout and epilogue; ks_values_grad.cu the values'
// gradient, whose G and X tiles sit in shared memory as ks_mma's W and X tiles do.
//
// NVRTC-compilable: no host headers.
#pragma once

#include "ks_scalar.cuh"
#include "ks_tiles.cuh"
#include "ks_tensor_core.cuh"

namespace ks {

// f(a[e], b[e]) for every element e of two register arrays of the same shape (any rank):
// after unrolling every index is a constant, so the arrays stay in registers.
template <class R, class A, class F>
__device__ __forceinline__ void each_register(A& a, const A& b, F f) {
  constexpr int n = (int)(sizeof(A) / sizeof(R));
#pragma unroll
  for (int e = 0; e < n; ++e) f(reinterpret_cast<R*>(&a)[e], reinterpret_cast<const R*>(&b)[e]);
}

__host__ __device__ constexpr int round_up(int n, int m) { return (n + m - 1) / m * m; }

// The block's shared-memory layout, the one definition that the kernel uses and that
// ks_mma_layout reports (kscupy/kernels/ks_mma.py mirrors it; a GPU test compares): STAGES
// stages of (Xs[SLOTS][..][XS_LD], Ws[SLOTS][..][WS_LD]), each buffer rounded to 16 bytes;
// in the group order at least SLOTS * BM * BN elements, the unpadded output tile.
//
// The staged epilogues (kernel below) pass the output tile through shared memory: after a
// block's last tile through all of it (no copies are in flight any more), in one pass where
// it fits; after any other tile through the stage just consumed (the others hold copies in
// flight), in as many passes as that takes.
template <class T, int SLOTS, int BM, int BN, int BK, int WM, int WN, int STAGES, int ORDER, int WT>
struct MmaLayout {
  using R = typename parts_of<T>::real;
  using S = MmaShape<R>;
  static constexpr int PARTS = parts_of<T>::PARTS;
  static constexpr int GROUPS = SLOTS, ROWS = BM, COLUMNS = BN;   // the tile, for functions of L
  static constexpr int WARPS = SLOTS * WM * WN, NT = 32 * WARPS;
  static constexpr int WTM = BM / WM, WTN = BN / WN;        // one warp's piece of the tile
  static constexpr int MT = WTM / S::M, NTL = WTN / S::N;    // its MMA tiles
  static_assert(WTM % S::M == 0 && WTN % S::N == 0 && BK % S::K == 0, "tile vs MMA shape");
  static constexpr bool X_KMAJOR = ORDER != 0, W_KMAJOR = WT != 1;
  static constexpr bool HALF = sizeof(T) == 2;   // float16: every fragment through ldmatrix
  static constexpr int PAD_K = HALF ? 8 : 4, PAD_MN = HALF ? 8 : 32 / (int)sizeof(T);
  // float operands stored K-major are read with ldmatrix (16-byte rows, conflict-free with
  // the K-major padding); the rest with one shared load per fragment register
  static constexpr bool LDMATRIX_W = sizeof(T) == 4 && W_KMAJOR;
  static constexpr bool LDMATRIX_X = sizeof(T) == 4 && X_KMAJOR && NTL % 2 == 0;
  static constexpr int XS_LD = X_KMAJOR ? BK + PAD_K : BN + PAD_MN;
  static constexpr int XS_SLOT = (X_KMAJOR ? BN : BK) * XS_LD;
  static constexpr int WS_LD = W_KMAJOR ? BK + PAD_K : BM + PAD_MN;
  static constexpr int WS_SLOT = (W_KMAJOR ? BM : BK) * WS_LD;
  static constexpr int ALIGN = 16 / (int)sizeof(T);        // elements per 16 bytes (>= 1)
  static constexpr int XS_SIZE = round_up(SLOTS * XS_SLOT, ALIGN);
  static constexpr int WS_SIZE = round_up(SLOTS * WS_SLOT, ALIGN);
  static constexpr int STAGE = XS_SIZE + WS_SIZE;
  static constexpr int YS_SIZE = ORDER == 1 ? SLOTS * BM * BN : 0;
  static constexpr int AREA = STAGES * STAGE > YS_SIZE ? STAGES * STAGE : YS_SIZE;
  // WT 3 (bulk copies of packed weights, ks_mma_group.cu): an mbarrier per stage after AREA
  static constexpr int BARRIERS = WT == 3 ? 8 * STAGES : 0;
  static constexpr int SMEM_BYTES = AREA * (int)sizeof(T) + BARRIERS;
  // The group order's Ys[slot][n][k]: YS_LDN elements per column n, YS_SLOT(n) per slot for
  // n columns. The epilogue writes it from the accumulators, a warp's lanes at k = lane / 4
  // (+ 8) of columns n = 2 * (lane % 4) (+ 1), all in the warp's slot; and reads it as VX
  // slots of one (n, k) per thread, lanes walking g = SLOTS / VX slot groups, then k. Both
  // hit distinct banks (words, for float16) when, with BANK_ROW elements per 128 bytes and
  // LANES = min(32, BANK_ROW) lanes per shared-memory wavefront,
  //   2 * YS_LDN ≡ LANES / 4   and   VX * YS_SLOT ≡ LANES / g   (mod BANK_ROW):
  // the four column pairs (slot groups) then fall between the k's of one wavefront.
  // (Ys[n][k][slot], read as one 16-byte vector, would be an 8-way conflict on every write.)
  static constexpr int BANK_ROW = 128 / (int)sizeof(T), LANES = BANK_ROW < 32 ? BANK_ROW : 32;
  __host__ __device__ static constexpr int padded(int n, int multiple, int residue) {
    for (int p = 0; p < BANK_ROW; ++p)
      if ((multiple * (n + p) - residue) % BANK_ROW == 0) return n + p;
    return n;
  }
  static constexpr int YS_LDN = padded(BM, 2, LANES / 4);
  template <int VX>
  __host__ __device__ static constexpr int ys_slot(int columns) {
    return padded(columns * YS_LDN, VX, LANES * VX / SLOTS > 0 ? LANES * VX / SLOTS : 1);
  }
  // Batch columns per pass in `area` elements: the most that divide BN and fit (one does: a
  // stage's Ws alone holds SLOTS * BM * (BK + 4) >= SLOTS * (BM + 2 * BANK_ROW)).
  template <int VX>
  __host__ __device__ static constexpr int ys_columns(int area) {
    for (int n = BN; n > 1; --n)
      if (BN % n == 0 && SLOTS * ys_slot<VX>(n) <= area) return n;
    return 1;
  }
  // The batch order's Ys[r][YS_LD] for rows r = slot*BM + k, n along a row, padded by 8
  // elements (a warp's pair stores then hit distinct banks: 8 rows of 4 lanes, 8 to 32 bytes
  // each). Rows per pass in `area` elements: the most that divide SLOTS * BM and fit.
  static constexpr int YS_LD = BN + 8;
  __host__ __device__ static constexpr int ys_rows(int area) {
    for (int r = SLOTS * BM; r > 1; --r)
      if (SLOTS * BM % r == 0 && r * YS_LD <= area) return r;
    return 1;
  }
};

// W's fragment of the MMA row tile at k_base for k-step kk, from the stage's Ws: a[0] the real
// parts, a[1] the imaginary ones (negated when conj_w).
template <class T, class L, class AOp>
__device__ __forceinline__ void w_fragment(AOp (&a)[L::PARTS], const T* ws, int lane, int k_base,
                                           int kk, int conj_w) {
  using R = typename L::R;
  using S = typename L::S;
  constexpr int E = sizeof(T);
  if constexpr (L::HALF) {
    // matrices (rows k_base + 0-7 | 8-15) x (l = kk + 0-7 | 8-15), k-fastest: lanes
    // 8q .. 8q + 7 give the rows of matrix q; stored along k, they come transposed
    if constexpr (L::W_KMAJOR)
      ldmatrix_x4(a[0].v, shared_address(ws)
                              + E * ((k_base + (lane & 15)) * L::WS_LD + kk + 8 * (lane >> 4)));
    else
      ldmatrix_x4_trans(a[0].v, shared_address(ws) + E * ((kk + (lane & 7) + 8 * (lane >> 4)) * L::WS_LD
                                                           + k_base + 8 * ((lane >> 3) & 1)));
  } else {
    R re[S::A_REGS], im[S::A_REGS];
    if constexpr (L::LDMATRIX_W) {   // float, K-major: one ldmatrix per fragment
      unsigned r[4];
      ldmatrix_x4(r, shared_address(ws) + E * ((k_base + (lane & 15)) * L::WS_LD + kk + 4 * (lane >> 4)));
#pragma unroll
      for (int i = 0; i < 4; ++i) re[i] = __uint_as_float(r[i]);
    } else {
#pragma unroll
      for (int i = 0; i < S::A_REGS; ++i) {
        const int k = k_base + S::a_row(lane, i), l = kk + S::a_col(lane, i);
        const T w = ws[L::W_KMAJOR ? k * L::WS_LD + l : l * L::WS_LD + k];
        re[i] = real_part(w);
        im[i] = conj_w ? -imag_part(w) : imag_part(w);
      }
    }
    a[0].set(re);
    if constexpr (L::PARTS == 2) a[1].set(im);
  }
}

// X's fragments of a warp's NTL MMA column tiles (from column n_warp) for k-step kk, from the
// stage's Xs: x[q][0] real parts, x[q][1] imaginary ones.
template <class T, class L, class BOp>
__device__ __forceinline__ void x_fragments(BOp (&x)[L::NTL][L::PARTS], const T* xs, int lane,
                                            int n_warp, int kk) {
  using R = typename L::R;
  using S = typename L::S;
  constexpr int E = sizeof(T);
#pragma unroll
  for (int q = 0; q < L::NTL; ++q) {
    const int n_base = n_warp + q * S::N;
    if constexpr (L::HALF || L::LDMATRIX_X) {
      // one ldmatrix for tiles q and q + 1: registers 0, 1 are tile q's, 2, 3 tile q + 1's
      if (q % 2 == 1) continue;
      unsigned r[4];
      if constexpr (L::HALF && !L::X_KMAJOR)   // (l = kk + 0-7 | 8-15) x (n = n_base + 0-7 | 8-15)
        ldmatrix_x4_trans(r, shared_address(xs) + E * ((kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * L::XS_LD
                                                       + n_base + 8 * (lane >> 4)));
      else   // (n = n_base + 0-7 | 8-15) x (l = kk + 16 bytes' worth 0 | 1)
        ldmatrix_x4(r, shared_address(xs) + E * ((n_base + (lane & 7) + 8 * (lane >> 4)) * L::XS_LD
                                                 + kk + (16 / E) * ((lane >> 3) & 1)));
      if constexpr (L::HALF) {
        x[q][0].v[0] = r[0]; x[q][0].v[1] = r[1];
        x[q + 1][0].v[0] = r[2]; x[q + 1][0].v[1] = r[3];
      } else {
        const float lo[2] = {__uint_as_float(r[0]), __uint_as_float(r[1])};
        const float hi[2] = {__uint_as_float(r[2]), __uint_as_float(r[3])};
        x[q][0].set(lo);
        x[q + 1][0].set(hi);
      }
    } else {
      R re[S::B_REGS], im[S::B_REGS];
#pragma unroll
      for (int i = 0; i < S::B_REGS; ++i) {
        const int n = n_base + S::b_col(lane, i), l = kk + S::b_row(lane, i);
        const T v = xs[L::X_KMAJOR ? n * L::XS_LD + l : l * L::XS_LD + n];
        re[i] = real_part(v);
        im[i] = imag_part(v);
      }
      x[q][0].set(re);
      if constexpr (L::PARTS == 2) x[q][1].set(im);
    }
  }
}

// One k-step of a warp's products, sum(p, mt, q) += a[mt] * x[q] over its MT x NTL MMA tiles
// (sum returns the accumulator registers of part p, tile (mt, q)), term by term over all
// tiles so that consecutive MMAs write different sums. Complex values: four real products,
//   Re += ar*xr + (-ai)*xi,   Im += ar*xi + ai*xr   (a[mt][1] holds ai).
template <int PRECISION, class R, int MT, int NTL, int PARTS, class AOp, class BOp, class Sum>
__device__ __forceinline__ void warp_products(const AOp (&a)[MT][PARTS], const BOp (&x)[NTL][PARTS],
                                              Sum sum) {
#pragma unroll
  for (int term = 0; term < Terms<R, PRECISION>::value; ++term) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if constexpr (PARTS == 1) {
#pragma unroll
        for (int q = 0; q < NTL; ++q) mma_term<PRECISION>(term, sum(0, mt, q), a[mt][0], x[q][0]);
      } else {
        const AOp minus_im = a[mt][1].negated();
#pragma unroll
        for (int q = 0; q < NTL; ++q) {
          mma_term<PRECISION>(term, sum(0, mt, q), a[mt][0], x[q][0]);
          mma_term<PRECISION>(term, sum(1, mt, q), a[mt][0], x[q][1]);
          mma_term<PRECISION>(term, sum(0, mt, q), minus_im, x[q][1]);
          mma_term<PRECISION>(term, sum(1, mt, q), a[mt][1], x[q][0]);
        }
      }
    }
  }
}

// One k-step of warp (wm, wn)'s pieces: its MMA tiles' fragments of the W tile `ws` (rows
// wm * WTM.., conjugated where conj_w) and of the X tile `xs` (columns wn * WTN..) at
// reduction index kk, loaded from shared memory, then their products (warp_products).
template <class T, class L, int PRECISION, class Sum>
__device__ __forceinline__ void warp_k_step(const T* ws, const T* xs, int lane, int wm, int wn,
                                            int kk, int conj_w, Sum sum) {
  using R = typename L::R;
  using S = typename L::S;
  Operand<R, PRECISION, S::A_REGS> a[L::MT][L::PARTS];
#pragma unroll
  for (int mt = 0; mt < L::MT; ++mt)
    w_fragment<T, L>(a[mt], ws, lane, wm * L::WTM + mt * S::M, kk, conj_w);
  Operand<R, PRECISION, S::B_REGS> x[L::NTL][L::PARTS];
  x_fragments<T, L>(x, xs, lane, wn * L::WTN, kk);
  warp_products<PRECISION, R>(a, x, sum);
}

// Partial sums (ks_mma.cu's header): after the k-step kk (of STEP reduction indices) that
// closes a run of SUM_K, `part` is added to `acc` by rounding adds and cleared. Called with
// a constant kk once the k-step loop is unrolled.
template <int SUM_K, int STEP, class Acc, class A>
__device__ __forceinline__ void close_partial_sums(int kk, A& acc, A& part) {
  if ((kk + STEP) % SUM_K == 0) {
    each_register<Acc>(acc, part, [](Acc& total, Acc v) { total += v; });
    each_register<Acc>(part, part, [](Acc& total, Acc) { total = Acc(0); });
  }
}

// Y[rows(g)[k], n] of a group-order tile (ORDER 1, copies VX groups wide) from a block's
// accumulators: acc[p][mt][q][i] is the value of row wm * WTM + mt * 16 + c_row(lane, i),
// column wn * WTN + q * 8 + c_col(lane, i) of slot `slot`'s piece (real parts p = 0, imaginary
// p = 1). The tile passes through shared memory `ys` of `area` elements (L::AREA after a
// block's last tile, when no copies are in flight, else L::STAGE: the stage just consumed).
//   The slots' values of one (k, n) are adjacent in Y (Y[rows(g)[k], n] at consecutive
// addresses for g = g0 .. g0 + SLOTS - 1), so they are gathered in Ys[slot][n][k] (MmaLayout)
// and stored VX slots at once. Same vector width as X: VX | d keeps a vector inside one run of
// groups; the launch picks VX > 1 in this order only when Y's groups are adjacent
// (sy_f == 1, VX | sy_b).
//   A store vector is a pair p = (slot group, row k), p = k * (SLOTS / VX) + slot / VX, and a
// column n. Thread tid takes pair p = tid % P (and p + NT, ... where P > NT) and columns
// n = tid / P, + PH, + 2 PH, ...: lanes walk slot groups, then k (as Ys's padding assumes),
// and a thread's vectors of one pair lie a constant step apart in Ys and in Y, so each costs a
// pointer increment, not a 64-bit origin (the general walk would make the epilogue a large
// share of a tile's instructions). Where P does not divide NT, threads from
// PH * P on idle.
template <class L, int VX, class T, class Acc>
__device__ __forceinline__ void store_group_tile(
    T* Y, T* ys, bool whole, const TileOrigin& tile,
    const Acc (&acc)[L::PARTS][L::MT][L::NTL][L::S::C_REGS], int tid, int slot, int wm, int wn,
    int G, int b, long long B, long long y_step, long long sy_b, const GroupOrigins& origins) {
  using S = typename L::S;
  using XBits = typename Bits<VX * (int)sizeof(T)>::type;
  constexpr int SLOTS = L::GROUPS, BM = L::ROWS, BN = L::COLUMNS, NT = L::NT, PARTS = L::PARTS;
  constexpr int P = SLOTS / VX * BM, PH = NT >= P ? NT / P : 1;
  const int lane = tid & 31, k0 = tile.k0, g0 = tile.g0;
  const long long n0 = tile.n0;
  const int y_slot = tid % (SLOTS / VX) * VX;
  const long long y_group = origins.y(g0 + y_slot);
  const int YC = whole ? L::template ys_columns<VX>(L::AREA) : L::template ys_columns<VX>(L::STAGE);
  const int YS = L::template ys_slot<VX>(YC);
  for (int n_pass = 0; n_pass < BN; n_pass += YC) {
    __syncthreads();   // the area's readers (products, the previous pass) are done
#pragma unroll
    for (int mt = 0; mt < L::MT; ++mt)
#pragma unroll
      for (int q = 0; q < L::NTL; ++q)
#pragma unroll
        for (int i = 0; i < S::C_REGS; ++i) {
          const int k = wm * L::WTM + mt * S::M + S::c_row(lane, i);
          const int n = wn * L::WTN + q * S::N + S::c_col(lane, i) - n_pass;
          if (YC == BN || (n >= 0 && n < YC))
            ys[slot * YS + n * L::YS_LDN + k] = from_parts<T>(acc[0][mt][q][i], acc[PARTS - 1][mt][q][i]);
        }
    __syncthreads();
    // the columns this pass may store: within the tile's pass and the batch
    const int columns = (int)min((long long)YC, B - n0 - n_pass);
    if (tid < PH * P && g0 + y_slot < G) {
      for (int p = tid % P; p < P; p += NT) {
        const int k = p / (SLOTS / VX);
        if (k0 + k >= b) break;   // p only grows
        int n = NT >= P ? tid / P : 0;
        const T* src = ys + y_slot * YS + n * L::YS_LDN + k;
        T* dst = Y + y_group + (k0 + k) * y_step + (n0 + n_pass + n) * sy_b;
#pragma unroll 4
        for (; n < columns; n += PH, src += PH * L::YS_LDN, dst += PH * sy_b) {
          vec<T, VX> v;
#pragma unroll
          for (int u = 0; u < VX; ++u) v.v[u] = src[u * YS];
          *reinterpret_cast<XBits*>(dst) = *reinterpret_cast<const XBits*>(&v);
        }
      }
    }
  }
}

}  // namespace ks
