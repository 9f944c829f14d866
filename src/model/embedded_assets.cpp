#include "model/embedded_assets.h"

extern "C" {
extern const char rs_tokenizer_json_begin[], rs_tokenizer_json_end[];
extern const char rs_tokenizer_config_json_begin[], rs_tokenizer_config_json_end[];
}

namespace rs {
std::string_view embedded_tokenizer_json() {
  return {rs_tokenizer_json_begin, size_t(rs_tokenizer_json_end - rs_tokenizer_json_begin)};
}
std::string_view embedded_tokenizer_config_json() {
  return {rs_tokenizer_config_json_begin,
          size_t(rs_tokenizer_config_json_end - rs_tokenizer_config_json_begin)};
}
}  // namespace rs
