#pragma once
// A compiled chat template: tokenizer_config.json's Jinja source rendered with HF's variables.
#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace rs {

namespace jinja {
struct Template;
}

class ChatTemplate {
 public:
  // Throws rs::Error "chat template line L column C: ..." when the source does not parse.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  // `context` is a JSON object of template variables (messages, add_generation_prompt, ...).
  // Throws rs::Error with the line and column of a render error, or raise_exception's message.
  std::string render(const nlohmann::ordered_json& context) const;
  // strftime_now's clock: a fixed time for reproducible renders (tests), or nullopt for now.
  static void set_fixed_now(std::optional<std::time_t> t) { fixed_now_ = t; }

 private:
  std::unique_ptr<jinja::Template> tmpl_;
  static std::optional<std::time_t> fixed_now_;
};

}  // namespace rs
