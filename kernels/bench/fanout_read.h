#pragma once
// What it costs when many blocks each copy the same bytes into shared memory (`rackserve bench
// fanout`, kernels/bench/fanout_read.cu).
//
// Why: MLA's latent cache rows are shared by every head (MQA). The split decode attention reads
// each row once for all heads; an attention folded into a launch of per-head thread-block clusters
// (the q/kv + absorb launch, or merge + W_UV + o_proj) would have every head's cluster read all of
// them, 16 times the bytes at V2-Lite's 16 heads, mostly from L2. This measures that read alone:
// a region of rows split into `slices` equal parts, each part bulk-copied into shared memory by
// `fanout` blocks (grid = slices x fanout, block b copies part b % slices), from the first block's
// entry to the last block's copy landing (device clock, so no launch overhead is counted).
// Plain C++: src/ includes it.
#include <cstdint>

namespace rs::kern {

struct FanoutTiming {
  double median_us = 0, p90_us = 0;
};
// cold: L2 flushed before each replay (the region comes from HBM, as a layer's cache rows do in a
// decode step); warm: the region was just read. False (nothing measured) when a part does not fit
// one block's shared memory, is not a multiple of 16 bytes, on a copy that landed wrong, or on a
// CUDA error (*error says which).
bool measure_fanout_read(int64_t region_bytes, int slices, int fanout, bool cold, int reps, FanoutTiming* out,
                         const char** error);

}  // namespace rs::kern
