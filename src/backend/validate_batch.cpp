#include "backend/validate_batch.h"

#include <string>

#include "common/error.h"

namespace rs {

void validate_batch(const Batch& batch, const KvConfig& kv, int vocab_size, int64_t max_positions,
                    const char* who) {
  for (const SeqStep& s : batch.seqs) {
    const std::string at = std::string(who) + ": seq " + std::to_string(s.seq_id) + ": ";
    if (s.start_pos < 0) throw Error(at + "negative start_pos");
    const int64_t end = int64_t(s.start_pos) + int64_t(s.tokens.size());
    if (end > 0 && kv.block_size <= 0) throw Error(at + "init_kv was not called");
    if (max_positions > 0 && end > max_positions)
      throw Error(at + "length " + std::to_string(end) + " exceeds the " +
                  std::to_string(max_positions) + " positions this backend addresses");
    if (int64_t(s.block_table.size()) * kv.block_size < end)
      throw Error(at + "block table covers " + std::to_string(s.block_table.size() * kv.block_size) +
                  " positions, step needs " + std::to_string(end));
    for (int64_t b = 0; b < (end + kv.block_size - 1) / kv.block_size; ++b)
      if (s.block_table[b] < 0 || s.block_table[b] >= kv.num_blocks)
        throw Error(at + "block id " + std::to_string(s.block_table[b]) + " out of range");
    if (s.token_from_previous && s.tokens.size() != 1)
      throw Error(at + "a chained step (token from the previous step) decodes exactly one token");
    if (!s.token_from_previous)  // a chained step's one token is a placeholder
      for (int32_t tok : s.tokens)
        if (tok < 0 || tok >= vocab_size) throw Error(at + "token id " + std::to_string(tok) + " out of range");
    if (s.sample && s.tokens.empty()) throw Error(at + "sample requested with no tokens");
  }
  for (auto [src, dst] : batch.block_copies)
    if (src < 0 || dst < 0 || src >= kv.num_blocks || dst >= kv.num_blocks)
      throw Error(std::string(who) + ": block copy " + std::to_string(src) + " -> " + std::to_string(dst) +
                  " out of range");
}

}  // namespace rs
