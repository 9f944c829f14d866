#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace rs::byte_level {
namespace {
struct Tables {
  std::array<std::string, 256> to_char;
  std::array<int, 512> to_byte;  // indexed by code point (all are < U+0200)
  Tables() {
    to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? b : 256 + next++;
      utf8::append(to_char[b], cp);
      to_byte[cp] = b;
    }
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}
}  // namespace

const std::string& char_for_byte(unsigned char b) { return tables().to_char[b]; }

std::optional<unsigned char> byte_for_char(char32_t c) {
  if (c >= 512 || tables().to_byte[c] < 0) return std::nullopt;
  return static_cast<unsigned char>(tables().to_byte[c]);
}

void encode(std::string_view bytes, std::string& out) {
  const auto& t = tables();
  for (char c : bytes) out += t.to_char[static_cast<unsigned char>(c)];
}

std::optional<std::string> decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    if (utf8::valid_sequence_length(token, i) == 0) return std::nullopt;
    const auto b = byte_for_char(utf8::next(token, i));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace rs::byte_level
