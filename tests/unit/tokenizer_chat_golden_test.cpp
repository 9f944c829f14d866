// Chat templates of the real tokenizers rendered exactly like transformers' apply_chat_template
// (tests/fixtures/tokenizer/*.json: text and ids; error cases must fail too).
#include <doctest/doctest.h>

#include "tokenizer_test_util.h"

using rs::test::golden;
using rs::test::real_tokenizer;
using ojson = nlohmann::ordered_json;

namespace {
void check_chat(const std::string& name, const std::string& file) {
  const auto g = golden(file);
  const auto& tok = real_tokenizer(name);
  REQUIRE(tok.has_chat_template());
  int rendered = 0;
  for (const auto& c : g["chat"]) {
    CAPTURE(c["messages"].dump());
    CAPTURE(c["add_generation_prompt"].get<bool>());
    const ojson extra = c.value("extra", ojson::object());
    if (c.contains("error")) {
      CHECK_THROWS_AS(tok.apply_chat_template(c["messages"], c["add_generation_prompt"].get<bool>(), &extra), rs::Error);
      continue;
    }
    const std::string text = tok.apply_chat_template(c["messages"], c["add_generation_prompt"].get<bool>(), &extra);
    CHECK(text == c["text"].get<std::string>());
    CHECK(tok.encode(text, false) == c["ids"].get<std::vector<int32_t>>());
    ++rendered;
  }
  CHECK(rendered >= 20);
}
}  // namespace

TEST_SUITE("golden.tokenizer") {
  TEST_CASE("deepseek_v3 chat template matches transformers") { check_chat("deepseek_v3", "tokenizer_deepseek_v3.json"); }
  TEST_CASE("qwen3 chat template matches transformers") { check_chat("qwen3", "tokenizer_qwen3.json"); }
  TEST_CASE("llama3 chat template matches transformers") { check_chat("llama3", "tokenizer_llama3.json"); }
  TEST_CASE("deepseek_v3 shared goldens: chat text") {
    const auto g = golden("tokenizer_deepseek_v3_shared.json");
    const auto& tok = real_tokenizer("deepseek_v3");
    for (const auto& c : g["chat"]) {
      CAPTURE(c["messages"].dump());
      CHECK(tok.apply_chat_template(c["messages"], c["add_generation_prompt"].get<bool>()) == c["text"].get<std::string>());
    }
  }
}
