// Thread-block clusters (Hopper, sm_90): a cluster's blocks run together on neighbouring SMs
// and can read and write each other's shared memory (distributed shared memory).
//
// A shared-memory address of this block (32 bits, the shared window) is mapped to the same
// place in block `rank` of the cluster by mapa; st.shared::cluster and ld.shared::cluster then
// reach it over the SM-to-SM network. A block must not touch a partner's memory before the
// partner runs (a cluster barrier at the start), nor leave while a partner may still touch
// its memory (a cluster barrier after the last such access, or an mbarrier the partner
// waits on for the bytes written to it).
//
// NVRTC-compilable: no host headers.
#pragma once

#include "ks_mbarrier.cuh"
#include "ks_scalar.cuh"

namespace ks {

// This block's rank in its cluster, the cluster's index in the grid and the clusters of the
// grid (1-D clusters along x).
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_index() {
  unsigned r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_count() {
  unsigned r;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
}

// Every thread of every block of the cluster arrives, then waits for all: what a block wrote
// to any block's shared memory before is visible after (release / acquire at cluster scope).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The same barrier without memory ordering, for a cluster's start: every block runs (its
// shared memory exists) after it, and none has touched another's memory before it. The
// release of cluster_sync waits for the thread's memory operations in flight to complete
// (MEMBAR.ALL.GPU in SASS), which costs time at the start of a block for nothing.
__device__ __forceinline__ void cluster_sync_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\t"
               "barrier.cluster.wait.aligned;" ::: "memory");
}

// The shared-window address of a pointer into this block's shared memory.
__device__ __forceinline__ unsigned shared_window(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// The address in block `rank`'s shared memory that corresponds to `at` in this block's (a
// function of its arguments alone, so not volatile: the compiler may reuse or hoist it).
// Offsets carry over: map_to_rank(at + k, rank) = map_to_rank(at, rank) + k within the window.
__device__ __forceinline__ unsigned map_to_rank(unsigned at, unsigned rank) {
  unsigned r;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(at), "r"(rank));
  return r;
}

// A value of V (2, 4, 8 or 16 bytes, aligned to its size) stored to a cluster-mapped
// shared address, as one access.
template <class V>
__device__ __forceinline__ void st_cluster(unsigned at, const V& v) {
  using W = typename Bits<(int)sizeof(V)>::type;
  const W w = *reinterpret_cast<const W*>(&v);
  if constexpr (sizeof(V) == 16) {
    asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "r"(at), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w) : "memory");
  } else if constexpr (sizeof(V) == 8) {
    asm volatile("st.shared::cluster.v2.u32 [%0], {%1, %2};"
                 :: "r"(at), "r"(w.x), "r"(w.y) : "memory");
  } else if constexpr (sizeof(V) == 4) {
    asm volatile("st.shared::cluster.u32 [%0], %1;" :: "r"(at), "r"(w) : "memory");
  } else {
    static_assert(sizeof(V) == 2, "2, 4, 8 or 16 bytes");
    asm volatile("st.shared::cluster.u16 [%0], %1;" :: "r"(at), "h"(w) : "memory");
  }
}

// A value of V (2, 4, 8 or 16 bytes, aligned to its size) loaded from a cluster-mapped
// shared address, as one access.
template <class V>
__device__ __forceinline__ V ld_cluster(unsigned at) {
  using W = typename Bits<(int)sizeof(V)>::type;
  W w;
  if constexpr (sizeof(V) == 16) {
    asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w) : "r"(at) : "memory");
  } else if constexpr (sizeof(V) == 8) {
    asm volatile("ld.shared::cluster.v2.u32 {%0, %1}, [%2];"
                 : "=r"(w.x), "=r"(w.y) : "r"(at) : "memory");
  } else if constexpr (sizeof(V) == 4) {
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(w) : "r"(at) : "memory");
  } else {
    static_assert(sizeof(V) == 2, "2, 4, 8 or 16 bytes");
    asm volatile("ld.shared::cluster.u16 %0, [%1];" : "=h"(w) : "r"(at) : "memory");
  }
  return *reinterpret_cast<const V*>(&w);
}

// A value of V (4, 8 or 16 bytes, aligned to its size) written to a cluster-mapped shared
// address `at`, its bytes counted on the mbarrier at cluster-mapped `bar` (in the same
// block): no barrier of the writer's orders it, the reader's wait on `bar` does.
template <class V>
__device__ __forceinline__ void st_async(unsigned at, const V& v, unsigned bar) {
  using W = typename Bits<(int)sizeof(V)>::type;
  const W w = *reinterpret_cast<const W*>(&v);
  if constexpr (sizeof(V) == 16) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], "
                 "{%1, %2, %3, %4}, [%5];"
                 :: "r"(at), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w), "r"(bar) : "memory");
  } else if constexpr (sizeof(V) == 8) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], "
                 "{%1, %2}, [%3];" :: "r"(at), "r"(w.x), "r"(w.y), "r"(bar) : "memory");
  } else {
    static_assert(sizeof(V) == 4, "4, 8 or 16 bytes");
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                 :: "r"(at), "r"(w), "r"(bar) : "memory");
  }
}

}  // namespace ks
