// What every kscupy kernel checks about its own launch.
//
// NVRTC-compilable: no host headers.
#pragma once

namespace ks {

// Dynamic shared memory the launch provided (PTX special register %dynamic_smem_size).
__device__ __forceinline__ unsigned dynamic_smem_bytes() {
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
}

// The host computes a launch's dynamic shared memory from a Python mirror of the kernel's
// layout. A launch with less than the layout needs is a host-side bug: stop loudly instead
// of writing past the allocation.
template <int BYTES>
__device__ __forceinline__ void require_dynamic_smem() {
  if (dynamic_smem_bytes() < (unsigned)BYTES) __trap();
}

}  // namespace ks
