#pragma once
// Global functions every template sees: range, namespace, dict, raise_exception, strftime_now.
#include <string>
#include <unordered_map>

#include "tokenizer/jinja_value.h"

namespace rs::jinja {
void add_builtin_globals(std::unordered_map<std::string, Value>& globals);
// raise_exception's error: its message is the template's own text, without position.
struct TemplateRaised {
  std::string message;
};
}  // namespace rs::jinja
