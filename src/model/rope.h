#pragma once
// Rotary embedding parameters of a DeepSeek model: inverse frequencies (YaRN-corrected) and the
// cos/sin multiplier, computed as HF transformers' _compute_yarn_parameters does (which matches
// DeepSeek's own yarn code for every released config). Host-side; the GPU copies the table.
#include <vector>

#include "model/model_spec.h"

namespace rs {

// YaRN's magnitude correction: 0.1 * mscale * ln(scale) + 1 for scale > 1.
double yarn_get_mscale(double scale, double mscale);

struct RopeTable {
  std::vector<float> inv_freq;    // [qk_rope_head_dim / 2]
  float attention_factor = 1.0f;  // multiplies cos and sin (so q.k gains its square)
  bool interleave = true;         // pairs (2i, 2i+1); else (i, i + d/2)

  // Rotates x[0, 2 * inv_freq.size()) in place for position `pos`.
  void apply(float* x, int pos) const;
};

RopeTable make_rope_table(const ModelSpec& spec);

}  // namespace rs
