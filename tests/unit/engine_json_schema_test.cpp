// Structured outputs: JSON Schema compiled into the byte automaton. The automaton accepts exactly
// the documents the schema allows (required, extra keys, types, integers, enums, nullable, $ref),
// the token mask over the real vocabulary matches brute force, and unsupported keywords are
// refused with the keyword's name.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/json_grammar.h"
#include "engine/json_schema.h"
#include "model/embedded_assets.h"
#include "tokenizer/tokenizer.h"
#include "unit/engine_fake_backend.h"
#include "unit/engine_test_util.h"
#include "unit/json_mask_check.h"

using namespace rs;
using nlohmann::json;

namespace {

const json kPerson = json::parse(R"({
  "type": "object",
  "title": "Person",
  "properties": {
    "name": {"type": "string", "description": "full name"},
    "age": {"type": "integer"},
    "score": {"type": ["number", "null"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "color": {"enum": ["red", "green", "blue"]},
    "level": {"enum": [1, 12, "x", true, null]},
    "address": {"$ref": "#/$defs/Address"},
    "maybe": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]},
    "flag": {"const": false}
  },
  "required": ["name", "age"],
  "additionalProperties": false,
  "$defs": {"Address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                        "required": ["city"]}}
})");

bool complete(const JsonSchema& s, const std::string& doc) {
  JsonState st = JsonState::with_schema(&s);
  return st.feed(doc) && st.done;
}
bool prefix_ok(const JsonSchema& s, const std::string& doc) {
  JsonState st = JsonState::with_schema(&s);
  return st.feed(doc);
}

std::string compile_error(const std::string& schema) {
  try {
    JsonSchema::compile(json::parse(schema));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("unit.engine") {

TEST_CASE("json schema: documents the schema accepts") {
  const auto s = JsonSchema::compile(kPerson);
  for (const char* ok : {R"({"name":"a","age":3})", R"({"age": -3, "name": "b"})",
                         R"({"name":"a","age":0,"score":null,"tags":[],"color":"blue","level":12,"flag":false})",
                         R"({"name":"a","age":1,"score":1.5e3,"tags":["x","y"],"level":1,"maybe":null})",
                         R"({"name":"a","age":1,"level":"x","address":{"city":"P"},"maybe":{"zip":"1","city":"Q"}})",
                         R"({"name":"a","age":1,"level":true})", R"({"name":"a","age":1,"level":null})",
                         "{\n  \"name\" : \"caf\xc3\xa9\\\"\",\n  \"age\" : 7\n}"})
    CHECK_MESSAGE(complete(*s, ok), ok);
}

TEST_CASE("json schema: documents it refuses, at the first byte that breaks it") {
  const auto s = JsonSchema::compile(kPerson);
  for (const char* bad : {R"({"name":"a"})",                   // age is required
                          R"({"name":"a","age":1,"extra":1})",  // no additional properties
                          R"({"name":"a","age":1.5})", R"({"name":"a","age":1e3})", R"({"name":"a","age":"3"})",
                          R"({"name":"a","age":1,"color":"pink"})", R"({"name":"a","age":1,"level":13})",
                          R"({"name":"a","age":1,"level":2})", R"({"name":"a","age":1,"level":false})",
                          R"({"name":"a","name":"b","age":1})",  // the same key twice
                          R"({"name":"a","age":1,"address":{"zip":"1"}})", R"({"name":"a","age":1,"tags":[1]})",
                          R"({"name":"a","age":1,"flag":true})", R"({"name":1,"age":1})", R"([])",
                          R"({"name":"a","age":1,"score":"1"})", R"({"name":"a","age":1,"address":null})"})
    CHECK_MESSAGE(!complete(*s, bad), bad);
  // Keys are held to the names left: after all nine, no ',' may open a tenth.
  CHECK(prefix_ok(*s, R"({"na)"));
  CHECK_FALSE(prefix_ok(*s, R"({"nb)"));
  CHECK_FALSE(prefix_ok(*s, R"({"name\u0041)"));  // escapes never spell a declared name
  const std::string all = R"({"name":"a","age":1,"score":2,"tags":[],"color":"red","level":1,"address":{"city":"c"},)"
                          R"("maybe":null,"flag":false)";
  CHECK(complete(*s, all + "}"));
  CHECK_FALSE(prefix_ok(*s, all + ","));
}

TEST_CASE("json schema: extra keys when allowed, arrays at the top, nullable, any value") {
  auto s = JsonSchema::compile(json::parse(
      R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"));  // extra keys allowed
  CHECK(complete(*s, R"({"a":1,"b":{"c":[1,"x"]}})"));
  CHECK(complete(*s, R"({"ab":"not a","a":2})"));  // a key that starts like a declared one
  CHECK_FALSE(complete(*s, R"({"a":1,"a":2})"));
  CHECK_FALSE(complete(*s, R"({"b":1})"));
  s = JsonSchema::compile(json::parse(R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"}},)"
                                      R"("required":["id"],"additionalProperties":false}})"));
  CHECK(complete(*s, R"([{"id":1},{"id":2}])"));
  CHECK(complete(*s, R"([])"));
  CHECK_FALSE(complete(*s, R"([{"id":1},{}])"));
  CHECK_FALSE(complete(*s, R"({})"));
  s = JsonSchema::compile(json::parse(R"({"type":"object","additionalProperties":false})"));
  CHECK(complete(*s, "{}"));
  CHECK_FALSE(prefix_ok(*s, "{\""));
  s = JsonSchema::compile(json::parse("{}"));  // any value: one object, as JSON mode
  CHECK(complete(*s, R"({"x":[true,null]})"));
  CHECK_FALSE(complete(*s, "[]"));
}

TEST_CASE("json schema: what cannot be held to is refused, naming the keyword") {
  CHECK(compile_error(R"({"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}})").find("'pattern'") !=
        std::string::npos);
  CHECK(compile_error(R"({"type":"object","properties":{"n":{"type":"integer","minimum":0}}})").find("'minimum'") !=
        std::string::npos);
  CHECK(compile_error(R"({"type":"object","oneOf":[]})").find("'oneOf'") != std::string::npos);
  CHECK(compile_error(R"({"type":"string"})").find("top level") != std::string::npos);
  CHECK(compile_error(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/Nope"}}})").find("no definition") !=
        std::string::npos);
  CHECK(compile_error(R"({"type":"object","properties":{"a":{"$ref":"http://x/y"}}})").find("local") !=
        std::string::npos);
  CHECK(compile_error(R"({"$defs":{"N":{"type":"object","properties":{"next":{"$ref":"#/$defs/N"}}}},)"
                      R"("type":"object","properties":{"n":{"$ref":"#/$defs/N"}}})")
            .find("recursive") != std::string::npos);
  CHECK(compile_error(R"({"type":"object","properties":{"a":{}},"required":["b"]})").find("\"b\"") !=
        std::string::npos);
  CHECK(compile_error(R"({"type":"object","properties":{"a":{"anyOf":[{"type":"object"},{"type":"array","items":{}}]}}})")
            .find("anyOf") != std::string::npos);
  CHECK(compile_error(R"({"type":"object","properties":{"a":{"type":"strin"}}})").find("strin") != std::string::npos);
  CHECK(compile_error(R"({"type":"object","properties":{"a\"b":{}}})").find("escaping") != std::string::npos);
  // What a request may make the server build is bounded: $refs that double with every level, and
  // a huge enum, are refused instead of exhausting memory.
  std::string defs = R"({"type":"object","properties":{"a":{"$ref":"#/$defs/D0"}},"$defs":{)";
  for (int i = 0; i < 14; ++i)  // 14 levels stay under the depth limit; 2^14 nodes do not fit
    defs += "\"D" + std::to_string(i) + R"(":{"type":"object","properties":{"x":{"$ref":"#/$defs/D)" +
            std::to_string(i + 1) + R"("},"y":{"$ref":"#/$defs/D)" + std::to_string(i + 1) + "\"}}},";
  defs += R"("D14":{"type":"string"}}})";
  CHECK(compile_error(defs).find("more than") != std::string::npos);
  json big = {{"type", "object"}, {"properties", {{"e", {{"enum", json::array()}}}}}};
  for (int i = 0; i < 40000; ++i) big["properties"]["e"]["enum"].push_back("value number " + std::to_string(i));
  CHECK(compile_error(big.dump()).find("too large") != std::string::npos);
}

TEST_CASE("json schema mask over the DeepSeek-V3 vocabulary equals brute force") {
  auto tok = Tokenizer::from_json(embedded_tokenizer_json(), embedded_tokenizer_config_json());
  const int V = tok->vocab_size();
  JsonMasker masker(*tok, V, tok->eos_ids());
  const auto s = JsonSchema::compile(kPerson);
  for (const std::string prefix : {"", "{\"na", "{\"name\": \"x\", \"", "{\"age\": 1, \"color\": \"r", "{\"level\": 1",
                                   "{\"name\": \"x\\"}) {
    JsonState st = JsonState::with_schema(s.get());
    REQUIRE(st.feed(prefix));
    testing::check_mask_is_brute_force(masker, *tok, st, "prefix '" + prefix + "'");
  }
}

TEST_CASE("wrapped json: one of the prefixes, its alternative's value, the suffix; masks equal brute force") {
  const auto obj = JsonSchema::compile(json::parse(
      R"({"type":"object","properties":{"city":{"enum":["Paris","Oslo"]}},"required":["city"],"additionalProperties":false})"));
  const auto any = JsonSchema::compile(json::parse(R"({"type":"object"})"));
  const auto w = JsonWrapped::make({{"<call>f\n", obj}, {"<call>g\n", any}}, "\n</call>");
  auto complete = [&](const std::string& text) {
    JsonState st = JsonState::with_wrapper(w.get());
    return st.feed(text) && st.done;
  };
  CHECK(complete("<call>f\n{\"city\": \"Oslo\"}\n</call>"));
  CHECK(complete("<call>g\n{\"x\": [1, 2]}\n</call>"));
  CHECK_FALSE(complete("<call>f\n{\"x\": 1}\n</call>"));     // f's schema, not g's
  CHECK_FALSE(complete("<call>h\n{}\n</call>"));              // no such prefix
  CHECK_FALSE(complete("<call>g\n{} \n</call>"));             // the suffix follows at once
  CHECK_FALSE(complete("<call>g\n{}\n</call>x"));             // nothing after it
  CHECK_FALSE(complete("<call>g\n{}\n</cal"));                // not done before the suffix ends
  CHECK_THROWS_AS(JsonWrapped::make({{"ab", any}, {"abc", any}}, ""), Error);
  CHECK_THROWS_AS(JsonWrapped::make({{"abc", any}, {"ab", any}}, ""), Error);

  auto tok = Tokenizer::from_json(embedded_tokenizer_json(), embedded_tokenizer_config_json());
  const int V = tok->vocab_size();
  JsonMasker masker(*tok, V, tok->eos_ids());
  std::vector<uint32_t> mask;
  for (const std::string prefix : {"", "<call>", "<call>f\n{\"ci", "<call>g\n{\"a\": 1}\n</"}) {
    JsonState st = JsonState::with_wrapper(w.get());
    REQUIRE(st.feed(prefix));
    testing::check_mask_is_brute_force(masker, *tok, st, "wrapped prefix '" + prefix + "'");
  }
  JsonState done = JsonState::with_wrapper(w.get());
  REQUIRE(done.feed("<call>g\n{}\n</call>"));
  CHECK(masker.allowed(done, mask) == int(tok->eos_ids().size()));
}

TEST_CASE("json schema through the engine: the output follows the schema whatever the model wants") {
  auto tok = Tokenizer::from_json(embedded_tokenizer_json(), embedded_tokenizer_config_json());
  const auto schema = JsonSchema::compile(json::parse(
      R"({"type":"object","properties":{"answer":{"enum":["yes","no"]},"ok":{"type":"boolean"}},)"
      R"("required":["answer","ok"],"additionalProperties":false})"));
  auto run = [&](const std::string& script) {
    GenerationRequest r;
    r.max_tokens = 200;
    r.json_object = true;
    r.json_schema = schema;
    return testing::run_scripted(*tok, script, r);
  };
  auto c = run(R"({"answer": "no", "ok": true} trailing prose)");
  CHECK(c.text == R"({"answer": "no", "ok": true})");
  CHECK(c.finish == FinishReason::Stop);
  // A model that wants prose: whatever the grammar lets through is a prefix of a valid document,
  // and since the schema leaves finitely many documents, it ends with a complete one.
  c = run("Sure! The answer is maybe, and ok is perhaps.");
  INFO("text '" << c.text << "' finish " << int(c.finish) << " error " << c.error);
  JsonState st = JsonState::with_schema(schema.get());
  CHECK(st.feed(c.text));
  if (c.finish == FinishReason::Stop) {
    CHECK(st.done);
    const json j = json::parse(c.text);
    CHECK((j["answer"] == "yes" || j["answer"] == "no"));
    CHECK(j["ok"].is_boolean());
  } else {
    CHECK(c.finish == FinishReason::Length);
  }
}
}
