#pragma once
// Everything submit() checks before a request enters the queue. Each failure is an rs::Error
// naming the parameter and the numbers, which the server turns into an HTTP 400.
#include "engine/engine.h"

namespace rs {

struct RequestLimits {
  int vocab_size = 0;
  int max_model_len = 0;
  int max_num_seqs = 0;
  int block_size = 16;
  int num_kv_blocks = 0;
  bool has_tokenizer = false;
  static constexpr int kMaxLogprobs = 20;  // OpenAI's top_logprobs limit
};

void validate_request(const GenerationRequest& req, const RequestLimits& lim);

}  // namespace rs
