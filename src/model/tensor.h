#pragma once
// A named, typed view of weight bytes. The bytes live in an mmap'd checkpoint or in a buffer
// owned by Weights; a Tensor never owns them.
#include <cstdint>
#include <string>
#include <vector>

#include "model/dtype.h"

namespace rs {

struct Tensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
  // FP8 block-scaled weights: fp32 [ceil(rows/block_rows), ceil(cols/block_cols)] multipliers
  // (HF name "<weight>_scale_inv"; despite the name, dequantised = stored * scale_inv).
  const Tensor* scale_inv = nullptr;
  int block_rows = 0, block_cols = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

// What the loader expects of one tensor: derived from ModelSpec, used to validate checkpoints
// and to create dummy weights (on the host or directly on a GPU) without a checkpoint.
struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  bool block_scaled = false;  // FP8 with a <name>_scale_inv companion
  int64_t fan_in = 1;         // for dummy init scaling
  enum class Init : uint8_t { Normal, Ones, Zero, Embedding, RouterGate } init = Init::Normal;
};

}  // namespace rs
