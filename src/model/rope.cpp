#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace rs {

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

RopeTable make_rope_table(const ModelSpec& spec) {
  RopeTable t;
  t.interleave = spec.rope_interleave;
  const int dim = spec.qk_rope_head_dim;
  const int half = dim / 2;
  const double base = spec.rope_theta;
  t.inv_freq.resize(half);
  // fp32 as HF computes them (base ** (arange(0, dim, 2).float() / dim)).
  std::vector<float> pos_freqs(half);
  for (int i = 0; i < half; ++i)
    pos_freqs[i] = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / dim);
  if (!spec.yarn.enabled) {
    for (int i = 0; i < half; ++i) t.inv_freq[i] = 1.0f / pos_freqs[i];
    return t;
  }
  const YarnSpec& y = spec.yarn;
  // The dimension whose wavelength fits `rotations` times into the original context.
  auto correction_dim = [&](double rotations) {
    return dim * std::log(y.original_max_position_embeddings / (rotations * 2 * M_PI)) /
           (2 * std::log(base));
  };
  double low = correction_dim(y.beta_fast), high = correction_dim(y.beta_slow);
  if (y.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // HF: prevents a zero-width ramp
  for (int i = 0; i < half; ++i) {
    float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
    float extrapolation = 1.0f - ramp;  // share of the unscaled frequency
    float f_extra = 1.0f / pos_freqs[i];
    float f_inter = 1.0f / (static_cast<float>(y.factor) * pos_freqs[i]);
    t.inv_freq[i] = f_inter * (1.0f - extrapolation) + f_extra * extrapolation;
  }
  // HF: mscale/mscale_all_dim ratio when both are given, else the paper's default.
  double af = (y.mscale != 0.0 && y.mscale_all_dim != 0.0)
                  ? yarn_get_mscale(y.factor, y.mscale) / yarn_get_mscale(y.factor, y.mscale_all_dim)
                  : yarn_get_mscale(y.factor, 1.0);
  t.attention_factor = static_cast<float>(af);
  return t;
}

void RopeTable::apply(float* x, int pos) const {
  const int half = static_cast<int>(inv_freq.size());
  for (int i = 0; i < half; ++i) {
    float angle = static_cast<float>(pos) * inv_freq[i];  // fp32 like HF's inv_freq @ position
    float c = std::cos(angle) * attention_factor, s = std::sin(angle) * attention_factor;
    float* a = interleave ? &x[2 * i] : &x[i];
    float* b = interleave ? &x[2 * i + 1] : &x[i + half];
    float xa = *a, xb = *b;
    *a = xa * c - xb * s;
    *b = xb * c + xa * s;
  }
}

}  // namespace rs
