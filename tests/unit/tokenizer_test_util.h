#pragma once
// Shared by the tokenizer tests: the real tokenizers fetched by third_party/setup.sh, loaded once.
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace rs::test {

inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path + " (run third_party/setup.sh)");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string tokenizer_dir(const std::string& name) { return std::string(RS_DEPS_DIR) + "/tokenizer-" + name; }

// One tokenizer per name for the whole test binary (loading a 10 MB tokenizer.json takes ~0.5 s).
inline const Tokenizer& real_tokenizer(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& t = cache[name];
  if (!t) t = Tokenizer::from_dir(tokenizer_dir(name));
  return *t;
}

inline nlohmann::ordered_json golden(const std::string& file) {
  return nlohmann::ordered_json::parse(read_text_file(std::string(RS_FIXTURES_DIR) + "/tokenizer/" + file));
}

}  // namespace rs::test
