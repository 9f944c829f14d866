#include "tokenizer/normalizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_nfc_data.h"
#include "tokenizer/utf8.h"

namespace rs {
namespace {
using namespace unicode_nfc;

// Hangul syllables decompose and compose arithmetically (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = kCombiningClasses + kCombiningClassCount;
  const auto* it = std::lower_bound(kCombiningClasses, end, cp, [](const CombiningClass& c, char32_t v) { return c.cp < v; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = kDecompositions + kDecompositionCount;
  const auto* it = std::lower_bound(kDecompositions, end, cp, [](const Decomposition& d, char32_t v) { return d.cp < v; });
  if (it != end && it->cp == cp) {
    out.insert(out.end(), kDecompositionPool + it->offset, kDecompositionPool + it->offset + it->length);
  } else {
    out.push_back(cp);
  }
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* end = kCompositions + kCompositionCount;
  const auto* it = std::lower_bound(kCompositions, end, std::pair{a, b}, [](const Composition& c, std::pair<char32_t, char32_t> v) {
    return c.first != v.first ? c.first < v.first : c.second < v.second;
  });
  return it != end && it->first == a && it->second == b ? it->composed : 0;
}

std::vector<char32_t> canonical_decomposition(const std::string& text) {
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) decompose(utf8::next(text, i), cps);
  // Canonical ordering: stable sort of every run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](char32_t x, char32_t y) { return combining_class(x) < combining_class(y); });
    i = j;
  }
  return cps;
}

bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::string to_utf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) utf8::append(out, cp);
  return out;
}

struct NfcNormalizer : Normalizer {
  void normalize(std::string& t) const override { t = nfc(t); }
};
struct NfdNormalizer : Normalizer {
  void normalize(std::string& t) const override { t = nfd(t); }
};
struct SequenceNormalizer : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> steps;
  void normalize(std::string& t) const override {
    for (const auto& s : steps) s->normalize(t);
  }
};
struct PrependNormalizer : Normalizer {
  std::string prefix;
  // HF prepends only to non-empty text.
  void normalize(std::string& t) const override {
    if (!t.empty()) t = prefix + t;
  }
};
struct ReplaceNormalizer : Normalizer {
  std::unique_ptr<Regex> pattern;
  std::string content;
  void normalize(std::string& t) const override {
    std::vector<std::pair<size_t, size_t>> m;
    pattern->find_all(t, m);
    if (m.empty()) return;
    std::string out;
    size_t prev = 0;
    for (auto [b, e] : m) {
      out.append(t, prev, b - prev);
      out += content;
      prev = e;
    }
    out.append(t, prev, std::string::npos);
    t = std::move(out);
  }
};
struct StripNormalizer : Normalizer {
  bool left = true, right = true;
  void normalize(std::string& t) const override {
    size_t b = 0, e = t.size();
    if (left) {
      while (b < e) {
        size_t i = b;
        if (!utf8::is_white_space(utf8::next(t, i))) break;
        b = i;
      }
    }
    if (right) {
      while (e > b) {
        size_t s = e - 1;
        while (s > b && (static_cast<unsigned char>(t[s]) & 0xC0) == 0x80) --s;
        size_t i = s;
        if (!utf8::is_white_space(utf8::next(t, i))) break;
        e = s;
      }
    }
    t = t.substr(b, e - b);
  }
};
}  // namespace

std::string nfd(const std::string& text) {
  if (is_ascii(text)) return text;
  return to_utf8(canonical_decomposition(text));
}

std::string nfc(const std::string& text) {
  if (is_ascii(text)) return text;
  std::vector<char32_t> cps = canonical_decomposition(text);
  // Canonical composition (UAX #15): a character combines with the last starter unless something
  // between them is blocking (a class of 0, or one not lower than its own).
  size_t out = 0;
  long starter = -1;
  int last_class = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const int cc = combining_class(c);
    if (starter >= 0) {
      const bool adjacent = static_cast<long>(out) == starter + 1;
      if (adjacent || (last_class != 0 && last_class < cc)) {
        if (char32_t comp = compose_pair(cps[starter], c)) {
          cps[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<long>(out);
    last_class = cc;
    cps[out++] = c;
  }
  cps.resize(out);
  return to_utf8(cps);
}

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "NFD") return std::make_unique<NfdNormalizer>();
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceNormalizer>();
    for (const auto& s : spec.at("normalizers"))
      if (auto n = make_normalizer(s)) seq->steps.push_back(std::move(n));
    return seq;
  }
  if (type == "Prepend") {
    auto p = std::make_unique<PrependNormalizer>();
    p->prefix = spec.at("prepend").get<std::string>();
    return p;
  }
  if (type == "Replace") {
    auto r = std::make_unique<ReplaceNormalizer>();
    const auto& pat = spec.at("pattern");
    const std::string re = pat.contains("Regex") ? pat["Regex"].get<std::string>() : Regex::escape(pat.at("String").get<std::string>());
    r->pattern = std::make_unique<Regex>(re, "tokenizer.json normalizer Replace");
    r->content = spec.at("content").get<std::string>();
    return r;
  }
  if (type == "Strip") {
    auto s = std::make_unique<StripNormalizer>();
    s->left = spec.value("strip_left", true);
    s->right = spec.value("strip_right", true);
    return s;
  }
  throw Error("tokenizer.json: normalizer type '" + type + "' is not supported (supported: NFC, NFD, Replace, Prepend, Strip, Sequence)");
}

}  // namespace rs
