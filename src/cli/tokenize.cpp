// rackserve tokenize: text (stdin, verbatim) -> ids, a chat (--chat) -> rendered text and ids,
// or --bench FILE: encoding throughput on one core.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "common/error.h"
#include "common/read_file.h"
#include "model/embedded_assets.h"
#include "tokenizer/tokenizer.h"

namespace rs::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer_dir, chat_file, bench_file;
  bool add_special_tokens = false, add_generation_prompt = false;
  double bench_seconds = 3.0;
};

std::unique_ptr<Tokenizer> load(const std::string& dir) {
  if (dir.empty()) return Tokenizer::from_json(embedded_tokenizer_json(), embedded_tokenizer_config_json());
  return Tokenizer::from_dir(dir);
}

std::string read_all(std::istream& in) { return std::string(std::istreambuf_iterator<char>(in), {}); }

void print_line(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
}

void run_chat(const Tokenizer& tok, const TokenizeArgs& a) {
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(read_text_file(a.chat_file));
  } catch (const nlohmann::json::exception& e) {
    throw Error(a.chat_file + ": invalid JSON: " + e.what());
  }
  // Either the messages array, or {"messages": [...], <template variables such as tools>}.
  nlohmann::ordered_json messages, extra = nlohmann::ordered_json::object();
  if (doc.is_array()) {
    messages = doc;
  } else if (doc.is_object() && doc.contains("messages")) {
    messages = doc["messages"];
    for (const auto& [k, v] : doc.items())
      if (k != "messages") extra[k] = v;
  } else {
    throw Error(a.chat_file + ": expected an array of messages or an object with 'messages'");
  }
  const std::string text = tok.apply_chat_template(messages, a.add_generation_prompt, &extra);
  nlohmann::ordered_json out;
  out["text"] = text;
  out["ids"] = tok.encode(text, false);
  print_line(out.dump());
}

void run_bench(const Tokenizer& tok, const TokenizeArgs& a) {
  const std::string text = read_text_file(a.bench_file);
  if (text.empty()) throw Error(a.bench_file + " is empty");
  // One warm-up pass (fills the BPE word cache as a running server's would be), then timed passes.
  size_t ntokens = tok.encode(text, false).size();
  std::vector<double> mbps;
  const auto t_end = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.bench_seconds);
  do {
    const auto t0 = std::chrono::steady_clock::now();
    ntokens = tok.encode(text, false).size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    mbps.push_back(static_cast<double>(text.size()) / s / 1e6);
  } while (std::chrono::steady_clock::now() < t_end || mbps.size() < 3);
  std::sort(mbps.begin(), mbps.end());
  // Cold: a fresh tokenizer has an empty cache; measured once on a copy of the text's first pass.
  auto cold_tok = load(a.tokenizer_dir);
  const auto c0 = std::chrono::steady_clock::now();
  cold_tok->encode(text, false);
  const double cold = static_cast<double>(text.size()) / std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count() / 1e6;
  std::printf("bytes %zu tokens %zu passes %zu  encode MB/s: median %.2f  min %.2f  max %.2f  cold-cache %.2f\n", text.size(),
              ntokens, mbps.size(), mbps[mbps.size() / 2], mbps.front(), mbps.back(), cold);
}
}  // namespace

void add_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "Text from stdin to token ids (JSON), or render a chat with --chat");
  cmd->add_option("--tokenizer", args->tokenizer_dir, "Folder with tokenizer.json (+ tokenizer_config.json); default: the embedded DeepSeek-V3 tokenizer");
  cmd->add_flag("--add-special-tokens", args->add_special_tokens, "Add BOS/EOS as the tokenizer config says");
  cmd->add_option("--chat", args->chat_file, "JSON file: messages array, or {\"messages\": [...], \"tools\": [...], ...}");
  cmd->add_flag("--add-generation-prompt", args->add_generation_prompt, "With --chat: end with the assistant prompt");
  cmd->add_option("--bench", args->bench_file, "Measure encoding throughput (one thread) on this file");
  cmd->add_option("--bench-seconds", args->bench_seconds, "Duration of --bench");
  cmd->callback([args] {
    auto tok = load(args->tokenizer_dir);
    if (!args->bench_file.empty()) return run_bench(*tok, *args);
    if (!args->chat_file.empty()) return run_chat(*tok, *args);
    const std::string text = read_all(std::cin);
    print_line(nlohmann::json(tok->encode(text, args->add_special_tokens)).dump());
  });
}

}  // namespace rs::cli
