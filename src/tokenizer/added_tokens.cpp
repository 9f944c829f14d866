#include "tokenizer/added_tokens.h"

#include "common/error.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace rs {

void AddedVocabulary::Trie::insert(const std::string& key, int32_t token_index) {
  int32_t node = 0;
  for (unsigned char c : key) {
    const uint64_t k = (static_cast<uint64_t>(node) << 8) | c;
    auto it = edges.find(k);
    if (it == edges.end()) {
      const auto child = static_cast<int32_t>(token_at.size());
      token_at.push_back(-1);
      it = edges.emplace(k, child).first;
    }
    node = it->second;
  }
  if (!key.empty()) {
    first_byte[static_cast<unsigned char>(key[0])] = true;
    if (token_at[node] < 0) token_at[node] = token_index;  // the first declaration of a content wins
  }
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest_at(const std::string& text, size_t pos) const {
  int32_t node = 0;
  std::pair<int32_t, size_t> best{-1, 0};
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == edges.end()) break;
    node = it->second;
    if (token_at[node] >= 0) best = {token_at[node], i + 1 - pos};
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)),
      // Rust's char::is_alphanumeric: Alphabetic or a numeric category.
      word_char_(std::make_unique<Regex>("[\\p{Alphabetic}\\p{N}]", "added-token word check")) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    auto& t = tokens_[i];
    t.decoded = t.content;
    if (t.content.empty()) throw Error("tokenizer.json: added token id " + std::to_string(t.id) + " has empty content");
    by_id_[t.id] = i;
    by_content_.emplace(t.content, i);
    if (t.normalized && normalizer) {
      std::string key = t.content;
      normalizer->normalize(key);
      normalized_trie_.insert(key, static_cast<int32_t>(i));
      t.decoded = key;
    } else if (t.normalized) {
      normalized_trie_.insert(t.content, static_cast<int32_t>(i));
    } else {
      raw_trie_.insert(t.content, static_cast<int32_t>(i));
    }
  }
}

AddedVocabulary::~AddedVocabulary() = default;

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::by_content(const std::string& content) const {
  auto it = by_content_.find(content);
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

std::vector<Segment> AddedVocabulary::extract_and_normalize(const std::string& text, const Normalizer* normalizer) const {
  std::vector<Segment> out;
  split(text, raw_trie_, out, normalizer, &normalized_trie_);
  return out;
}

void AddedVocabulary::split(const std::string& text, const Trie& trie, std::vector<Segment>& out,
                            const Normalizer* normalize_rest, const Trie* then) const {
  auto emit_text = [&](size_t b, size_t e) {
    if (e <= b) return;
    std::string piece = text.substr(b, e - b);
    if (then) {
      if (normalize_rest) normalize_rest->normalize(piece);
      split(piece, *then, out, nullptr, nullptr);
    } else {
      out.push_back({-1, std::move(piece)});
    }
  };
  auto is_word_char_at = [&](size_t i) { return word_char_->matches_at(text, i); };
  size_t pos = 0, start_offset = 0;
  while (pos < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [ti, len] = trie.longest_at(text, pos);
    if (ti < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // matches never overlap, even when one is then rejected (as with HF's find_iter)
    const AddedToken& tok = tokens_[ti];
    if (tok.single_word) {
      const bool start_ok = start == 0 || !is_word_char_at(utf8::prev_char_start(text, start));
      const bool stop_ok = stop == text.size() || !is_word_char_at(stop);
      if (!start_ok || !stop_ok) continue;
    }
    if (tok.lstrip) {
      while (start > start_offset) {
        const size_t p = utf8::prev_char_start(text, start);
        size_t q = p;
        if (!utf8::is_white_space(utf8::next(text, q))) break;
        start = p;
      }
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        size_t q = stop;
        if (!utf8::is_white_space(utf8::next(text, q))) break;
        stop = q;
      }
    }
    emit_text(start_offset, start);
    out.push_back({tok.id, {}});
    start_offset = std::max(start_offset, stop);
  }
  emit_text(start_offset, text.size());
}

}  // namespace rs
