// Scalar types for the KS kernels: float, double and a minimal complex type.
//
// NVRTC-compilable: no host headers. The complex type has the memory layout of NumPy's
// complex64 / complex128 (real part first) and the alignment of float2 / double2.
#pragma once

namespace ks {

template <class R>
struct __align__(2 * sizeof(R)) cplx {
  R re, im;
};

__device__ __forceinline__ float zero(float) { return 0.0f; }
__device__ __forceinline__ double zero(double) { return 0.0; }
template <class R>
__device__ __forceinline__ cplx<R> zero(cplx<R>) { return {R(0), R(0)}; }

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

// A scalar as real parts: the real type, how many parts (1 or 2), each part, and back.
template <class T> struct parts_of { using real = T; static constexpr int PARTS = 1; };
template <class R> struct parts_of<cplx<R>> { using real = R; static constexpr int PARTS = 2; };

__device__ __forceinline__ float real_part(float x) { return x; }
__device__ __forceinline__ double real_part(double x) { return x; }
template <class R> __device__ __forceinline__ R real_part(cplx<R> x) { return x.re; }
__device__ __forceinline__ float imag_part(float) { return 0.0f; }
__device__ __forceinline__ double imag_part(double) { return 0.0; }
template <class R> __device__ __forceinline__ R imag_part(cplx<R> x) { return x.im; }

template <class T> __device__ __forceinline__ T from_parts(typename parts_of<T>::real re,
                                                            typename parts_of<T>::real) { return re; }
template <> __device__ __forceinline__ cplx<float> from_parts<cplx<float>>(float re, float im) { return {re, im}; }
template <> __device__ __forceinline__ cplx<double> from_parts<cplx<double>>(double re, double im) { return {re, im}; }

}  // namespace ks
