#include "server/generation.h"

#include <thread>

#include "server/errors.h"
#include "server/metrics.h"
#include "server/sse.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace rs::server {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

// Merges the event channels of a response's requests (one per prompt).
class EventPump {
 public:
  explicit EventPump(GenerationJob& job)
      : job_(job),
        n_(std::max(1, job.req.gen.n)),
        finished_(job.handles.size(), 0),
        usage_(job.handles.size()) {}

  bool all_done() const {
    for (int f : finished_)
      if (f < n_) return false;
    return true;
  }

  // Next event of any unfinished request, waiting up to `timeout`; nullopt on timeout.
  std::optional<std::pair<size_t, RequestEvent>> next(milliseconds timeout) {
    if (job_.handles.size() == 1) return take(0, job_.handles[0]->next(timeout));
    auto deadline = std::chrono::steady_clock::now() + timeout;
    do {
      for (size_t k = 0; k < job_.handles.size(); ++k) {
        size_t i = (rr_ + k) % job_.handles.size();
        if (finished_[i] >= n_) continue;
        if (auto ev = job_.handles[i]->next(milliseconds(0))) {
          rr_ = i + 1;  // round robin, so one long prompt does not starve the others
          return take(i, std::move(ev));
        }
      }
      std::this_thread::sleep_for(milliseconds(2));
    } while (std::chrono::steady_clock::now() < deadline);
    return std::nullopt;
  }

  Usage usage() const {
    Usage u;
    for (const RequestEvent& e : usage_) {
      u.prompt_tokens += e.prompt_tokens;
      u.completion_tokens += e.completion_tokens;
      u.cached_tokens += e.cached_prompt_tokens;
    }
    return u;
  }

 private:
  std::optional<std::pair<size_t, RequestEvent>> take(size_t i, std::optional<RequestEvent> ev) {
    if (!ev) return std::nullopt;
    RequestEvent& u = usage_[i];
    u.prompt_tokens = std::max(u.prompt_tokens, ev->prompt_tokens);
    u.completion_tokens = std::max(u.completion_tokens, ev->completion_tokens);
    u.cached_prompt_tokens = std::max(u.cached_prompt_tokens, ev->cached_prompt_tokens);
    if (ev->finish != FinishReason::None) {
      if (++finished_[i] == n_ && job_.metrics) job_.metrics->count_finished(ev->finish);
    }
    return std::make_pair(i, std::move(*ev));
  }

  GenerationJob& job_;
  int n_;
  std::vector<int> finished_;
  std::vector<RequestEvent> usage_;  // totals only
  size_t rr_ = 0;
};

size_t choice_index(const GenerationJob& job, size_t prompt, int choice) {
  return prompt * size_t(std::max(1, job.req.gen.n)) + size_t(choice);
}

}  // namespace

void cancel_all(const GenerationJob& job) {
  for (const auto& h : job.handles) h->cancel();
}

std::optional<std::string> collect_response(GenerationJob& job,
                                            const std::function<bool()>& client_alive) {
  const size_t n = size_t(std::max(1, job.req.gen.n));
  std::vector<ChoiceResult> choices(job.handles.size() * n);
  EventPump pump(job);
  auto last_check = std::chrono::steady_clock::now();
  while (!pump.all_done()) {
    auto got = pump.next(job.poll);
    // Checked on a clock, not only when idle: a fast decode may never leave the pump idle.
    if (!got || std::chrono::steady_clock::now() - last_check >= job.poll) {
      last_check = std::chrono::steady_clock::now();
      if (!client_alive()) {
        cancel_all(job);
        return std::nullopt;
      }
    }
    if (!got) continue;
    auto& [prompt, ev] = *got;
    if (ev.choice < 0 || size_t(ev.choice) >= n) continue;  // engine bug: ignore, never index past
    ChoiceResult& c = choices[choice_index(job, prompt, ev.choice)];
    c.text += ev.text;
    c.token_ids.insert(c.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (!ev.prompt_logprobs.empty()) c.prompt_logprobs = std::move(ev.prompt_logprobs);
    if (ev.finish != FinishReason::None) {
      c.finish = ev.finish;
      c.error = ev.error;
    }
  }
  // Prompt logprobs belong to the prompt, not a choice: share them with its other choices.
  for (size_t p = 0; p < job.handles.size(); ++p) {
    const std::vector<std::optional<TokenLogprob>>* have = nullptr;
    for (size_t c = 0; c < n && !have; ++c)
      if (!choices[p * n + c].prompt_logprobs.empty()) have = &choices[p * n + c].prompt_logprobs;
    if (have)
      for (size_t c = 0; c < n; ++c)
        if (choices[p * n + c].prompt_logprobs.empty()) choices[p * n + c].prompt_logprobs = *have;
  }
  for (const ChoiceResult& c : choices)
    if (c.finish == FinishReason::Error)
      throw ApiError(500, "generation failed: " + c.error);
  const Tokenizer& tok = *job.tokenizer;
  json body = job.req.kind == ApiKind::Chat
                  ? chat_response(job.req, job.id, job.created, choices, pump.usage(), tok)
                  : completion_response(job.req, job.id, job.created, choices, pump.usage(), tok);
  return dump_json(body);
}

bool stream_response(GenerationJob& job, SseWriter& out) {
  const ParsedRequest& r = job.req;
  const bool chat = r.kind == ApiKind::Chat;
  const Tokenizer& tok = *job.tokenizer;
  const int n = std::max(1, r.gen.n);
  std::vector<size_t> text_len(job.handles.size() * size_t(n), 0);  // for completions' text_offset

  auto send_chunk = [&](json choice) {
    json env = chunk_envelope(r, job.id, job.created, json::array({std::move(choice)}));
    if (r.include_usage) env["usage"] = nullptr;
    return out.send_data(dump_json(env));
  };

  // Opening chunks: the assistant role (chat) or the echoed prompt (completions), per choice.
  for (size_t p = 0; p < job.handles.size(); ++p) {
    for (int c = 0; c < n; ++c) {
      size_t idx = choice_index(job, p, c);
      if (chat) {
        if (!send_chunk({{"index", idx},
                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                         {"logprobs", nullptr},
                         {"finish_reason", nullptr}}))
          break;
      } else if (r.echo && !r.gen.prompt_logprobs) {
        // With logprobs the echo waits for the prompt's logprobs (first event).
        text_len[idx] = r.prompts[p].text.size();
        if (!send_chunk({{"index", idx}, {"text", r.prompts[p].text}, {"logprobs", nullptr},
                         {"finish_reason", nullptr}}))
          break;
      }
    }
  }

  EventPump pump(job);
  std::vector<bool> echoed(text_len.size(), false);
  std::vector<ToolCallStream> tool_streams(r.parse_tool_calls ? text_len.size() : 0);
  std::vector<std::vector<std::optional<TokenLogprob>>> prompt_lps(job.handles.size());
  while (!out.failed() && !pump.all_done()) {
    auto got = pump.next(job.poll);
    if (!got) {
      out.keep_alive_if_idle();
      continue;
    }
    auto& [prompt, ev] = *got;
    if (ev.choice < 0 || ev.choice >= n) continue;
    const size_t idx = choice_index(job, prompt, ev.choice);
    if (ev.finish == FinishReason::Error) {
      // The status line is long gone: the error travels as the stream's last data chunk.
      cancel_all(job);
      out.send_data(error_json(500, "generation failed: " + ev.error));
      out.send(kSseDone);
      return !out.failed();
    }
    std::string text = ev.text;
    json lps = nullptr;
    if (chat) {
      if (r.logprobs && !ev.logprobs.empty()) lps = chat_logprobs_json(tok, ev.logprobs, r.top_logprobs);
    } else {
      if (!ev.prompt_logprobs.empty()) prompt_lps[prompt] = ev.prompt_logprobs;
      if (r.echo && r.gen.prompt_logprobs && !echoed[idx]) {
        echoed[idx] = true;
        text = r.prompts[prompt].text + text;
        if (r.logprobs)
          lps = completion_logprobs_json(tok, r.prompts[prompt].ids, prompt_lps[prompt], ev.logprobs,
                                         r.top_logprobs, 0);
      } else if (r.logprobs && !ev.logprobs.empty()) {
        lps = completion_logprobs_json(tok, {}, {}, ev.logprobs, r.top_logprobs, text_len[idx]);
      }
      text_len[idx] += text.size();
    }
    const bool finishing = ev.finish != FinishReason::None;
    const char* fr = finish_reason_json(ev.finish);
    json delta = json::object();
    if (!tool_streams.empty()) {
      // Content flows until the call section starts; the calls go out whole when the choice ends.
      text = tool_streams[idx].push(text);
      if (finishing) {
        ToolCallOutput t = tool_streams[idx].finish();
        if (!r.parallel_tool_calls && t.calls.size() > 1) t.calls.resize(1);
        if (t.calls.empty()) {
          text += t.content;  // held text that was no call after all
        } else {
          delta["tool_calls"] = tool_calls_json(t.calls, true);
          if (ev.finish == FinishReason::Stop || ev.finish == FinishReason::Length) fr = "tool_calls";
        }
      }
    }
    if (text.empty() && lps.is_null() && !finishing) continue;  // a character still incomplete
    if (!text.empty()) delta["content"] = text;
    json choice = chat ? json{{"index", idx},
                              {"delta", std::move(delta)},
                              {"logprobs", lps},
                              {"finish_reason", fr ? json(fr) : json(nullptr)}}
                       : json{{"index", idx}, {"text", text}, {"logprobs", lps},
                              {"finish_reason", fr ? json(fr) : json(nullptr)}};
    send_chunk(std::move(choice));
  }
  if (out.failed()) {
    cancel_all(job);
    return false;
  }
  if (r.include_usage) {
    json env = chunk_envelope(r, job.id, job.created, json::array());
    env["usage"] = usage_json(pump.usage());
    out.send_data(dump_json(env));
  }
  out.send(kSseDone);
  return !out.failed();
}

}  // namespace rs::server
