// Warp-level tensor-core products (mma.sync through inline PTX) for the KS kernels.
//
// NVRTC-compilable: no host headers; needs sm_80 or newer.
//
// A product of one warp is C[M x N] += A[M x K] * B[K x N] on fragments spread over the 32
// lanes. With lr = lane / 4 and lc = lane % 4 (PTX ISA, "matrix fragments for mma.m16n8k8" and
// "for mma.m16n8k16"), register i of a lane holds
//   float (m16n8k8, TF32 inputs):  A (lr + 8*(i%2), lc + 4*(i/2))   B (lc + 4*i, lr)
//                                  C (lr + 8*(i/2), 2*lc + i%2)
//   double (m16n8k8, DMMA):        as float's, one double per register
//   float16 (m16n8k16, float C):   A (lr + 8*(i%2), 2*lc + 8*(i/2) + {0,1})
//                                  B (2*lc + 8*i + {0,1}, lr)   C as float's
// (a float16 register holds two values adjacent along K). MmaShape<R> gives these positions
// (for float16 the first of each pair); kernels load fragments from shared memory with them,
// or with ldmatrix, whose 8x8 matrices of 16-bit pairs are these fragments' quarters.
//
// Precisions for float (PRECISION template argument):
//   PRECISION_DEFAULT  3xTF32: x = big + small with big = tf32(x) and small = x - big (read
//                      as TF32 by the tensor cores, i.e. truncated);
//                      acc += a.small*b.big + a.big*b.small + a.big*b.big (small terms first).
//                      The dropped small*small term is below 2^-22 relative: float32-grade.
//   PRECISION_TF32     one TF32 product: 10-bit mantissas, about 1e-3 relative error. Opt-in.
// double always uses DMMA (exact IEEE products, FP64 accumulation); float16 and bfloat16 one
// m16n8k16 product (exact products of the 11-bit or 8-bit values, FP32 accumulation).
#pragma once

#include "ks_mbarrier.cuh"
#include "ks_scalar.cuh"

namespace ks {

enum { PRECISION_DEFAULT = 0, PRECISION_TF32 = 1 };

template <class R> struct MmaShape;

// The 16x8x8 fragment positions, shared by float (TF32) and double (DMMA).
struct Shape16x8x8 {
  static constexpr int M = 16, N = 8, K = 8, A_REGS = 4, B_REGS = 2, C_REGS = 4;
  static __device__ __forceinline__ int a_row(int lane, int i) { return (lane >> 2) + 8 * (i & 1); }
  static __device__ __forceinline__ int a_col(int lane, int i) { return (lane & 3) + 4 * (i >> 1); }
  static __device__ __forceinline__ int b_row(int lane, int i) { return (lane & 3) + 4 * i; }
  static __device__ __forceinline__ int b_col(int lane, int) { return lane >> 2; }
  static __device__ __forceinline__ int c_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
  static __device__ __forceinline__ int c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }
};

template <> struct MmaShape<float> : Shape16x8x8 {};

// double: Hopper's DMMA m16n8k8 (sm_90) issues the FP64 tensor cores at twice the rate of
// Ampere's m8n8k4 (m8n8k4 tiles stay far below cuBLAS's DGEMM on sm_90). Before sm_90,
// mma_term issues the same fragments as four m8n8k4 products.
template <> struct MmaShape<double> : Shape16x8x8 {};

template <> struct MmaShape<float16> {
  static constexpr int M = 16, N = 8, K = 16, A_REGS = 4, B_REGS = 2, C_REGS = 4;
  static __device__ __forceinline__ int a_row(int lane, int i) { return (lane >> 2) + 8 * (i & 1); }
  static __device__ __forceinline__ int a_col(int lane, int i) { return 2 * (lane & 3) + 8 * (i >> 1); }
  static __device__ __forceinline__ int b_row(int lane, int i) { return 2 * (lane & 3) + 8 * i; }
  static __device__ __forceinline__ int b_col(int lane, int) { return lane >> 2; }
  static __device__ __forceinline__ int c_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
  static __device__ __forceinline__ int c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }
};

// bfloat16: float16's shape and fragment positions (m16n8k16 with float accumulators).
template <> struct MmaShape<bfloat16> : MmaShape<float16> {};

__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// An operand fragment of REGS registers, ready for the tensor cores in precision PRECISION.
template <class R, int PRECISION, int REGS> struct Operand;

template <int PRECISION, int REGS> struct Operand<float, PRECISION, REGS> {
  static constexpr bool SPLIT = PRECISION == PRECISION_DEFAULT;
  unsigned big[REGS], small[SPLIT ? REGS : 1];
  // big = x rounded to the nearest TF32 (add half a TF32 ulp, clear the 13 low mantissa
  // bits: two integer operations, cheaper than cvt.rna); small = x - big, exact in float32,
  // passed as it is: the tensor cores read the top 19 bits of a TF32 operand, so small is
  // truncated to TF32, an error below 2^-21 |x| since |small| <= 2^-11 |x|. Rounding small
  // too (cvt.rna: about 4 instructions a value on sm_90) does not change the error of a
  // long dot product (in a float64-summed emulation), which stays below what float32
  // accumulation alone adds. NaN and infinity stay what they are.
  __device__ __forceinline__ void set(const float (&x)[REGS]) {
#pragma unroll
    for (int i = 0; i < REGS; ++i) {
      if constexpr (SPLIT) {
        big[i] = (__float_as_uint(x[i]) + 0x1000u) & 0xffffe000u;
        small[i] = __float_as_uint(x[i] - __uint_as_float(big[i]));
      } else {
        big[i] = to_tf32(x[i]);   // one product: cvt keeps NaN a NaN
      }
    }
  }
  // The same fragment negated (exact: a sign flip of each part).
  __device__ __forceinline__ Operand negated() const {
    Operand r;
#pragma unroll
    for (int i = 0; i < REGS; ++i) {
      r.big[i] = big[i] ^ 0x80000000u;
      if constexpr (SPLIT) r.small[i] = small[i] ^ 0x80000000u;
    }
    return r;
  }
};

template <int PRECISION, int REGS> struct Operand<double, PRECISION, REGS> {
  double v[REGS];
  __device__ __forceinline__ void set(const double (&x)[REGS]) {
#pragma unroll
    for (int i = 0; i < REGS; ++i) v[i] = x[i];
  }
  __device__ __forceinline__ Operand negated() const {
    Operand r;
#pragma unroll
    for (int i = 0; i < REGS; ++i) r.v[i] = -v[i];
    return r;
  }
};

// float16 and bfloat16 fragments: registers of two values each, loaded as they are (ldmatrix).
template <int PRECISION, int REGS> struct Operand<float16, PRECISION, REGS> {
  unsigned v[REGS];
};
template <int PRECISION, int REGS> struct Operand<bfloat16, PRECISION, REGS> {
  unsigned v[REGS];
};

__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Products of one warp's fragments, by term: TERMS<R, PRECISION> products make up c += a*b,
// and mma_term<t> adds the t-th. Kernels issue term t for every tile before term t + 1, so
// that back-to-back MMAs write different accumulators (no wait on the previous result).
// 3xTF32 adds the small terms first: a.small*b.big, a.big*b.small, then a.big*b.big.
template <class R, int PRECISION> struct Terms { static constexpr int value = 1; };
template <> struct Terms<float, PRECISION_DEFAULT> { static constexpr int value = 3; };

template <int PRECISION, int TERM>
__device__ __forceinline__ void mma_term(float (&c)[4], const Operand<float, PRECISION, 4>& a,
                                         const Operand<float, PRECISION, 2>& b) {
  if constexpr (PRECISION == PRECISION_DEFAULT && TERM == 0) mma_tf32(c, a.small, b.big);
  else if constexpr (PRECISION == PRECISION_DEFAULT && TERM == 1) mma_tf32(c, a.big, b.small);
  else mma_tf32(c, a.big, b.big);
}

// c = the first term of a*b (c's old values unused): the product that starts a sum, with the
// accumulator input a zero register instead of c zeroed by a move per register.
template <int PRECISION>
__device__ __forceinline__ void mma_first_term(float (&c)[4], const Operand<float, PRECISION, 4>& a,
                                               const Operand<float, PRECISION, 2>& b) {
  const unsigned* a_regs;   // 3xTF32 starts with a.small * b.big, one product with a.big
  if constexpr (PRECISION == PRECISION_DEFAULT) a_regs = a.small;
  else a_regs = a.big;
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"
      : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
      : "r"(a_regs[0]), "r"(a_regs[1]), "r"(a_regs[2]), "r"(a_regs[3]), "r"(b.big[0]),
        "r"(b.big[1]), "f"(0.0f));
}

// Term `term` (a run-time value that unrolling makes constant) of c += a*b.
template <int PRECISION, class R, int C_REGS, class A, class B>
__device__ __forceinline__ void mma_term(int term, R (&c)[C_REGS], const A& a, const B& b) {
  if (term == 0) mma_term<PRECISION, 0>(c, a, b);
  else if (term == 1) mma_term<PRECISION, 1>(c, a, b);
  else mma_term<PRECISION, 2>(c, a, b);
}

__device__ __forceinline__ void dmma_m8n8k4(double& c0, double& c1, double a, double b) {
  asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
      : "+d"(c0), "+d"(c1) : "d"(a), "d"(b));
}

template <int PRECISION, int TERM>
__device__ __forceinline__ void mma_term(double (&c)[4], const Operand<double, PRECISION, 4>& a,
                                         const Operand<double, PRECISION, 2>& b) {
#if __CUDA_ARCH__ >= 900
  asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
      : "d"(a.v[0]), "d"(a.v[1]), "d"(a.v[2]), "d"(a.v[3]), "d"(b.v[0]), "d"(b.v[1]));
#else
  // The m16n8k8 fragments are m8n8k4 ones: a.v[0] / a.v[1] rows 0-7 / 8-15 and a.v[2] /
  // a.v[3] the same rows for k 4-7; b.v[0] / b.v[1] k 0-3 / 4-7; c[0..1] / c[2..3] rows
  // 0-7 / 8-15.
  dmma_m8n8k4(c[0], c[1], a.v[0], b.v[0]);
  dmma_m8n8k4(c[2], c[3], a.v[1], b.v[0]);
  dmma_m8n8k4(c[0], c[1], a.v[2], b.v[1]);
  dmma_m8n8k4(c[2], c[3], a.v[3], b.v[1]);
#endif
}

template <int PRECISION, int TERM>
__device__ __forceinline__ void mma_term(float (&c)[4], const Operand<float16, PRECISION, 4>& a,
                                         const Operand<float16, PRECISION, 2>& b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a.v[0]), "r"(a.v[1]), "r"(a.v[2]), "r"(a.v[3]), "r"(b.v[0]), "r"(b.v[1]));
}

template <int PRECISION, int TERM>
__device__ __forceinline__ void mma_term(float (&c)[4], const Operand<bfloat16, PRECISION, 4>& a,
                                         const Operand<bfloat16, PRECISION, 2>& b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a.v[0]), "r"(a.v[1]), "r"(a.v[2]), "r"(a.v[3]), "r"(b.v[0]), "r"(b.v[1]));
}

__device__ __forceinline__ unsigned shared_address(const void* p) {
  unsigned r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}

// Shared-memory operands below are 32-bit shared-window addresses (shared_address): offsets
// from them are 32-bit arithmetic, where generic pointers would cost 64-bit adds.

__device__ __forceinline__ float ld_shared_f32(unsigned at) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(at));
  return v;
}

__device__ __forceinline__ void st_shared_f32(unsigned at, float v) {
  asm volatile("st.shared.f32 [%0], %1;" :: "r"(at), "f"(v) : "memory");
}

// Four 8x8 matrices of 16-bit pairs from shared memory (one 16-byte row address per lane:
// lanes 8q .. 8q+7 give the rows of matrix q); lane l receives row l/4, pair l%4 of each.
// For 32-bit values in K-major rows this is exactly a TF32 A fragment (matrices: rows 0-7 /
// 8-15 x columns 0-3 / 4-7) or two B fragments.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
}

// The same, each 8x8 matrix transposed: lane l receives rows 2*(l%4) and 2*(l%4) + 1 of
// column l/4. For 16-bit values stored with M (or N) contiguous, this gives the fragments
// whose pairs run along K.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
}

// -- asynchronous global -> shared copies (cp.async, sm_80) --------------------------------------
// Copy BYTES (2, 4, 8 or 16) from global `src` to shared `dst`; zero-fill instead when !ok
// (the source is then not read). 16-byte copies bypass L1 (.cg): every tile is read once per
// block. cp.async has no 2-byte form: single float16 values are copied synchronously
// through a register (still ordered before the reads by the chunk's barrier).
template <int BYTES>
__device__ __forceinline__ void cp_async(unsigned dst, const void* src, bool ok) {
  const int src_bytes = ok ? BYTES : 0;
  if constexpr (BYTES == 2) {
    const unsigned short v = ok ? *static_cast<const unsigned short*>(src) : 0;
    asm volatile("st.shared.u16 [%0], %1;" :: "r"(dst), "h"(v) : "memory");
  } else if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;"
                 :: "r"(dst), "l"(src), "n"(BYTES), "r"(src_bytes) : "memory");
  }
}

// -- bulk copies on the Tensor Memory Accelerator, completing on an mbarrier (sm_90) --------------
// (A stage's barrier, ks_mbarrier.cuh, counts one arrival: the thread that issues the stage's
// copies, with the bytes they will bring.)
// BYTES (a multiple of 16) from global `src` to shared `dst` (both 16-byte aligned), counted
// on barrier `bar`.
__device__ __forceinline__ void cp_async_bulk(unsigned dst, const void* src, unsigned bytes,
                                              unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// Orders this thread's earlier shared-memory accesses (the generic proxy's) before later bulk
// copies into the same bytes (the async proxy's): executed by the accessing threads, then a
// block barrier, then the copy.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(PENDING) : "memory");
}

}  // namespace ks
