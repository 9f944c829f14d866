#pragma once
// Files compiled into the binary (CMakeLists.txt, .incbin): the DeepSeek-V3 tokenizer that the
// embedded default model speaks, so `rackserve serve` works with no model directory.
#include <string_view>

namespace rs {
std::string_view embedded_tokenizer_json();
std::string_view embedded_tokenizer_config_json();
}  // namespace rs
