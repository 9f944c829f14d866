// JSON mode: the byte automaton accepts exactly JSON objects, and the token mask built from it
// over the real DeepSeek-V3 vocabulary allows a token iff its bytes continue the object.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/json_grammar.h"
#include "model/embedded_assets.h"
#include "tokenizer/tokenizer.h"
#include "unit/engine_fake_backend.h"
#include "unit/engine_test_util.h"
#include "unit/json_mask_check.h"

using namespace rs;

namespace {
bool accepts_prefix(const std::string& s) {
  JsonState st;
  return st.feed(s);
}
bool complete(const std::string& s) {
  JsonState st;
  return st.feed(s) && st.done;
}
}  // namespace

TEST_SUITE("unit.engine") {

TEST_CASE("json grammar: objects of every kind of value, whitespace, escapes, numbers") {
  for (const char* ok : {R"({})", R"( {"a":1})", R"({"a": [1, -2.5e+3, 0, 0.25, 1E9], "b": {"c": null}})",
                         R"({"s": "q\"\\\/\b\f\n\r\t\u00e9 é"})", R"({"t": true, "f": false, "n": null})",
                         R"({"nested": [[[]], {}, [{"x": []}]]})", "{\n  \"k\" :\t\"v\"\n}"})
    CHECK_MESSAGE(complete(ok), ok);
  // Valid prefixes that are not complete yet.
  for (const char* pre : {"{", R"({"a)", R"({"a":)", R"({"a": -)", R"({"a": 1.)", R"({"a": [1,)", R"({"a": tr)",
                          R"({"a": "\u00)"})
    CHECK_MESSAGE((accepts_prefix(pre) && !complete(pre)), pre);
}

TEST_CASE("json grammar: rejects what no JSON object can continue with") {
  for (const char* bad : {"[]", "1", R"("s")", "{a:1}", R"({"a" 1})", R"({"a":1,})", R"({"a":01})", R"({"a":1.e5})",
                          R"({"a":-})", R"({"a":+1})", R"({"a":[1,]})", R"({"a":tru})", R"({"a":"\x"})",
                          R"({"a":"\u12g4"})", "{\"a\":\"tab\there\"}", R"({"a":1]})", R"({"a":[1}})", R"({}})",
                          R"({} )", "{\"a\":1}\n"})
    CHECK_MESSAGE(!complete(bad), bad);
  CHECK_FALSE(accepts_prefix("{" + std::string(17, ' ')));  // whitespace is capped
  std::string deep = "{\"a\":";
  for (int i = 0; i < kJsonMaxDepth - 1; ++i) deep += "[";
  CHECK(accepts_prefix(deep));
  CHECK_FALSE(accepts_prefix(deep + "["));  // depth 64 is the limit
  // Unescaped control bytes may not appear in strings; raw UTF-8 bytes may.
  CHECK_FALSE(accepts_prefix(std::string("{\"a") + char(0x01)));
  CHECK(accepts_prefix("{\"caf\xc3\xa9"));
}

TEST_CASE("json mask over the DeepSeek-V3 vocabulary: a token is allowed iff its bytes continue the object") {
  auto tok = Tokenizer::from_json(embedded_tokenizer_json(), embedded_tokenizer_config_json());
  const int V = tok->vocab_size();
  const std::vector<int32_t> eos = tok->eos_ids();
  JsonMasker masker(*tok, V, eos);
  std::vector<uint32_t> mask;
  auto bit = [&](int32_t id) { return (mask[size_t(id) / 32] >> (id % 32) & 1u) != 0; };
  for (const std::string prefix : {"", "{\"na", "{\"a\": [1", "{\"a\": \"x\\", "{\"a\": tr"}) {
    JsonState st;
    REQUIRE(st.feed(prefix));
    mask = testing::check_mask_is_brute_force(masker, *tok, st, "prefix '" + prefix + "'");
    for (int32_t e : eos) CHECK_FALSE(bit(e));  // not before the object is complete
  }
  JsonState done;
  REQUIRE(done.feed("{}"));
  CHECK(masker.allowed(done, mask) == int(eos.size()));
  for (int32_t e : eos) CHECK(bit(e));
}

TEST_CASE("json mode through the engine: a scripted object ends the choice when it closes; any script stays JSON") {
  auto tok = Tokenizer::from_json(embedded_tokenizer_json(), embedded_tokenizer_config_json());
  auto run = [&](const std::string& script, int max_tokens) {
    GenerationRequest r;
    r.max_tokens = max_tokens;
    r.json_object = true;
    return testing::run_scripted(*tok, script, r);
  };
  // The model "wants" to write an object and then keep talking: the choice ends at the brace.
  auto c = run("{\"city\": \"Paris\", \"temp\": [21.5, -3]} and more text", 64);
  CHECK(c.text == "{\"city\": \"Paris\", \"temp\": [21.5, -3]}");
  CHECK(c.finish == FinishReason::Stop);
  // A model that writes prose: every token it gets is one the grammar allows.
  c = run("Sure! Here is the answer you asked for.", 40);
  JsonState st;
  CHECK(st.feed(c.text));
  INFO("tokens " << c.tokens.size() << " text '" << c.text << "' error " << c.error << " finish " << int(c.finish));
  CHECK(c.text.find('{') != std::string::npos);
  if (c.finish == FinishReason::Stop) CHECK(st.done);
  else CHECK(c.finish == FinishReason::Length);
}
}

