#include "model/dtype.h"

namespace rs {

namespace {
struct Row { DType t; const char* name; size_t size; };
constexpr Row kRows[] = {
    {DType::BF16, "BF16", 2}, {DType::F16, "F16", 2},  {DType::F32, "F32", 4},
    {DType::F8_E4M3, "F8_E4M3", 1}, {DType::I32, "I32", 4}, {DType::I64, "I64", 8},
};
}  // namespace

size_t dtype_size(DType t) {
  for (const Row& r : kRows) if (r.t == t) return r.size;
  return 0;
}
const char* dtype_name(DType t) {
  for (const Row& r : kRows) if (r.t == t) return r.name;
  return "?";
}
bool dtype_from_name(const std::string& s, DType* out) {
  for (const Row& r : kRows) {
    if (s == r.name) { *out = r.t; return true; }
  }
  return false;
}

}  // namespace rs
