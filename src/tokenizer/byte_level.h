#pragma once
// GPT-2's byte <-> printable character bijection used by ByteLevel pre-tokenizers and decoders:
// printable Latin-1 bytes map to themselves, the other 68 to U+0100.. in byte order.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace rs::byte_level {

// UTF-8 text of the character standing for byte b.
const std::string& char_for_byte(unsigned char b);
// The byte a character stands for, if it is one of the 256.
std::optional<unsigned char> byte_for_char(char32_t c);
// Maps every byte of `bytes` to its character, appending to out.
void encode(std::string_view bytes, std::string& out);
// Maps every character of `token` back to its byte; nullopt when one is not a byte-level character.
std::optional<std::string> decode(std::string_view token);

}  // namespace rs::byte_level
