#pragma once
// UTF-8 primitives shared by the tokenizer pipeline: validation, code point walking and the
// lossy conversion HF's decoders apply (Rust's String::from_utf8_lossy).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rs::utf8 {

// Length of the well-formed sequence starting at s[i], or 0 when the bytes there are not one
// (overlong, surrogate, past U+10FFFF, truncated, stray continuation byte).
size_t valid_sequence_length(std::string_view s, size_t i);

// Decodes the code point at s[i] (caller guarantees well-formed input) and advances i.
char32_t next(std::string_view s, size_t& i);

void append(std::string& out, char32_t cp);

// Every maximal invalid subpart replaced by U+FFFD, exactly as Rust's from_utf8_lossy does.
std::string to_valid_lossy(std::string_view bytes);

// Bytes at the end of `s` that form an incomplete but still possibly valid sequence (0..3).
size_t incomplete_tail_length(std::string_view s);

// Byte offset of the first malformed sequence, or npos.
size_t first_invalid_offset(std::string_view s);

// Unicode White_Space (Rust's char::is_whitespace).
inline bool is_white_space(char32_t c) {
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Start of the character that ends just before byte offset `end` (end > 0).
inline size_t prev_char_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace rs::utf8
