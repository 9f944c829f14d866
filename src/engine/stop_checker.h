#pragma once
// Stop strings over streamed text. Text that might be the beginning of a stop string is held
// back until it is known not to be one, so a client never sees a stop string (or half of one)
// that the final output does not contain.
#include <string>
#include <string_view>
#include <vector>

namespace rs {

class StopChecker {
 public:
  StopChecker() = default;
  StopChecker(std::vector<std::string> stops, bool include_stop_in_output);

  // Appends newly decoded text; returns the text that is now safe to emit. After a match,
  // matched() is true, the returned text ends at the stop string (or after it, when included),
  // and later calls return nothing.
  std::string push(std::string_view delta);
  // The held-back text, for a sequence that ends for another reason.
  std::string flush();

  bool matched() const { return matched_; }
  bool active() const { return !stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  bool include_ = false;
  size_t max_len_ = 0;
  std::string pending_;  // decoded but not yet emitted
  bool matched_ = false;
};

}  // namespace rs
