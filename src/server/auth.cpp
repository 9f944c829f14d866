#include "server/auth.h"

#include <cstddef>

namespace rs::server {

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Walk the full length of the expected value (b) whatever a holds; the length mismatch is
  // folded into the accumulator rather than returned early.
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff = diff | (x ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

bool authorized(const std::string& api_key, const std::string& authorization_header) {
  if (api_key.empty()) return true;
  constexpr std::string_view kBearer = "Bearer ";
  std::string_view h = authorization_header;
  if (h.size() < kBearer.size()) return false;
  // The scheme is case-insensitive (RFC 7235); the key is not.
  for (size_t i = 0; i < kBearer.size(); ++i) {
    char c = h[i], k = kBearer[i];
    if ((c | 0x20) != (k | 0x20) && !(c == ' ' && k == ' ')) return false;
  }
  return constant_time_equal(h.substr(kBearer.size()), api_key);
}

}  // namespace rs::server
