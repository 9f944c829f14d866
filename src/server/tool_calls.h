#pragma once
// Tool calls in DeepSeek-V3's output syntax (what its chat template writes for assistant
// tool_calls, and what vLLM's deepseek_v3 parser reads):
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//   ...more calls...<｜tool▁calls▁end｜>
// The markers are ordinary (non-special) tokens of the DeepSeek-V3 vocabulary, so they survive
// skip_special_tokens and can be found in the decoded text.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rs::server {

struct ToolCall {
  std::string type = "function";
  std::string name;
  std::string arguments;  // the model's JSON text, passed through as OpenAI does
};

struct ToolCallOutput {
  std::string content;          // text before the first call (may be empty)
  std::vector<ToolCall> calls;  // empty: no well-formed call; then content is the whole text
};

// A forced call (tool_choice "required" or a named function) in this syntax: the text up to the
// arguments of a call of `name`, and the text after them that closes the call section.
std::string forced_call_prefix(std::string_view name);
std::string forced_call_suffix();

// The whole generated text -> content and calls. Text that starts a call section but holds no
// well-formed call is returned unchanged as content (vLLM does the same).
ToolCallOutput parse_tool_calls(std::string_view text);

// Streaming: content deltas pass through until the call section starts; from there the text is
// held and parsed when the choice ends.
class ToolCallStream {
 public:
  // Returns the content that can be sent now.
  std::string push(std::string_view delta);
  // At the end of the choice: the remaining content (held text that was no call) and the calls.
  ToolCallOutput finish();

 private:
  std::string held_;       // a possible marker prefix, or the whole call section
  bool in_calls_ = false;
};

}  // namespace rs::server
