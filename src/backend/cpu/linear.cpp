#include "backend/cpu/linear.h"

#include <algorithm>
#include <array>
#include <vector>

#include "model/numerics.h"

namespace rs::cpu {

namespace {
// All 256 e4m3 codes decoded once: a table lookup beats ldexp in the per-element loop.
const float* e4m3_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[b] = e4m3_to_f32(static_cast<uint8_t>(b));
    return t;
  }();
  return table.data();
}
}  // namespace

float dot(const float* a, const float* b, int64_t n) {
  // Eight independent partial sums: lets the compiler vectorise without -ffast-math.
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

void dequant_row(const Tensor& w, int64_t r, float* out) {
  const int64_t cols = w.cols();
  switch (w.dtype) {
    case DType::F32: {
      const float* p = static_cast<const float*>(w.data) + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = p[c];
      break;
    }
    case DType::BF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(p[c]);
      break;
    }
    case DType::F16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = f16_to_f32(p[c]);
      break;
    }
    case DType::F8_E4M3: {
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + r * cols;
      const float* scales = static_cast<const float*>(w.scale_inv->data);
      const int64_t scale_cols = w.scale_inv->cols();
      const float* srow = scales + (r / w.block_rows) * scale_cols;
      const float* lut = e4m3_table();
      for (int64_t c0 = 0; c0 < cols; c0 += w.block_cols) {
        const float sc = srow[c0 / w.block_cols];
        const int64_t c1 = std::min<int64_t>(cols, c0 + w.block_cols);
        for (int64_t c = c0; c < c1; ++c) out[c] = lut[p[c]] * sc;
      }
      break;
    }
    default:
      for (int64_t c = 0; c < cols; ++c) out[c] = 0;
  }
}

void linear_rows(const Tensor& w, const float* x, int64_t ldx, int T, float* y, int64_t ldy,
                 int64_t r0, int64_t r1) {
  const int64_t in = w.cols();
  thread_local std::vector<float> row;
  if (static_cast<int64_t>(row.size()) < in) row.resize(in);
  const bool f32 = w.dtype == DType::F32;
  for (int64_t r = r0; r < r1; ++r) {
    const float* wr = f32 ? static_cast<const float*>(w.data) + r * in : row.data();
    if (!f32) dequant_row(w, r, row.data());
    for (int t = 0; t < T; ++t) y[t * ldy + r] = dot(wr, x + t * ldx, in);
  }
}

void linear(ThreadPool& pool, const Tensor& w, const float* x, int64_t ldx, int T, float* y,
            int64_t ldy) {
  const int64_t out = w.rows();
  // Enough rows per chunk that a chunk's work (rows x in x T) outweighs handing it out.
  int64_t work_per_row = w.cols() * (T + 1);
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, work_per_row));
  pool.parallel_for(out, [&](int64_t a, int64_t b) { linear_rows(w, x, ldx, T, y, ldy, a, b); },
                    grain);
}

}  // namespace rs::cpu
