#pragma once
// tokenizer.json "normalizer": NFC, NFD, Replace, Prepend, Strip and Sequence of them.
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace rs {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// nullptr for a JSON null; throws rs::Error naming the type for one this tokenizer does not implement.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec);

// Canonical (de)composition, exposed for tests.
std::string nfd(const std::string& text);
std::string nfc(const std::string& text);

}  // namespace rs
