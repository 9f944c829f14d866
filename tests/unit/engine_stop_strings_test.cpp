// Stop strings and text deltas through the whole engine, with the real DeepSeek-V3 tokenizer
// and a backend that "generates" a scripted text token by token.
#include <doctest/doctest.h>

#include "engine/engine.h"
#include "model/embedded_assets.h"
#include "tokenizer/tokenizer.h"
#include "unit/engine_fake_backend.h"
#include "unit/engine_test_util.h"

using namespace rs;
using namespace rs::testing;

namespace {

struct TextFixture {
  std::unique_ptr<Tokenizer> tok;
  FakeBackend* fake = nullptr;
  std::unique_ptr<Engine> engine;
  explicit TextFixture(const std::string& script) {
    tok = Tokenizer::from_json(embedded_tokenizer_json(), embedded_tokenizer_config_json());
    auto b = std::make_unique<FakeBackend>(tok->vocab_size(), 64);
    fake = b.get();
    fake->set_script(tok->encode(script, false));
    EngineConfig cfg;
    cfg.max_model_len = 512;
    engine = Engine::create(std::move(b), tok.get(), cfg);
  }
  GenerationRequest request(int max_tokens = 64) {
    GenerationRequest r;
    r.prompt = tok->encode("Tell me a story.", false);
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    return r;
  }
};

const std::string kStory = "Once upon a time, the END came quickly. Then nothing.";

}  // namespace

TEST_SUITE("unit.engine") {

TEST_CASE("text deltas concatenate to the decoded output") {
  TextFixture f(kStory);
  const int n = static_cast<int>(f.tok->encode(kStory, false).size());
  auto c = collect(*f.engine->submit(f.request(n)));
  CHECK(c.choices[0].text == kStory);
  CHECK(c.choices[0].finish == FinishReason::Length);
  CHECK(c.choices[0].events == n);
}

TEST_CASE("a stop string ends the choice, is cut from the text, and never leaks into a delta") {
  TextFixture f(kStory);
  GenerationRequest r = f.request();
  r.stop = {"END"};
  auto h = f.engine->submit(r);
  std::string streamed;
  bool leaked = false;
  while (!h->done()) {
    auto ev = h->next(std::chrono::milliseconds(50));
    if (!ev) continue;
    streamed += ev->text;
    // What was sent can never be taken back: every prefix sent must prefix the final text.
    leaked |= std::string("Once upon a time, the ").rfind(streamed, 0) != 0;
    if (ev->finish != FinishReason::None) CHECK(ev->finish == FinishReason::Stop);
  }
  CHECK(streamed == "Once upon a time, the ");
  CHECK_FALSE(leaked);
}

TEST_CASE("include_stop_str_in_output keeps the stop string; several stop strings: the first to appear") {
  TextFixture f(kStory);
  GenerationRequest r = f.request();
  r.stop = {"quickly", "END"};
  r.include_stop_str_in_output = true;
  auto c = collect(*f.engine->submit(r));
  CHECK(c.choices[0].text == "Once upon a time, the END");
  CHECK(c.choices[0].finish == FinishReason::Stop);
}

TEST_CASE("a stop string split over several tokens is still found") {
  TextFixture f(kStory);
  GenerationRequest r = f.request();
  r.stop = {"time, the E"};  // spans several tokens
  auto c = collect(*f.engine->submit(r));
  CHECK(c.choices[0].text == "Once upon a ");
}

TEST_CASE("a stop string that never appears: the held-back tail is flushed at max_tokens") {
  TextFixture f(kStory);
  const int n = static_cast<int>(f.tok->encode(kStory, false).size());
  GenerationRequest r = f.request(n);
  r.stop = {"nothing at all"};
  auto c = collect(*f.engine->submit(r));
  CHECK(c.choices[0].text == kStory);
  CHECK(c.choices[0].finish == FinishReason::Length);
}

TEST_CASE("min_tokens: stop strings count only from the min_tokens-th token on") {
  TextFixture f(kStory);
  const int n = static_cast<int>(f.tok->encode(kStory, false).size());
  const int upto_end = static_cast<int>(f.tok->encode("Once upon a time, the END", false).size());
  GenerationRequest r = f.request(n);
  r.stop = {"END"};
  r.min_tokens = upto_end + 1;  // END is complete before the check starts: it passes through
  auto c = collect(*f.engine->submit(r));
  CHECK(c.choices[0].text == kStory);
  CHECK(c.choices[0].finish == FinishReason::Length);
  r.min_tokens = upto_end;  // the token completing END is the first one checked
  c = collect(*f.engine->submit(r));
  CHECK(c.choices[0].text == "Once upon a time, the ");
  CHECK(c.choices[0].finish == FinishReason::Stop);
}

TEST_CASE("the tokenizer's eos ends generation and adds no text") {
  TextFixture f("ab");
  auto eos = f.tok->eos_ids();
  REQUIRE_FALSE(eos.empty());
  auto script = f.tok->encode("Hi there", false);
  script.push_back(eos[0]);
  f.fake->set_script(script);
  auto c = collect(*f.engine->submit(f.request()));
  CHECK(c.choices[0].text == "Hi there");
  CHECK(c.choices[0].finish == FinishReason::Stop);
  CHECK(c.choices[0].tokens.back() == eos[0]);
}

}
