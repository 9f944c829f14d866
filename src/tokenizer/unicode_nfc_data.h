#pragma once
// Unicode tables for canonical normalization (generated: gen_unicode_nfc.py). Sorted by code point.
#include <cstddef>
#include <cstdint>

namespace rs::unicode_nfc {
struct CombiningClass {
  char32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp;
  uint16_t offset;  // into kDecompositionPool; the full (recursive) canonical decomposition
  uint8_t length;
};
struct Composition {
  char32_t first, second, composed;  // sorted by (first, second)
};
extern const CombiningClass kCombiningClasses[];
extern const size_t kCombiningClassCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const char32_t kDecompositionPool[];
extern const Composition kCompositions[];
extern const size_t kCompositionCount;
}  // namespace rs::unicode_nfc
