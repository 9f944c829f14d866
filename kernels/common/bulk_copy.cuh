#pragma once
// 1-D bulk asynchronous copies (the TMA engine without a tensor map) from global into shared
// memory, completed on mbarriers, and a ring of stages built from them.
//
// Why: a weight-streaming GEMV at one or two tokens is latency-bound when it loads into
// registers. A register load holds its bytes in the warp's registers until they are used, so the
// bytes an SM keeps in flight are bounded by its register file (about 64-96 KB at the occupancy
// our GEMVs reach), while covering HBM's loaded latency at 4.3 TB/s over 132 SMs needs more. A
// bulk copy costs one thread one instruction and lands in shared memory, so one SM can keep a
// whole ring (100-200 KB) in flight; and since the copy engine, not the warp, waits for it, copies
// of constant data (weights) can be issued before griddepcontrol.wait without holding anything.
//
// Rules the PTX imposes: source, destination and size are multiples of 16 bytes; the mbarrier
// lives in shared memory and is initialised (then fenced for the async proxy) before any copy
// names it. A stage is "full" when its barrier's phase completes: one producer arrival that
// declares the stage's byte count (arrive.expect_tx) plus the copies' complete_tx of that many
// bytes, in either order.
#include <cstdint>
#include <cstdio>

#include "kernels/common/global_timer.cuh"

namespace rs::kern {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(arrivals) : "memory");
}

// Barrier initialisation must be visible to the async proxy before a bulk copy completes on it.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0u;
}

// Wait until the barrier's phase of this parity has completed. Bounded like every spin-wait of
// the project: a copy that never lands (a bad address traps first; a byte count that does not
// match the copies does not) would otherwise hang the step silently.
constexpr uint64_t kMbarTimeoutNs = 2000000000ull;  // 2 s: no stage takes more than microseconds

// static: internal linkage, so that every translation unit including this header may keep its copy
// (a non-inline __device__ function also gets a host stub, which would be defined twice).
static __device__ __noinline__ void mbar_wait_slow(uint64_t* bar, uint32_t parity, const char* site) {
  const uint64_t start = global_time_ns();
  for (uint32_t spin = 1;; ++spin) {
    if (mbar_try_wait(bar, parity)) return;
    if ((spin & 1023u) == 0u && global_time_ns() - start > kMbarTimeoutNs) {
      printf("rackserve: mbarrier wait timed out (%s): block %d thread %d, parity %u, after %llu ms; trapping\n",
             site, blockIdx.x, threadIdx.x, parity, static_cast<unsigned long long>(kMbarTimeoutNs / 1000000));
      __trap();
    }
  }
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity, const char* site) {
  if (!mbar_try_wait(bar, parity)) mbar_wait_slow(bar, parity, site);
}

// L2 policy for data read once per step (weights): evict first, so the step's activations,
// KV cache and routing stay resident.
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// dst (shared) <- src (global), `bytes` bytes, completing on `bar`. All three multiples of 16.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                              uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}

// The same without an L2 hint (evict_normal): data other blocks read too, such as the latent cache
// rows every head's cluster copies.
__device__ __forceinline__ void bulk_copy_g2s_plain(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// A ring of S stages: full[s] completes when stage s's bytes have landed, empty[s] when its
// consumers are done with it. Use number i (0, 1, 2, ...) of the ring is stage i % S in phase
// i / S; the parity a waiter names is that phase's low bit.
//   producer, use i: ring_acquire(i) (waits for use i - S to be released; with in_flight = K > 0
//                    also for use i - K to have landed, so at most K uses are issued and not
//                    landed), then mbar_arrive_expect_tx(&full[stage], bytes) and the copies on
//                    &full[stage];
//   consumer, use i: ring_wait_full(i), read the stage, ring_release(i) (every one of the
//                    `consumers` arrivals given at init).
// A parity wait cannot tell phase k from phase k + 2: a consumer may wait for use i only once the
// full phase of use i - S has completed, or the wait returns at once on the older phase. So every
// consumer must wait its uses of a stage in order and never skip ahead by a whole ring: either
// every consumer waits for every use (the streaming GEMV, gemv_stream.cuh), or uses are dealt
// round-robin over C consumers with C dividing S (each consumer then owns fixed stages). With C
// not dividing S (e.g. 4 consumers over 3 stages) a consumer can wait for use i + S before use i
// has landed, read a stale stage and release it early.
template <int S>
struct BulkRing {
  uint64_t full[S];
  uint64_t empty[S];

  // One thread, before the block's first __syncthreads.
  __device__ void init(uint32_t consumers) {
    for (int s = 0; s < S; ++s) {
      mbar_init(&full[s], 1u);
      mbar_init(&empty[s], consumers);
    }
    mbar_fence_init();
  }
  __device__ static int stage(uint32_t i) { return static_cast<int>(i % S); }
  __device__ static uint32_t parity(uint32_t i) { return (i / S) & 1u; }
  // in_flight (0: the whole ring): the wait on use i - K names the phase the producer itself
  // opened last for that stage (use i - K + S is issued only after this one), so its parity is
  // unambiguous.
  __device__ void acquire(uint32_t i, int in_flight = 0) {
    if (in_flight > 0 && i >= static_cast<uint32_t>(in_flight)) wait_full(i - in_flight);
    if (i >= static_cast<uint32_t>(S)) mbar_wait(&empty[stage(i)], parity(i) ^ 1u, "ring stage free");
  }
  __device__ void wait_full(uint32_t i) { mbar_wait(&full[stage(i)], parity(i), "ring stage full"); }
  __device__ void release(uint32_t i) { mbar_arrive(&empty[stage(i)]); }
};

}  // namespace rs::kern
