#pragma once
// Test doubles for the server's unit tests: a byte-level tokenizer (one token per byte, so
// expected texts are computable by hand) and an in-process Server over a real Engine whose
// backend is the engine tests' FakeBackend. The real tokenizer and model are covered by the
// end-to-end tests (tests/e2e) against the binary.
#include <httplib.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/metrics.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"
#include "unit/engine_fake_backend.h"

namespace rs::testing {

// ids 0..255: one printable ASCII character each (32 + id % 95), so whatever the fake model
// emits decodes to valid UTF-8 and survives JSON unchanged; 256: <bos>; 257: <eos>.
class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int kBos = 256, kEos = 257, kVocab = 258;
  static int32_t id_of(unsigned char c) { return c >= 32 && c < 127 ? int32_t(c - 32) : int32_t(c); }
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(kBos);
    for (unsigned char c : text) ids.push_back(id_of(c));
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids)
      if (id < 256 || !skip_special) s += token_bytes(id);
    return s;
  }
  std::string token_bytes(int32_t id) const override {
    if (id >= 0 && id < 256) return std::string(1, char(32 + id % 95));
    return id == kBos ? "<bos>" : id == kEos ? "<eos>" : "";
  }
  std::optional<int32_t> token_to_id(std::string_view t) const override {
    if (t.size() == 1) return id_of(static_cast<unsigned char>(t[0]));
    if (t == "<bos>") return kBos;
    if (t == "<eos>") return kEos;
    return std::nullopt;
  }
  bool is_special(int32_t id) const override { return id >= 256; }
  int vocab_size() const override { return kVocab; }
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::vector<int32_t> eos_ids() const override { return {kEos}; }
  bool add_bos_token() const override { return true; }
  std::string apply_chat_template(const nlohmann::json& messages, bool add_generation_prompt,
                                  const nlohmann::json*) const override {
    std::string s = "<bos>";
    for (const auto& m : messages)
      s += m.at("role").get<std::string>() + ": " +
           (m.at("content").is_string() ? m.at("content").get<std::string>() : "") + "\n";
    if (add_generation_prompt) s += "assistant:";
    return s;
  }
  bool has_chat_template() const override { return true; }
};

struct ServerHarness {
  FakeBackend* backend = nullptr;  // owned by the engine
  std::unique_ptr<ByteTokenizer> tokenizer = std::make_unique<ByteTokenizer>();
  std::unique_ptr<Engine> engine;
  std::unique_ptr<server::Server> server;
  int port = 0;

  explicit ServerHarness(server::ServerConfig cfg = {}, EngineConfig ecfg = {}, bool ready = true,
                         int kv_blocks = 64) {
    auto b = std::make_unique<FakeBackend>(ByteTokenizer::kVocab, kv_blocks);
    backend = b.get();
    if (ecfg.max_model_len == 0) ecfg.max_model_len = 512;
    engine = Engine::create(std::move(b), tokenizer.get(), ecfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    server = std::make_unique<server::Server>(cfg, "test-model");
    port = server->bind();
    server->start();
    engine->set_observer(&server->metrics());
    if (ready) make_ready();
  }
  void make_ready() {
    server::ServedModel m;
    m.engine = engine.get();
    m.ctx.served_names = {"test-model", "alias"};
    m.ctx.tokenizer = tokenizer.get();
    m.ctx.max_model_len = engine->max_model_len();
    m.ctx.vocab_size = ByteTokenizer::kVocab;
    m.description = "fake";
    server->set_ready(std::move(m));
  }
  ~ServerHarness() {
    server->begin_shutdown();
    engine->shutdown(std::chrono::milliseconds(0));
    server->wait();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(std::chrono::seconds(20));
    return c;
  }
};

inline nlohmann::json parse(const std::string& s) { return nlohmann::json::parse(s); }

}  // namespace rs::testing
