#include "engine/stop_checker.h"

#include <algorithm>

namespace rs {

namespace {
// Never cut inside a UTF-8 character: emitted deltas must be valid text on their own.
size_t back_to_char_boundary(const std::string& s, size_t pos) {
  while (pos > 0 && pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}
}  // namespace

StopChecker::StopChecker(std::vector<std::string> stops, bool include_stop_in_output)
    : include_(include_stop_in_output) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
  for (const auto& s : stops_) max_len_ = std::max(max_len_, s.size());
}

std::string StopChecker::push(std::string_view delta) {
  if (matched_) return {};
  pending_.append(delta);
  if (stops_.empty()) {
    std::string out;
    out.swap(pending_);
    return out;
  }
  // Earliest match wins. Everything before pending_ was checked when it arrived and a stop
  // string cannot start there: we only emit text further back than max_len_ - 1 bytes.
  size_t best = std::string::npos, best_len = 0;
  for (const auto& s : stops_) {
    size_t p = pending_.find(s);
    if (p != std::string::npos && (p < best || (p == best && s.size() > best_len))) {
      best = p;
      best_len = s.size();
    }
  }
  if (best != std::string::npos) {
    matched_ = true;
    std::string out = pending_.substr(0, include_ ? best + best_len : best);
    pending_.clear();
    return out;
  }
  const size_t keep = max_len_ - 1;
  if (pending_.size() <= keep) return {};
  size_t cut = back_to_char_boundary(pending_, pending_.size() - keep);
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string StopChecker::flush() {
  if (matched_) return {};
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace rs
