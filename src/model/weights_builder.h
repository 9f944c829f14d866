#pragma once
// Private to src/model: fills a Weights (the loader and the dummy generator share it).
#include <memory>
#include <string>

#include "model/weights.h"

namespace rs {

struct WeightsBuilder {
  std::unique_ptr<Weights> w{new Weights()};

  Tensor& add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data,
              size_t nbytes) {
    Tensor& t = w->tensors_[name];
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.data = data;
    t.nbytes = nbytes;
    return t;
  }
  void keep(std::shared_ptr<void> storage) { w->storage_.push_back(std::move(storage)); }
  // Points every FP8 weight at its "<name>_scale_inv" companion (std::map nodes are stable).
  void link_scales(int block_rows, int block_cols) {
    for (auto& [name, t] : w->tensors_) {
      if (t.dtype != DType::F8_E4M3) continue;
      auto it = w->tensors_.find(name + "_scale_inv");
      if (it == w->tensors_.end()) continue;
      t.scale_inv = &it->second;
      t.block_rows = block_rows;
      t.block_cols = block_cols;
    }
  }
  void set_mtp(bool v) { w->has_mtp_ = v; }
  void set_dummy(uint64_t seed) { w->dummy_ = true; w->dummy_seed_ = seed; }
};

// Layer-level naming shared by expected_tensors and the CPU backend.
inline std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

}  // namespace rs
