#include "server/tool_calls.h"

namespace rs::server {
namespace {

constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";
constexpr std::string_view kJsonOpen = "```json\n";
constexpr std::string_view kJsonClose = "\n```";

// One call's body (between call-begin and call-end): TYPE<sep>NAME\n```json\nARGS\n```
std::optional<ToolCall> parse_one(std::string_view body) {
  const size_t sep = body.find(kSep);
  if (sep == std::string_view::npos) return std::nullopt;
  ToolCall c;
  c.type = std::string(body.substr(0, sep));
  std::string_view rest = body.substr(sep + kSep.size());
  const size_t nl = rest.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  c.name = std::string(rest.substr(0, nl));
  rest = rest.substr(nl + 1);
  if (rest.substr(0, kJsonOpen.size()) != kJsonOpen) return std::nullopt;
  rest = rest.substr(kJsonOpen.size());
  if (rest.size() < kJsonClose.size() || rest.substr(rest.size() - kJsonClose.size()) != kJsonClose)
    return std::nullopt;
  c.arguments = std::string(rest.substr(0, rest.size() - kJsonClose.size()));
  if (c.name.empty() || c.type != "function") return std::nullopt;
  return c;
}

}  // namespace

std::string forced_call_prefix(std::string_view name) {
  std::string s;
  s.append(kCallsBegin).append(kCallBegin).append("function").append(kSep).append(name).append("\n").append(kJsonOpen);
  return s;
}

std::string forced_call_suffix() {
  std::string s;
  s.append(kJsonClose).append(kCallEnd).append(kCallsEnd);
  return s;
}

ToolCallOutput parse_tool_calls(std::string_view text) {
  ToolCallOutput out;
  const size_t begin = text.find(kCallsBegin);
  if (begin == std::string_view::npos) {
    out.content = std::string(text);
    return out;
  }
  // Calls follow one another; anything after the last complete call (the calls-end marker, an
  // unfinished call cut by max_tokens) is not a call.
  for (size_t pos = begin + kCallsBegin.size();;) {
    const size_t b = text.find(kCallBegin, pos);
    if (b == std::string_view::npos) break;
    const size_t e = text.find(kCallEnd, b + kCallBegin.size());
    if (e == std::string_view::npos) break;
    auto c = parse_one(text.substr(b + kCallBegin.size(), e - b - kCallBegin.size()));
    if (!c) break;
    out.calls.push_back(std::move(*c));
    pos = e + kCallEnd.size();
  }
  out.content = std::string(out.calls.empty() ? text : text.substr(0, begin));
  return out;
}

std::string ToolCallStream::push(std::string_view delta) {
  held_.append(delta);
  if (in_calls_) return {};
  if (const size_t at = held_.find(kCallsBegin); at != std::string::npos) {
    std::string content = held_.substr(0, at);
    held_.erase(0, at);
    in_calls_ = true;
    return content;
  }
  // Keep back the longest tail that could still grow into the marker.
  size_t keep = std::min(held_.size(), kCallsBegin.size() - 1);
  while (keep > 0 && std::string_view(held_).substr(held_.size() - keep) != kCallsBegin.substr(0, keep)) --keep;
  std::string content = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return content;
}

ToolCallOutput ToolCallStream::finish() {
  ToolCallOutput out = parse_tool_calls(held_);
  held_.clear();
  return out;
}

}  // namespace rs::server
