// Asynchronous global -> shared copies (cp.async, sm_80 and later), for kernels that stage
// tiles in shared memory while they work on others.
//
// NVRTC-compilable: no host headers.
#pragma once

namespace ks {

// The shared-state-space address of a pointer into shared memory (what cp.async takes).
__device__ __forceinline__ unsigned shared_address(const void* p) {
  unsigned r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}

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

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(PENDING) : "memory");
}

}  // namespace ks
