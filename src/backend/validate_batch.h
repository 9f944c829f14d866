#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace rs {

// Checks a step before any KV is written, so a bad step never leaves a half-written cache behind:
// positions, block tables and block copies within the pool, token ids within the vocabulary.
// `max_positions` is the longest sequence the backend can address (0: only the block table limits).
// Throws rs::Error prefixed with `who` and the sequence id.
void validate_batch(const Batch& batch, const KvConfig& kv, int vocab_size, int64_t max_positions,
                    const char* who);

}  // namespace rs
