#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"

namespace rs {
namespace {
using Range = std::pair<size_t, size_t>;

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const std::string& b) {
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  throw Error("tokenizer.json: Split behavior '" + b + "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

// Splits `text` at the matches of `re` following HF's SplitDelimiterBehavior; appends the kept,
// non-empty pieces to out.
void split_by(const Regex& re, Behavior behavior, bool invert, const std::string& text, std::vector<std::string>& out) {
  if (text.empty()) return;
  thread_local std::vector<Range> matches;
  thread_local std::vector<std::pair<Range, bool>> segs;  // (range, is_match)
  matches.clear();
  segs.clear();
  re.find_all(text, matches);
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) segs.push_back({{prev, b}, invert});
    segs.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev != text.size()) segs.push_back({{prev, text.size()}, invert});

  auto emit = [&](Range r) {
    if (r.second > r.first) out.emplace_back(text, r.first, r.second - r.first);
  };
  std::vector<Range> kept;
  switch (behavior) {
    case Behavior::Isolated:
      for (auto& [r, m] : segs) emit(r);
      return;
    case Behavior::Removed:
      for (auto& [r, m] : segs)
        if (!m) emit(r);
      return;
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (auto& [r, m] : segs) {
        if (m && !prev_match && !kept.empty()) kept.back().second = r.second;
        else kept.push_back(r);
        prev_match = m;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (size_t i = segs.size(); i-- > 0;) {
        auto& [r, m] = segs[i];
        if (m && !prev_match && !kept.empty()) kept.back().first = r.first;
        else kept.push_back(r);
        prev_match = m;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case Behavior::Contiguous: {
      bool prev_match = false;
      for (auto& [r, m] : segs) {
        if (m == prev_match && !kept.empty()) kept.back().second = r.second;
        else kept.push_back(r);
        prev_match = m;
      }
      break;
    }
  }
  for (auto r : kept) emit(r);
}

struct SplitPreTokenizer : PreTokenizer {
  std::unique_ptr<Regex> re;
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  void pre_tokenize(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size() * 2);
    for (const auto& p : pieces) split_by(*re, behavior, invert, p, out);
    pieces = std::move(out);
  }
};

struct ByteLevelPreTokenizer : PreTokenizer {
  bool add_prefix_space = false;
  std::unique_ptr<Regex> re;  // GPT-2's split, when use_regex
  void pre_tokenize(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> split;
    for (auto& p : pieces) {
      if (add_prefix_space && (p.empty() || p[0] != ' ')) p.insert(p.begin(), ' ');
      if (re) split_by(*re, Behavior::Isolated, false, p, split);
      else if (!p.empty()) split.push_back(std::move(p));
    }
    pieces.clear();
    pieces.reserve(split.size());
    for (const auto& s : split) {
      std::string mapped;
      mapped.reserve(s.size() * 2);
      byte_level::encode(s, mapped);
      pieces.push_back(std::move(mapped));
    }
  }
};

struct MetaspacePreTokenizer : PreTokenizer {
  std::string replacement = "\xE2\x96\x81";  // U+2581
  std::string scheme = "always";
  bool split = true;
  std::unique_ptr<Regex> re;
  void pre_tokenize(std::vector<std::string>& pieces, bool first_is_start) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string t;
      for (char c : pieces[i]) {
        if (c == ' ') t += replacement;
        else t.push_back(c);
      }
      const bool prepend = scheme == "always" || (scheme == "first" && i == 0 && first_is_start);
      if (prepend && t.compare(0, replacement.size(), replacement) != 0) t = replacement + t;
      if (split) split_by(*re, Behavior::MergedWithNext, false, t, out);
      else if (!t.empty()) out.push_back(std::move(t));
    }
    pieces = std::move(out);
  }
};

struct SequencePreTokenizer : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  void pre_tokenize(std::vector<std::string>& pieces, bool first_is_start) const override {
    for (const auto& s : steps) s->pre_tokenize(pieces, first_is_start);
  }
};

std::unique_ptr<SplitPreTokenizer> make_split(const std::string& regex, Behavior b, bool invert, const std::string& what) {
  auto s = std::make_unique<SplitPreTokenizer>();
  s->re = std::make_unique<Regex>(regex, what);
  s->behavior = b;
  s->invert = invert;
  return s;
}

constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  if (type == "Sequence") {
    auto seq = std::make_unique<SequencePreTokenizer>();
    for (const auto& s : spec.at("pretokenizers"))
      if (auto p = make_pre_tokenizer(s)) seq->steps.push_back(std::move(p));
    return seq;
  }
  if (type == "Split") {
    const auto& pat = spec.at("pattern");
    const std::string re = pat.contains("Regex") ? pat["Regex"].get<std::string>() : Regex::escape(pat.at("String").get<std::string>());
    return make_split(re, parse_behavior(spec.at("behavior").get<std::string>()), spec.value("invert", false),
                      "tokenizer.json pre_tokenizer Split");
  }
  if (type == "ByteLevel") {
    auto b = std::make_unique<ByteLevelPreTokenizer>();
    b->add_prefix_space = spec.value("add_prefix_space", true);
    if (spec.value("use_regex", true)) b->re = std::make_unique<Regex>(kGpt2Regex, "ByteLevel regex");
    return b;
  }
  if (type == "Digits") {
    // HF splits on char::is_numeric (categories Nd, Nl, No), one character per match.
    return make_split("\\p{N}", spec.value("individual_digits", false) ? Behavior::Isolated : Behavior::Contiguous, false,
                      "Digits");
  }
  if (type == "Whitespace") return make_split(R"(\w+|[^\w\s]+)", Behavior::Removed, true, "Whitespace");
  if (type == "WhitespaceSplit") return make_split(R"(\s+)", Behavior::Removed, false, "WhitespaceSplit");
  if (type == "Metaspace") {
    auto m = std::make_unique<MetaspacePreTokenizer>();
    m->replacement = spec.value("replacement", std::string("\xE2\x96\x81"));
    if (spec.contains("prepend_scheme")) m->scheme = spec["prepend_scheme"].get<std::string>();
    else if (spec.contains("add_prefix_space")) m->scheme = spec["add_prefix_space"].get<bool>() ? "always" : "never";
    m->split = spec.value("split", true);
    m->re = std::make_unique<Regex>(Regex::escape(m->replacement), "Metaspace");
    return m;
  }
  throw Error("tokenizer.json: pre_tokenizer type '" + type +
              "' is not supported (supported: Sequence, Split, ByteLevel, Digits, Metaspace, Whitespace, WhitespaceSplit)");
}

}  // namespace rs
