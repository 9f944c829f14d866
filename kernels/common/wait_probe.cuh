#pragma once
// Device side of the wait probe (wait_probe.h): rs::pdl::wait() calls these when the build
// defines RS_WAIT_PROBE. Thread 0 of each block takes a record slot before the wait (an atomic
// whose round trip overlaps the wait) and stores the record after it (a store nothing waits on),
// so the probe adds little to what it measures.
#include <cuda_runtime.h>

#include "kernels/common/global_timer.cuh"
#include "kernels/common/wait_probe.h"

namespace rs::kern::probe {

// Per translation unit (no relocatable device code): wait_probe_arm() sets every unit's copy
// through the setter each unit registers below.
static __device__ WaitProbeRecord* g_records;
static __device__ uint32_t g_capacity;

struct Slot {
  WaitProbeRecord* rec = nullptr;
  uint64_t entry_ns = 0;
};

__device__ __forceinline__ bool probe_thread() { return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0; }

// This block's records (thread 0's; null when unarmed), for the marks after the wait.
__device__ __forceinline__ WaitProbeRecord*& block_records() {
  __shared__ WaitProbeRecord* records;
  return records;
}

__device__ __forceinline__ WaitProbeRecord record_now(uint32_t tag) {
  WaitProbeRecord r;
  r.exit_ns = global_time_ns();
  unsigned long long grid;
  unsigned smid;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  r.grid = grid;
  r.smid = smid;
  r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  r.blocks = gridDim.x * gridDim.y * gridDim.z;
  r.threads = blockDim.x * blockDim.y * blockDim.z;
  r.tag = tag;
  return r;
}

__device__ __forceinline__ Slot before_wait() {
  Slot s;
  if (!probe_thread()) return s;
  WaitProbeRecord* buf = g_records;
  if (buf) {
    s.entry_ns = global_time_ns();
    const unsigned i = atomicAdd(reinterpret_cast<unsigned*>(&buf[0].grid), unsigned(kWaitProbeSlots)) + 1u;
    if (i + kWaitProbeSlots <= g_capacity) s.rec = buf + i;
  }
  block_records() = s.rec;
  return s;
}

__device__ __forceinline__ void after_wait(const Slot& s) {
  if (!s.rec) return;
  WaitProbeRecord r = record_now(0);
  r.entry_ns = s.entry_ns;
  *s.rec = r;
}

// Thread 0, after the kernel's wait. Not free: the bounds check below loads g_records and
// g_capacity from global memory, so every mark holds thread 0 (and the barrier its warp meets next)
// for a trip to L2 (not measured alone); the interval between two marks of one block includes the
// second one's trip.
__device__ __forceinline__ void mark(uint32_t tag) {
  if (!probe_thread() || tag == 0 || tag >= unsigned(kWaitProbeSlots)) return;
  // A kernel without a wait never set its block's pointer: only a pointer into the armed buffer
  // is used.
  WaitProbeRecord* rec = block_records();
  WaitProbeRecord* buf = g_records;
  if (buf && rec > buf && rec + kWaitProbeSlots <= buf + g_capacity) rec[tag] = record_now(tag);
}

// Host: this unit's setter, registered at static initialisation.
using Setter = void (*)(WaitProbeRecord*, uint32_t);
int register_setter(Setter s);  // wait_probe.cu
namespace {
void set_this_unit(WaitProbeRecord* records, uint32_t capacity) {
  cudaMemcpyToSymbol(g_records, &records, sizeof records);
  cudaMemcpyToSymbol(g_capacity, &capacity, sizeof capacity);
}
[[maybe_unused]] const int g_registered = register_setter(&set_this_unit);
}  // namespace

}  // namespace rs::kern::probe
