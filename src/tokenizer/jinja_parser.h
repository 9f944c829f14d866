#pragma once
#include <memory>
#include <string>

#include "tokenizer/jinja_ast.h"

namespace rs::jinja {
// Throws rs::Error "chat template line L column C: ..." on a syntax error.
std::unique_ptr<Template> parse(const std::string& source);
}  // namespace rs::jinja
