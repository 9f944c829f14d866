#pragma once
// Launchers' A/B switches and knobs from the environment (host side, read once by whoever asks).
#include <cstdlib>

namespace rs::kern {

// Integer from the environment, the fallback when unset, not a whole number, or out of [lo, hi].
inline int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi) return fallback;
  return static_cast<int>(x);
}

}  // namespace rs::kern
