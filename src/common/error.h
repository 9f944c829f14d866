#pragma once
// One error type for everything a user can act on. The message is the user-facing text
// (file, tensor, field, value); where() is the source location, for logs and bug reports.
#include <source_location>
#include <stdexcept>
#include <string>

namespace rs {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message,
                 std::source_location loc = std::source_location::current())
      : std::runtime_error(message),
        where_(std::string(loc.file_name()) + ":" + std::to_string(loc.line())) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

}  // namespace rs
