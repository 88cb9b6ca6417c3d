// mbarriers (sm_90): a phase counts arrivals and bytes. A barrier initialised for `count`
// arrivals completes a phase when all have arrived and every byte the arrivals announced
// (arrive_expect_tx) has landed, written by a bulk copy (cp.async.bulk) or by another block
// of the cluster (st.async). Arrivals and bytes may come in any order: the byte count may go
// below zero meanwhile, the pending arrivals keep the phase open. Waiters name the parity
// (0, 1, 0, ...) of the phase they wait for.
//
// NVRTC-compilable: no host headers.
#pragma once

namespace ks {

// The barrier at shared-window address `bar`, expecting `count` arrivals a phase.
__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned count = 1) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
// Makes initialised barriers visible to the copy engine and the cluster's other blocks
// (before the barrier that lets them use them).
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival that also announces `bytes` more for the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(bar), "r"(bytes) : "memory");
}
// One arrival on the barrier at cluster-mapped address `bar` (map_to_rank: another block's),
// releasing this thread's earlier accesses at cluster scope.
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];"
               :: "r"(bar) : "memory");
}
// Waits for the phase of `parity` to complete (acquire at the block's scope: this block's
// arrivals and bulk copies).
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  asm volatile("{\n\t.reg .pred ready;\n"
               "WAIT:\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 ready, [%0], %1;\n\t"
               "@!ready bra WAIT;\n}" :: "r"(bar), "r"(parity) : "memory");
}
// The same, acquiring at cluster scope: what other blocks wrote (st.async) or did before they
// arrived (mbarrier_arrive_cluster) is visible after it.
__device__ __forceinline__ void mbarrier_wait_cluster(unsigned bar, unsigned parity) {
  asm volatile("{\n\t.reg .pred ready;\n"
               "WAIT:\n\t"
               "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 ready, [%0], %1;\n\t"
               "@!ready bra WAIT;\n}" :: "r"(bar), "r"(parity) : "memory");
}

}  // namespace ks
