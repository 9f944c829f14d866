// Pipelines none of the three real tokenizers declares (added-token lstrip/rstrip/single_word/
// normalized, Replace normalizer, Digits, ByteLevel's own regex with add_prefix_space, every Split
// behavior and invert, merges without ignore_merges), built by patching a real tokenizer.json the
// same way gen_goldens.py did (fixtures/tokenizer/variants.json) and compared with HF tokenizers.
#include <doctest/doctest.h>

#include "tokenizer_test_util.h"

using ojson = nlohmann::ordered_json;

namespace {
ojson apply_patch(ojson tj, const ojson& patch) {
  const auto set = patch.value("set", ojson::object()), set_model = patch.value("set_model", ojson::object());
  for (const auto& [k, v] : set.items()) tj[k] = v;
  for (const auto& [k, v] : set_model.items()) tj["model"][k] = v;
  const auto flags = patch.value("added_flags", ojson::object());
  for (auto& a : tj["added_tokens"])
    if (flags.contains(a["content"].get<std::string>()))
      for (const auto& [k, v] : flags[a["content"].get<std::string>()].items()) a[k] = v;
  const auto added_new = patch.value("added_new", ojson::array());
  for (const auto& a : added_new) tj["added_tokens"].push_back(a);
  return tj;
}
}  // namespace

TEST_SUITE("golden.tokenizer") {
  TEST_CASE("pipeline variants match HF tokenizers") {
    const auto spec = rs::test::golden("variants.json");
    const auto results = rs::test::golden("tokenizer_variants.json");
    REQUIRE(results["variants"].size() == spec["variants"].size());
    for (size_t v = 0; v < spec["variants"].size(); ++v) {
      const auto& vs = spec["variants"][v];
      const auto& vr = results["variants"][v];
      const std::string name = vs["name"].get<std::string>();
      CAPTURE(name);
      REQUIRE(vr["name"] == vs["name"]);
      const auto base = ojson::parse(rs::test::read_text_file(rs::test::tokenizer_dir(vs["base"].get<std::string>()) + "/tokenizer.json"));
      const auto tok = rs::Tokenizer::from_json(apply_patch(base, vs["patch"]).dump(), "");
      for (const auto& c : vr["cases"]) {
        const std::string text = c["text"].get<std::string>();
        CAPTURE(text);
        const auto ids = tok->encode(text, false);
        CHECK(ids == c["ids"].get<std::vector<int32_t>>());
        CHECK(tok->decode(ids, false) == c["decoded"].get<std::string>());
        CHECK(tok->decode(ids, true) == c["decoded_skip_special"].get<std::string>());
      }
    }
  }
}
