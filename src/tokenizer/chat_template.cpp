#include "tokenizer/chat_template.h"

#include "common/error.h"

namespace rs {
namespace jinja {
struct Template {};
}  // namespace jinja
ChatTemplate::ChatTemplate(const std::string&) {}
ChatTemplate::~ChatTemplate() = default;
std::string ChatTemplate::render(const nlohmann::ordered_json&) const { throw Error("chat templates: not built yet"); }
}  // namespace rs
