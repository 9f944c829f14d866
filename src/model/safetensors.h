#pragma once
// safetensors files: memory-mapped read with a fully validated header, and a small writer (for
// --logits-out and for tests that build checkpoints). Format: u64 little-endian header length,
// JSON header {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}}, bytes.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/dtype.h"

namespace rs {

struct SafetensorsEntry {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // inside the mapping
  size_t nbytes = 0;
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the header: JSON, known dtypes, offsets inside the file,
  // sizes equal to shape x dtype. Throws rs::Error("<path>: tensor '<name>': <problem>").
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
};

struct SafetensorsOut {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
// Writes the tensors in the order given. Throws rs::Error if the file cannot be written.
void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors);
// Convenience: one fp32 tensor from floats.
SafetensorsOut safetensors_f32(const std::string& name, std::vector<int64_t> shape,
                               const float* data);

}  // namespace rs
