#include "tokenizer/utf8.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace rs::utf8 {
namespace {
// Bounds of the second byte per lead byte (Unicode Table 3-7): they exclude overlongs (E0, F0),
// surrogates (ED) and code points past U+10FFFF (F4).
struct LeadInfo {
  int length;
  unsigned char lo, hi;
};
LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes from s[i] belong to a valid prefix of a sequence (the "maximal subpart").
size_t valid_prefix_length(std::string_view s, size_t i) {
  const auto info = lead_info(static_cast<unsigned char>(s[i]));
  if (info.length <= 1) return info.length;
  size_t n = 1;
  for (; n < static_cast<size_t>(info.length) && i + n < s.size(); ++n) {
    const auto c = static_cast<unsigned char>(s[i + n]);
    const unsigned char lo = n == 1 ? info.lo : 0x80, hi = n == 1 ? info.hi : 0xBF;
    if (c < lo || c > hi) break;
  }
  return n;
}
}  // namespace

size_t valid_sequence_length(std::string_view s, size_t i) {
  const auto info = lead_info(static_cast<unsigned char>(s[i]));
  if (info.length == 0) return 0;
  return valid_prefix_length(s, i) == static_cast<size_t>(info.length) ? info.length : 0;
}

char32_t next(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  const int n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t cp = b & (0x7F >> n);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string to_valid_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = valid_sequence_length(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += std::max<size_t>(1, valid_prefix_length(s, i));
    }
  }
  return out;
}

size_t incomplete_tail_length(std::string_view s) {
  // A sequence is at most 4 bytes: only the last 3 can be an unfinished one.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const size_t i = s.size() - back;
    const auto info = lead_info(static_cast<unsigned char>(s[i]));
    if (info.length == 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;  // continuation
    if (info.length > static_cast<int>(back) && valid_prefix_length(s, i) == back) return back;
    return 0;
  }
  return 0;
}

size_t first_invalid_offset(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = valid_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

}  // namespace rs::utf8

namespace rs {
bool is_valid_utf8(std::string_view s) { return utf8::first_invalid_offset(s) == std::string_view::npos; }
}  // namespace rs
