#include "tokenizer/regex.h"

#include <pcre2.h>

#include <mutex>

#include "common/error.h"

namespace rs {

// pcre2_match needs scratch match data; one per thread keeps the compiled regex shareable.
struct Regex::Impl {
  pcre2_code* code = nullptr;
};

namespace {
struct MatchData {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchData() {
    md = pcre2_match_data_create(4, nullptr);
    ctx = pcre2_match_context_create(nullptr);
    // The default JIT stack (32 KiB) overflows on long runs matched by \s+(?!\S)-style patterns.
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~MatchData() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(ctx);
    pcre2_match_data_free(md);
  }
};
MatchData& thread_match_data() {
  thread_local MatchData data;
  return data;
}
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}
}  // namespace

Regex::Regex(const std::string& pattern, const std::string& what) : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &err, &err_off, nullptr);
  if (!impl_->code)
    throw Error(what + ": cannot compile regex /" + pattern + "/ at offset " + std::to_string(err_off) + ": " +
                pcre2_message(err));
  // JIT is a speed-up only: when it is unavailable pcre2_match interprets.
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() {
  if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  auto& data = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    // Input is validated once up front, so PCRE2 need not re-check UTF at every call.
    const int rc = pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.md, data.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw Error("regex match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e == b) {
      // Empty match: step over one whole character, as Rust's find_iter does.
      if (e >= text.size()) break;
      size_t n = 1;
      while (e + n < text.size() && (static_cast<unsigned char>(text[e + n]) & 0xC0) == 0x80) ++n;
      start = e + n;
    } else {
      start = e;
    }
  }
}

bool Regex::matches_at(std::string_view text, size_t offset) const {
  auto& data = thread_match_data();
  const int rc = pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), offset,
                             PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, data.md, data.ctx);
  return rc >= 0;
}

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#&~ \t\n\r").find(c) != std::string_view::npos) {
      if (c == '\t') { out += "\\t"; continue; }
      if (c == '\n') { out += "\\n"; continue; }
      if (c == '\r') { out += "\\r"; continue; }
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace rs
