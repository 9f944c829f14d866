#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace rs {

// Element types a checkpoint may hold. FP8 is e4m3fn, as in the DeepSeek-V3 release.
enum class DType : uint8_t { BF16, F16, F32, F8_E4M3, I32, I64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);         // safetensors spelling: "BF16", "F8_E4M3", ...
bool dtype_from_name(const std::string& s, DType* out);

}  // namespace rs
