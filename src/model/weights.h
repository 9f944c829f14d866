#pragma once
// Weights: every named tensor of a model, memory-mapped from safetensors where the bytes are
// used as stored, or owned (dummy weights). Validated against the tensors ModelSpec implies.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/tensor.h"

namespace rs {

// Tensor names and shapes the model needs (MTP tensors are listed separately: optional).
std::vector<TensorInfo> expected_tensors(const ModelSpec& spec);
std::vector<TensorInfo> expected_mtp_tensors(const ModelSpec& spec);

class Weights {
 public:
  // DIR/model.safetensors or DIR/model.safetensors.index.json + shards. Throws rs::Error with
  // one line naming file, tensor and problem.
  static std::unique_ptr<Weights> load(const std::string& model_dir, const ModelSpec& spec);
  // Deterministic random weights of the right shapes and dtypes (kernels/common/dummy_init.h).
  static std::unique_ptr<Weights> dummy(const ModelSpec& spec, uint64_t seed = 0);

  const Tensor& get(const std::string& name) const;  // throws rs::Error if absent
  const Tensor* find(const std::string& name) const;
  const std::map<std::string, Tensor>& all() const { return tensors_; }
  bool has_mtp() const { return has_mtp_; }
  bool is_dummy() const { return dummy_; }
  uint64_t dummy_seed() const { return dummy_seed_; }

  ~Weights();
  Weights(const Weights&) = delete;
  Weights& operator=(const Weights&) = delete;

 private:
  Weights() = default;
  friend struct WeightsBuilder;
  std::map<std::string, Tensor> tensors_;
  std::vector<std::shared_ptr<void>> storage_;  // mmaps and owned buffers
  bool has_mtp_ = false;
  bool dummy_ = false;
  uint64_t dummy_seed_ = 0;
};

}  // namespace rs
