#pragma once
// Guided decoding tests: the masker's allowed-token bitmask for a state must equal feeding every
// token's bytes to a copy of the state (special and empty tokens never allowed).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/json_grammar.h"
#include "tokenizer/tokenizer.h"

namespace rs::testing {

// Returns the mask, for further checks by the caller.
inline std::vector<uint32_t> check_mask_is_brute_force(const JsonMasker& masker, const Tokenizer& tok,
                                                       const JsonState& st, const std::string& label) {
  std::vector<uint32_t> mask;
  const int n = masker.allowed(st, mask);
  CHECK(n > 0);
  int count = 0, wrong = 0;
  for (int32_t id = 0; id < tok.vocab_size() && wrong < 5; ++id) {  // a few failures are enough to see
    JsonState s2 = st;
    const std::string b = tok.token_bytes(id);
    const bool want = !tok.is_special(id) && !b.empty() && s2.feed(b);
    const bool got = (mask[size_t(id) / 32] >> (id % 32) & 1u) != 0;
    CHECK_MESSAGE(got == want, label << " token " << id << " '" << b << "'");
    wrong += got != want;
    count += want;
  }
  CHECK(count == n);
  return mask;
}

}  // namespace rs::testing
