#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace rs {
namespace {
void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

struct ByteLevelDecoder : Decoder {
  // Each token maps back to its bytes; one that is not made of byte-level characters (an added
  // token such as "<｜User｜>") keeps its own UTF-8, as HF does.
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      if (auto b = byte_level::decode(t)) bytes += *b;
      else bytes += t;
    }
    tokens.assign(1, utf8::to_valid_lossy(bytes));
  }
};

struct MetaspaceDecoder : Decoder {
  std::string replacement;
  bool strip_first = true;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      replace_all(tokens[i], replacement, " ");
      if (i == 0 && strip_first && !tokens[i].empty() && tokens[i][0] == ' ') tokens[i].erase(0, 1);
    }
  }
};

struct ReplaceDecoder : Decoder {
  std::string from, to;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) replace_all(t, from, to);
  }
};

struct ByteFallbackDecoder : Decoder {
  // Runs of <0xXX> tokens become bytes; an invalid run becomes one U+FFFD per byte (HF).
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;
    size_t run_len = 0;
    auto flush = [&] {
      if (run_len == 0) return;
      if (is_valid_utf8(run)) out.push_back(run);
      else
        for (size_t k = 0; k < run_len; ++k) out.push_back("\xEF\xBF\xBD");
      run.clear();
      run_len = 0;
    };
    for (auto& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        try {
          run.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
          ++run_len;
          continue;
        } catch (...) {
        }
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
};

struct FuseDecoder : Decoder {
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (auto& t : tokens) all += t;
    tokens.assign(1, all);
  }
};

struct StripDecoder : Decoder {
  std::string content;
  int start = 0, stop = 0;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      for (int k = 0; k < start && t.compare(0, content.size(), content) == 0 && !content.empty(); ++k) t.erase(0, content.size());
      for (int k = 0; k < stop && !content.empty() && t.size() >= content.size() &&
                      t.compare(t.size() - content.size(), content.size(), content) == 0;
           ++k)
        t.erase(t.size() - content.size());
    }
  }
};

struct SequenceDecoder : Decoder {
  std::vector<std::unique_ptr<Decoder>> steps;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps) s->decode_chain(tokens);
  }
};
}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    auto m = std::make_unique<MetaspaceDecoder>();
    m->replacement = spec.value("replacement", std::string("\xE2\x96\x81"));
    const std::string scheme = spec.value("prepend_scheme", std::string(spec.value("add_prefix_space", true) ? "always" : "never"));
    m->strip_first = scheme != "never";
    return m;
  }
  if (type == "Replace") {
    auto r = std::make_unique<ReplaceDecoder>();
    const auto& pat = spec.at("pattern");
    if (!pat.contains("String")) throw Error("tokenizer.json: decoder Replace with a Regex pattern is not supported");
    r->from = pat["String"].get<std::string>();
    r->to = spec.at("content").get<std::string>();
    return r;
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    auto s = std::make_unique<StripDecoder>();
    s->content = spec.at("content").get<std::string>();
    s->start = spec.value("start", 0);
    s->stop = spec.value("stop", 0);
    return s;
  }
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceDecoder>();
    for (const auto& d : spec.at("decoders"))
      if (auto p = make_decoder(d)) seq->steps.push_back(std::move(p));
    return seq;
  }
  throw Error("tokenizer.json: decoder type '" + type +
              "' is not supported (supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)");
}

std::string decode_tokens(const Decoder* decoder, std::vector<std::string> tokens) {
  std::string out;
  if (!decoder) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
  } else {
    decoder->decode_chain(tokens);
    for (const auto& t : tokens) out += t;
  }
  return utf8::to_valid_lossy(out);
}

}  // namespace rs
