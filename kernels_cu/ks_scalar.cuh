// Scalar types for the KS kernels: float, double, a minimal complex type and float16 and
// bfloat16 storage.
//
// NVRTC-compilable: no host headers. The complex type has the memory layout of NumPy's
// complex64 / complex128 (real part first) and the alignment of float2 / double2.
#pragma once

namespace ks {

// IEEE binary16 (NumPy's float16) as storage only: no arithmetic is done in it. Kernels sum
// in float (compute_of) and round to nearest once when they store a result (narrow).
struct __align__(2) float16 {
  unsigned short bits;
};

// The type the kernels compute in for storage type T (float for float16, else T), and the
// conversions: widen on every load from storage, narrow (round to nearest) on a store.
template <class T> struct compute_of { using type = T; };
template <> struct compute_of<float16> { using type = float; };
template <class T> __device__ __forceinline__ T widen(T x) { return x; }
__device__ __forceinline__ float widen(float16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
template <class T> __device__ __forceinline__ T narrow(typename compute_of<T>::type x) { return x; }
template <> __device__ __forceinline__ float16 narrow<float16>(float x) {
  float16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
}

// bfloat16 (PyTorch's and JAX's, NumPy's through ml_dtypes) as storage only, as float16 is:
// the top 16 bits of a float. Widening is exact (the bits moved up); narrowing rounds to
// nearest, ties to even, keeping a NaN a NaN: by cvt.rn.bf16.f32 from sm_80 on (one
// instruction: the integer rounding's registers made ks_mma_group.cu's epilogue spill), in
// integer operations before (the NaN's quiet bit set, so that rounding cannot carry it into
// an infinity).
struct __align__(2) bfloat16 {
  unsigned short bits;
};
template <> struct compute_of<bfloat16> { using type = float; };
__device__ __forceinline__ float widen(bfloat16 x) { return __uint_as_float((unsigned)x.bits << 16); }
template <> __device__ __forceinline__ bfloat16 narrow<bfloat16>(float x) {
#if __CUDA_ARCH__ >= 800
  bfloat16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
#else
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {(unsigned short)((u >> 16) | 0x40u)};
  return {(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
#endif
}

template <class R>
struct __align__(2 * sizeof(R)) cplx {
  R re, im;
};

// V adjacent elements moved as one load or store (V * sizeof(T) a power of two <= 16 bytes).
template <class T, int V>
struct __align__(V * sizeof(T)) vec { T v[V]; };

// Raw bits of BYTES (2, 4, 8 or 16) bytes: one vector load or store through registers.
template <int BYTES> struct Bits;
template <> struct Bits<2> { using type = unsigned short; };
template <> struct Bits<4> { using type = unsigned; };
template <> struct Bits<8> { using type = uint2; };
template <> struct Bits<16> { using type = uint4; };

// *p read through the cache-streaming path (ld.global.cs: evict first), for data read once.
template <class T>
__device__ __forceinline__ T load_streaming(const T* p) {
  using W = typename Bits<(int)sizeof(T)>::type;
  const W w = __ldcs(reinterpret_cast<const W*>(p));
  return *reinterpret_cast<const T*>(&w);
}

__device__ __forceinline__ float16 zero(float16) { return {0}; }
__device__ __forceinline__ bfloat16 zero(bfloat16) { return {0}; }
__device__ __forceinline__ float zero(float) { return 0.0f; }
__device__ __forceinline__ double zero(double) { return 0.0; }
template <class R>
__device__ __forceinline__ cplx<R> zero(cplx<R>) { return {R(0), R(0)}; }

__device__ __forceinline__ float16 conj(float16 x) { return x; }
__device__ __forceinline__ bfloat16 conj(bfloat16 x) { return x; }
__device__ __forceinline__ float conj(float x) { return x; }
__device__ __forceinline__ double conj(double x) { return x; }
template <class R>
__device__ __forceinline__ cplx<R> conj(cplx<R> x) { return {x.re, -x.im}; }

// acc + w * x, fused where the hardware fuses.
__device__ __forceinline__ float fma(float w, float x, float acc) { return fmaf(w, x, acc); }
__device__ __forceinline__ double fma(double w, double x, double acc) { return ::fma(w, x, acc); }
template <class R>
__device__ __forceinline__ cplx<R> fma(cplx<R> w, cplx<R> x, cplx<R> acc) {
  acc.re = ks::fma(w.re, x.re, acc.re);
  acc.re = ks::fma(-w.im, x.im, acc.re);
  acc.im = ks::fma(w.re, x.im, acc.im);
  acc.im = ks::fma(w.im, x.re, acc.im);
  return acc;
}

__device__ __forceinline__ float add(float x, float y) { return x + y; }
__device__ __forceinline__ double add(double x, double y) { return x + y; }
template <class R>
__device__ __forceinline__ cplx<R> add(cplx<R> x, cplx<R> y) { return {x.re + y.re, x.im + y.im}; }

__device__ __forceinline__ float sub(float x, float y) { return x - y; }
__device__ __forceinline__ double sub(double x, double y) { return x - y; }
template <class R>
__device__ __forceinline__ cplx<R> sub(cplx<R> x, cplx<R> y) { return {x.re - y.re, x.im - y.im}; }

// w * x (a complex product: two multiplies and two fused multiply-adds).
__device__ __forceinline__ float mul(float w, float x) { return w * x; }
__device__ __forceinline__ double mul(double w, double x) { return w * x; }
template <class R>
__device__ __forceinline__ cplx<R> mul(cplx<R> w, cplx<R> x) {
  return {ks::fma(w.re, x.re, -w.im * x.im), ks::fma(w.re, x.im, w.im * x.re)};
}

// x times the real part of s (s holds a real scale in the compute type).
__device__ __forceinline__ float scale_by(float x, float s) { return x * s; }
__device__ __forceinline__ double scale_by(double x, double s) { return x * s; }
template <class R>
__device__ __forceinline__ cplx<R> scale_by(cplx<R> x, cplx<R> s) { return {x.re * s.re, x.im * s.re}; }

// The value of lane (lane ^ mask) of the warp; every lane of the warp must call it.
__device__ __forceinline__ float shfl_xor(float x, int mask) { return __shfl_xor_sync(0xffffffffu, x, mask); }
__device__ __forceinline__ double shfl_xor(double x, int mask) { return __shfl_xor_sync(0xffffffffu, x, mask); }
template <class R>
__device__ __forceinline__ cplx<R> shfl_xor(cplx<R> x, int mask) {
  return {shfl_xor(x.re, mask), shfl_xor(x.im, mask)};
}

// A scalar as real parts: the real type, how many parts (1 or 2), each part, and back; `acc`
// is the type a part's sums are accumulated in (compute_of the real type).
template <class T> struct parts_of {
  using real = T;
  using acc = typename compute_of<T>::type;
  static constexpr int PARTS = 1;
};
template <class R> struct parts_of<cplx<R>> { using real = R; using acc = R; static constexpr int PARTS = 2; };

__device__ __forceinline__ float real_part(float x) { return x; }
__device__ __forceinline__ double real_part(double x) { return x; }
template <class R> __device__ __forceinline__ R real_part(cplx<R> x) { return x.re; }
__device__ __forceinline__ float imag_part(float) { return 0.0f; }
__device__ __forceinline__ double imag_part(double) { return 0.0; }
template <class R> __device__ __forceinline__ R imag_part(cplx<R> x) { return x.im; }

template <class T> __device__ __forceinline__ T from_parts(typename parts_of<T>::acc re,
                                                            typename parts_of<T>::acc) { return narrow<T>(re); }
template <> __device__ __forceinline__ cplx<float> from_parts<cplx<float>>(float re, float im) { return {re, im}; }
template <> __device__ __forceinline__ cplx<double> from_parts<cplx<double>>(double re, double im) { return {re, im}; }

}  // namespace ks
