// Seeded random mutations of the real chat templates and of the messages they render: every
// outcome must be a rendered string or an rs::Error, never a crash, another exception or a hang.
#include <doctest/doctest.h>

#include <chrono>
#include <random>

#include "common/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer_test_util.h"

using ojson = nlohmann::ordered_json;

namespace {
const char* kFragments[] = {"{%", "%}", "{{", "}}", "{#", "#}", "{%-", "-%}", "(", ")", "[", "]", "{", "}", "|", "'", "\"", "-",
                            "+", "*", "**", "//", "~", ".", ",", ":", "=", "==", " if ", " else ", " for ", " in ", " not ",
                            " is ", "endfor", "endif", "loop", "loop.index0", "namespace(", "messages", "message['content']",
                            "tojson", "length", "trim", "[::-1]", "[-1]", "raise_exception(", "range(50)", "none", "1e309",
                            "99999999999999999999", "\\", "\n", " "};

std::string mutate_template(std::string t, std::mt19937& rng) {
  const int edits = 1 + rng() % 4;
  for (int e = 0; e < edits && !t.empty(); ++e) {
    const size_t a = rng() % t.size();
    const size_t len = 1 + rng() % 12;
    switch (rng() % 4) {
      case 0: t.erase(a, len); break;
      case 1: t.insert(a, kFragments[rng() % std::size(kFragments)]); break;
      case 2: t.insert(a, t.substr(rng() % t.size(), len)); break;
      default: std::swap(t[a], t[rng() % t.size()]); break;
    }
  }
  return t;
}

ojson random_value(std::mt19937& rng, int depth) {
  switch (rng() % (depth > 2 ? 5 : 7)) {
    case 0: return nullptr;
    case 1: return static_cast<int>(rng() % 100) - 50;
    case 2: return rng() % 2 == 0;
    case 3: return 1.5;
    case 4: return std::string("text ") + std::to_string(rng() % 10) + (rng() % 2 ? "</think>" : "<tool_response>");
    case 5: {
      ojson a = ojson::array();
      for (unsigned i = 0; i < rng() % 3; ++i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      ojson o = ojson::object();
      o["name"] = "f";
      o["arguments"] = random_value(rng, depth + 1);
      return o;
    }
  }
}

ojson random_messages(std::mt19937& rng) {
  static const char* roles[] = {"system", "user", "assistant", "tool", "other"};
  ojson msgs = ojson::array();
  const int n = rng() % 6;
  for (int i = 0; i < n; ++i) {
    ojson m = ojson::object();
    if (rng() % 10) m["role"] = roles[rng() % std::size(roles)];
    m["content"] = rng() % 4 ? ojson(std::string("hello ") + std::to_string(i)) : random_value(rng, 0);
    if (rng() % 5 == 0) m["tool_calls"] = ojson::array({ojson{{"type", "function"}, {"function", random_value(rng, 1)}}});
    if (rng() % 7 == 0) m["reasoning_content"] = random_value(rng, 1);
    msgs.push_back(m);
  }
  return msgs;
}
}  // namespace

TEST_SUITE("unit.fuzz_template") {
  TEST_CASE("mutated real templates and messages: rendered or rs::Error, bounded time") {
    std::vector<std::string> templates;
    for (const char* name : {"deepseek_v3", "qwen3", "llama3"}) {
      const auto cfg = nlohmann::json::parse(rs::test::read_text_file(rs::test::tokenizer_dir(name) + "/tokenizer_config.json"));
      templates.push_back(cfg["chat_template"].get<std::string>());
    }
    std::mt19937 rng(20261129);
    int rendered = 0, errors = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int iter = 0; iter < 20000; ++iter) {
      const std::string& base = templates[iter % templates.size()];
      const std::string src = iter % 3 == 0 ? base : mutate_template(base, rng);
      ojson ctx = {{"messages", random_messages(rng)}, {"add_generation_prompt", rng() % 2 == 0}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
      if (rng() % 3 == 0) ctx["tools"] = ojson::array({random_value(rng, 1)});
      try {
        rs::ChatTemplate t(src);
        t.render(ctx);
        ++rendered;
      } catch (const rs::Error&) {
        ++errors;
      } catch (const std::exception& e) {
        CAPTURE(src);
        CAPTURE(ctx.dump());
        FAIL("non-rs::Error exception: " << std::string(e.what()));
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE("fuzz: " << rendered << " rendered, " << errors << " errors in " << s << " s");
    CHECK(rendered > 100);
    CHECK(errors > 100);
    CHECK(s < 20.0);
  }
}
