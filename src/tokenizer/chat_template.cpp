#include "tokenizer/chat_template.h"

#include "common/error.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_parser.h"

namespace rs {

std::optional<std::time_t> ChatTemplate::fixed_now_;

ChatTemplate::ChatTemplate(const std::string& source) : tmpl_(jinja::parse(source)) {}
ChatTemplate::~ChatTemplate() = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) throw Error("chat template context must be a JSON object");
  std::unordered_map<std::string, jinja::Value> globals;
  jinja::add_builtin_globals(globals);
  for (const auto& [k, v] : context.items()) globals[k] = jinja::Value::from_json(v);
  jinja::Interpreter in;
  in.fixed_now = fixed_now_;
  try {
    return in.render(*tmpl_, globals);
  } catch (const jinja::TemplateRaised& r) {
    throw Error(r.message);
  }
}

}  // namespace rs
