// UTF-8 handling, streaming detokenization, special-token accessors and load errors.
#include <doctest/doctest.h>

#include <algorithm>

#include <fstream>

#include <filesystem>

#include <random>

#include "common/error.h"
#include "model/embedded_assets.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

using rs::test::real_tokenizer;

TEST_SUITE("unit.tokenizer") {
  TEST_CASE("is_valid_utf8 rejects overlongs, surrogates, out-of-range and truncation") {
    CHECK(rs::is_valid_utf8(""));
    CHECK(rs::is_valid_utf8("plain ascii"));
    CHECK(rs::is_valid_utf8("caf\xC3\xA9 \xE6\xB7\xB1 \xF0\x9F\x98\x80"));
    CHECK(rs::is_valid_utf8("\xF4\x8F\xBF\xBF"));             // U+10FFFF
    CHECK_FALSE(rs::is_valid_utf8("\xC0\xAF"));               // overlong '/'
    CHECK_FALSE(rs::is_valid_utf8("\xE0\x80\xAF"));           // overlong
    CHECK_FALSE(rs::is_valid_utf8("\xED\xA0\x80"));           // surrogate U+D800
    CHECK_FALSE(rs::is_valid_utf8("\xF4\x90\x80\x80"));       // U+110000
    CHECK_FALSE(rs::is_valid_utf8("\xE6\xB7"));               // truncated
    CHECK_FALSE(rs::is_valid_utf8("\x80"));                   // stray continuation
    CHECK_FALSE(rs::is_valid_utf8("\xFF"));
    CHECK_FALSE(rs::is_valid_utf8(std::string("a\xC3", 2)));
  }

  TEST_CASE("lossy conversion replaces each maximal invalid subpart once (Rust from_utf8_lossy)") {
    CHECK(rs::utf8::to_valid_lossy("a\xFF" "b") == "a\xEF\xBF\xBD" "b");
    CHECK(rs::utf8::to_valid_lossy("\xE6\xB7") == "\xEF\xBF\xBD");             // one truncated sequence -> one U+FFFD
    CHECK(rs::utf8::to_valid_lossy("\xE6\xB7x") == "\xEF\xBF\xBDx");
    CHECK(rs::utf8::to_valid_lossy("\xF0\x9F\x98") == "\xEF\xBF\xBD");
    CHECK(rs::utf8::to_valid_lossy("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // C0 is never valid
  }

  TEST_CASE("encode rejects invalid UTF-8 with rs::Error naming the byte") {
    const auto& tok = real_tokenizer("deepseek_v3");
    CHECK_THROWS_WITH_AS(tok.encode("ok\xFFno", false), doctest::Contains("invalid UTF-8"), rs::Error);
    CHECK_THROWS_WITH_AS(tok.encode("ab\xED\xA0\x80", false), doctest::Contains("byte 2"), rs::Error);
  }

  TEST_CASE("IncrementalDecoder never emits broken UTF-8 and matches decode") {
    for (const char* name : {"deepseek_v3", "qwen3", "llama3"}) {
      const auto& tok = real_tokenizer(name);
      const std::string text = "emoji 😀👍🏽 深度求索 ñandú — ÀÉÎ 안녕하세요 <｜User｜> end";
      const auto ids = tok.encode(text, false);
      rs::IncrementalDecoder dec(tok, false);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = dec.push(id);
        CHECK(rs::is_valid_utf8(piece));
        streamed += piece;
      }
      streamed += dec.flush();
      CHECK(streamed == tok.decode(ids, false));
    }
  }

  TEST_CASE("IncrementalDecoder holds a split character, and flush replaces a dangling one") {
    const auto& tok = real_tokenizer("deepseek_v3");
    // Byte-level tokens for the two halves of U+1F600's 4 bytes.
    const auto first = tok.token_to_id("\xC3\xB0\xC5\x81\xC4\xBA");  // "ðŁĺ" = F0 9F 98
    const auto second = tok.token_to_id("\xC4\xA2");               // "Ģ" = 80
    REQUIRE(first);
    REQUIRE(second);
    rs::IncrementalDecoder dec(tok, false);
    CHECK(dec.push(*first).empty());
    CHECK(dec.push(*second) == "\xF0\x9F\x98\x80");
    CHECK(dec.push(*first).empty());
    CHECK(dec.flush() == "\xEF\xBF\xBD");
  }

  TEST_CASE("IncrementalDecoder skips special tokens when asked") {
    const auto& tok = real_tokenizer("deepseek_v3");
    rs::IncrementalDecoder dec(tok, true);
    CHECK(dec.push(*tok.bos_id()).empty());
    CHECK(dec.push(tok.encode("hi", false)[0]) == "hi");
  }

  TEST_CASE("special tokens and config accessors") {
    const auto& ds = real_tokenizer("deepseek_v3");
    CHECK(ds.bos_id() == 0);
    CHECK(ds.eos_ids() == std::vector<int32_t>{1});
    CHECK(ds.add_bos_token());
    CHECK(ds.is_special(0));
    CHECK_FALSE(ds.is_special(100));
    CHECK(ds.vocab_size() == 128815);
    CHECK(ds.token_bytes(ds.encode(" world", false)[0]) == " world");
    const auto& qw = real_tokenizer("qwen3");
    CHECK_FALSE(qw.bos_id());
    CHECK(qw.eos_ids() == std::vector<int32_t>{*qw.token_to_id("<|im_end|>")});
    CHECK_FALSE(qw.add_bos_token());
    const auto& ll = real_tokenizer("llama3");
    CHECK(ll.bos_id() == 128000);
    CHECK_FALSE(ll.add_bos_token());  // PreTrainedTokenizerFast + ByteLevel post-processor: the template adds it
  }

  TEST_CASE("embedded tokenizer loads with from_json and matches the file") {
    const auto tok = rs::Tokenizer::from_json(rs::embedded_tokenizer_json(), rs::embedded_tokenizer_config_json());
    CHECK(tok->encode("Hello world", true) == std::vector<int32_t>{0, 19923, 2058});
  }

  TEST_CASE("load errors name the file and the field") {
    CHECK_THROWS_WITH_AS(rs::Tokenizer::from_json("{not json", ""), doctest::Contains("tokenizer.json"), rs::Error);
    CHECK_THROWS_WITH_AS(rs::Tokenizer::from_json(R"({"model": {"type": "Unigram", "vocab": {}}})", ""), doctest::Contains("Unigram"), rs::Error);
    CHECK_THROWS_WITH_AS(rs::Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})", ""),
                         doctest::Contains("merge #0"), rs::Error);
    CHECK_THROWS_WITH_AS(
        rs::Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(["}, "behavior": "Isolated"}})", ""),
        doctest::Contains("regex"), rs::Error);
    CHECK_THROWS_WITH_AS(rs::Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": {"type": "Lowercase"}})", ""),
                         doctest::Contains("Lowercase"), rs::Error);
    CHECK_THROWS_WITH_AS(rs::Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", R"({"bos_token": "<s>"})"),
                         doctest::Contains("bos_token"), rs::Error);
    CHECK_THROWS_AS(rs::Tokenizer::from_dir("/nonexistent-dir"), rs::Error);
    CHECK_FALSE(rs::Tokenizer::dir_has_tokenizer("/nonexistent-dir"));
    CHECK(rs::Tokenizer::dir_has_tokenizer(rs::test::tokenizer_dir("qwen3")));
  }

  TEST_CASE("from_dir with a chat_template override keeps generation_config's eos ids") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / "rs-tok-override";
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(fs::path(rs::test::tokenizer_dir("llama3")) / "tokenizer.json", dir / "tokenizer.json");
    std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [128001, 128009]})";
    // No tokenizer_config.json at all: the override alone provides the template.
    const auto tok = rs::Tokenizer::from_dir(dir.string(), std::string("X{{ messages[0]['content'] }}"));
    CHECK(tok->apply_chat_template(nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}}), false) == "Xhi");
    const auto eos = tok->eos_ids();
    CHECK(std::find(eos.begin(), eos.end(), 128009) != eos.end());
    fs::remove_all(dir);
  }

  TEST_CASE("a tokenizer without chat_template says so") {
    const auto tok = rs::Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", "");
    CHECK_FALSE(tok->has_chat_template());
    CHECK_THROWS_AS(tok->apply_chat_template(nlohmann::json::array(), true), rs::Error);
  }

  TEST_CASE("NFC composes, reorders marks and handles Hangul") {
    CHECK(rs::nfc("e\xCC\x81") == "\xC3\xA9");                              // e + acute -> é
    CHECK(rs::nfc("\xE2\x84\xAB") == "\xC3\x85");                           // Angstrom sign -> Å
    CHECK(rs::nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8") == "\xEA\xB0\x81");  // jamo -> 각
    CHECK(rs::nfc("a\xCC\x82\xCC\xA3") == rs::nfc("a\xCC\xA3\xCC\x82"));    // canonical order
    CHECK(rs::nfd("\xC3\xA9") == "e\xCC\x81");
  }

  TEST_CASE("encode/decode round-trips random valid UTF-8") {
    const auto& tok = real_tokenizer("llama3");
    std::mt19937 rng(42);
    for (int n = 0; n < 200; ++n) {
      std::string s;
      const int len = rng() % 40;
      for (int i = 0; i < len; ++i) {
        char32_t cp;
        switch (rng() % 4) {
          case 0: cp = 0x20 + rng() % 0x5F; break;
          case 1: cp = 0xA0 + rng() % 0x700; break;
          case 2: cp = 0x3000 + rng() % 0x6000; break;
          default: cp = 0x1F300 + rng() % 0x300; break;
        }
        rs::utf8::append(s, cp);
      }
      CAPTURE(s);
      CHECK(tok.decode(tok.encode(s, false), false) == s);
    }
  }
}
