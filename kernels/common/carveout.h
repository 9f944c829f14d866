#pragma once
// Preferred L1 / shared-memory split (cudaFuncAttributePreferredSharedMemoryCarveout, percent of
// the unified cache given to shared memory) per kernel family. Consecutive kernels that want
// different splits make an SM drain and reconfigure between them, and under PDL that decides how
// early the next kernel's blocks can sit beside the previous kernel's, so the split is part of
// the step's schedule, not of one kernel.
//
// Defaults, measured on an H200 (docs/perf/cuda.md, fifth session, V2-Lite): the fused router
// (batches up to 16) asks for the most L1 (0%): batch 1 bf16 2.44 -> 2.26-2.30 ms a step, batch 4
// 5.34 -> 5.20, batch 16 10.2 -> 9.5; FP8 unchanged (2.11-2.13 ms). The split attention's one-wave
// variant (8 warps, batches 1-2) does too: with the router's, batch 1 2.22-2.24 ms. The same for
// every attention kernel made batch 64 slower (13.3 -> 15.7 ms: the two-blocks-an-SM variant
// needs its shared memory) and batch 8 by 2%, so the others keep the driver's choice. The most L1
// for the experts was much slower (2.63 ms), as was one split for every kernel (fourth session).
//
// RS_CARVEOUT="family=percent,..." overrides for A/B runs from one binary ("family=driver": the
// driver's choice). Families: attention1 (the one-wave split attention), attention (absorb, W_UV,
// the many-block split attention), router (the 64-block fused router), router_cluster (the
// 8-block cluster router; the driver's choice by default), experts (the register expert kernels
// and the streamed gate_up / one-launch FFN), gemv. Re-swept on the H200 2026-12-01 (V2-Lite b1,
// twenty-first session): router_cluster=100 and gemv=100 level, attention=100 with attention1=100
// +2%, every family at 100 +2%: the defaults stay.
// Host side; set once per (host thread, device, kernel).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace rs::kern {

// The percent for `family` under an RS_CARVEOUT-style spec ("family=percent|driver,..."): the
// spec's entry, else the measured default; -1 for the driver's choice. Malformed entries are
// ignored (the default holds).
inline int carveout_from(const std::string& spec, const char* family) {
  const std::string key = std::string(family) + "=";
  for (size_t b = 0; b < spec.size();) {
    const size_t e = std::min(spec.find(',', b), spec.size());
    const std::string tok = spec.substr(b, e - b);
    if (tok.compare(0, key.size(), key) == 0) {
      const std::string val = tok.substr(key.size());
      if (val == "driver") return -1;
      char* end = nullptr;
      const long pct = std::strtol(val.c_str(), &end, 10);
      if (!val.empty() && *end == '\0' && pct >= 0 && pct <= 100) return static_cast<int>(pct);
    }
    b = e + 1;
  }
  if (std::strcmp(family, "router") == 0 || std::strcmp(family, "attention1") == 0) return 0;
  return -1;
}

// The percent for `family` in this process (RS_CARVEOUT, read once).
inline int carveout_for(const char* family) {
  static const std::string spec = [] {
    const char* v = std::getenv("RS_CARVEOUT");
    return std::string(v ? v : "");
  }();
  return carveout_from(spec, family);
}

// Called before each launch: after the first call for a (kernel, device) it is one lookup.
inline void apply_carveout(const void* kernel, const char* family) {
  struct Entry {
    const void* kernel;
    int device;
  };
  thread_local std::vector<Entry> done;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  for (const Entry& e : done)
    if (e.kernel == kernel && e.device == dev) return;
  done.push_back({kernel, dev});
  const int pct = carveout_for(family);
  if (pct >= 0 && cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, pct) != cudaSuccess)
    cudaGetLastError();
}

template <class... Args>
void apply_carveout(void (*kernel)(Args...), const char* family) {
  apply_carveout(reinterpret_cast<const void*>(kernel), family);
}

}  // namespace rs::kern
