#include "tokenizer/bpe.h"

#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace rs {
namespace {
uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

std::atomic<uint64_t> next_uid{1};

// Per-thread cache of whole-word results: most words of running text repeat, and a thread-local
// map needs no lock (the tokenizer is shared by server threads). Bounded: cleared when full.
struct WordCache {
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
};
constexpr size_t kCacheMaxWords = 1 << 16;
constexpr size_t kCacheMaxWordBytes = 128;
WordCache& cache_for(uint64_t uid) {
  thread_local std::unordered_map<uint64_t, WordCache> caches;
  return caches[uid];
}
}  // namespace

BpeModel::BpeModel(const nlohmann::json& m) : uid_(next_uid++) {
  if (m.value("type", "BPE") != "BPE")
    throw Error("tokenizer.json: model type '" + m.value("type", "") + "' is not supported (only BPE)");
  if (!m.contains("vocab") || !m["vocab"].is_object()) throw Error("tokenizer.json: model.vocab missing or not an object");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() > 0)
    throw Error("tokenizer.json: model.dropout > 0 is not supported (non-deterministic)");
  vocab_.reserve(m["vocab"].size() * 2);
  for (const auto& [tok, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 30))
      throw Error("tokenizer.json: model.vocab['" + tok + "'] is not a valid id");
    const auto i = id.get<int32_t>();
    vocab_.emplace(tok, i);
    if (static_cast<size_t>(i) >= id_to_token_.size()) {
      id_to_token_.resize(i + 1);
      has_id_.resize(i + 1);
    }
    id_to_token_[i] = tok;
    has_id_[i] = true;
  }
  auto str_or_empty = [&](const char* key) {
    return m.contains(key) && m[key].is_string() ? m[key].get<std::string>() : std::string();
  };
  continuing_subword_prefix_ = str_or_empty("continuing_subword_prefix");
  end_of_word_suffix_ = str_or_empty("end_of_word_suffix");
  ignore_merges_ = m.value("ignore_merges", false);
  fuse_unk_ = m.value("fuse_unk", false);
  byte_fallback_ = m.value("byte_fallback", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = vocab_.find(m["unk_token"].get<std::string>());
    if (it == vocab_.end()) throw Error("tokenizer.json: model.unk_token '" + m["unk_token"].get<std::string>() + "' is not in the vocab");
    unk_id_ = it->second;
  }
  const auto& merges = m.value("merges", nlohmann::json::array());
  merges_.reserve(merges.size() * 2);
  int32_t rank = 0;
  for (const auto& mg : merges) {
    std::string a, b;
    if (mg.is_string()) {
      const auto s = mg.get<std::string>();
      const auto sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        throw Error("tokenizer.json: merge #" + std::to_string(rank) + " '" + s + "' is not two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      a = mg[0].get<std::string>();
      b = mg[1].get<std::string>();
    } else {
      throw Error("tokenizer.json: merge #" + std::to_string(rank) + " is neither \"a b\" nor [a, b]");
    }
    auto ia = vocab_.find(a), ib = vocab_.find(b);
    std::string merged = a + b.substr(std::min(b.size(), continuing_subword_prefix_.size()));
    if (!continuing_subword_prefix_.empty() && b.rfind(continuing_subword_prefix_, 0) != 0) merged = a + b;
    auto im = vocab_.find(merged);
    if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end())
      throw Error("tokenizer.json: merge #" + std::to_string(rank) + " '" + a + " " + b + "' uses a token not in the vocab");
    merges_.try_emplace(pair_key(ia->second, ib->second), Merge{rank, im->second});
    ++rank;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kCacheMaxWordBytes) {
    merge_word(word, out);
    return;
  }
  auto& cache = cache_for(uid_);
  if (auto it = cache.words.find(word); it != cache.words.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t before = out.size();
  merge_word(word, out);
  if (cache.words.size() >= kCacheMaxWords) cache.words.clear();
  cache.words.emplace(std::string(word), std::vector<int32_t>(out.begin() + before, out.end()));
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  // Initial symbols: one per character, with prefix/suffix and unk/byte-fallback handling.
  std::optional<int32_t> pending_unk;
  auto push = [&](int32_t id) { sym.push_back({id, static_cast<int>(sym.size()) - 1, -1, true}); };
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    size_t n = utf8::valid_sequence_length(word, i);
    if (n == 0) n = 1;
    i += n;
    std::string piece;
    if (start > 0) piece += continuing_subword_prefix_;
    piece.append(word.substr(start, n));
    if (i == word.size()) piece += end_of_word_suffix_;
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      push(it->second);
      pending_unk.reset();
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      std::vector<int32_t> bytes;
      for (size_t k = start; k < i; ++k) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", static_cast<unsigned char>(word[k]));
        auto it = vocab_.find(std::string_view(buf));
        if (it == vocab_.end()) {
          all = false;
          break;
        }
        bytes.push_back(it->second);
      }
      if (all) {
        for (int32_t b : bytes) push(b);
        pending_unk.reset();
        continue;
      }
    }
    if (unk_id_) {
      if (!(fuse_unk_ && pending_unk)) push(*unk_id_);
      pending_unk = unk_id_;
    }
  }
  for (size_t k = 0; k < sym.size(); ++k) sym[k].next = k + 1 < sym.size() ? static_cast<int>(k + 1) : -1;

  struct Candidate {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int pos) {
    const int nx = sym[pos].next;
    if (nx < 0) return;
    auto it = merges_.find(pair_key(sym[pos].id, sym[nx].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (size_t k = 0; k + 1 < sym.size(); ++k) consider(static_cast<int>(k));
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[left.next];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id || it->second.rank != top.rank) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (const auto& s : sym)
    if (s.alive) out.push_back(s.id);
}

}  // namespace rs
