// The default two-phase stepping of Backend (backend.h): the whole step runs inside launch(),
// chained tokens read from the previous launch's results on the host. A backend whose launch()
// returns before its step has run (CUDA) overrides all three.
#include <string>

#include "backend/backend.h"
#include "common/error.h"

namespace rs {

void Backend::launch(const Batch& batch) {
  if (uncollected_.size() >= 2) throw Error(name() + " backend: two launched steps are not collected yet");
  Batch resolved = batch;
  std::vector<int32_t> tokens(batch.seqs.size());
  std::vector<std::vector<int32_t>> outputs(batch.seqs.size());  // a chained step's, its token appended
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    SeqStep& s = resolved.seqs[i];
    if (!s.token_from_previous) continue;
    if (s.tokens.size() != 1) throw Error(name() + " backend: a chained step's sequence must decode one token");
    bool found = false;
    for (auto [id, tok] : last_sampled_)
      if (id == s.seq_id) {
        tokens[i] = tok;
        found = true;
      }
    if (!found)
      throw Error(name() + " backend: seq " + std::to_string(s.seq_id) +
                  " takes its token from the previous step, which sampled none for it");
    s.tokens = std::span<const int32_t>(&tokens[i], 1);
    s.token_from_previous = false;
    outputs[i].assign(s.sampling.output_tokens.begin(), s.sampling.output_tokens.end());
    outputs[i].push_back(tokens[i]);
    s.sampling.output_tokens = outputs[i];
  }
  std::vector<SeqResult> r = execute(resolved);
  last_sampled_.clear();
  for (size_t i = 0; i < r.size() && i < batch.seqs.size(); ++i)
    if (r[i].token) last_sampled_.emplace_back(batch.seqs[i].seq_id, r[i].token->id);
  uncollected_.push_back(std::move(r));
}

std::vector<SeqResult> Backend::collect() {
  if (uncollected_.empty()) throw Error(name() + " backend: collect() with no launched step");
  std::vector<SeqResult> r = std::move(uncollected_.front());
  uncollected_.erase(uncollected_.begin());
  return r;
}

}  // namespace rs
