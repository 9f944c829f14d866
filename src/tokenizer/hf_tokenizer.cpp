#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "common/read_file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace rs {
namespace {
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// tokenizer_config.json writes special tokens as a string, {"content": ...} or null.
std::optional<std::string> token_content(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

bool declares_byte_level(const json& decoder) {
  if (!decoder.is_object()) return false;
  if (decoder.value("type", "") == "ByteLevel") return true;
  if (decoder.value("type", "") == "Sequence" && decoder.contains("decoders"))
    for (const auto& d : decoder["decoders"])
      if (declares_byte_level(d)) return true;
  return false;
}

AddedToken parse_added(const json& a, const std::string& where) {
  AddedToken t;
  if (!a.contains("content") || !a["content"].is_string()) throw Error(where + ": added token without string content");
  t.content = a["content"].get<std::string>();
  t.single_word = a.value("single_word", false);
  t.lstrip = a.value("lstrip", false);
  t.rstrip = a.value("rstrip", false);
  t.special = a.value("special", false);
  t.normalized = a.value("normalized", !t.special);
  return t;
}

json parse_json(std::string_view text, const std::string& name) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(name + ": invalid JSON: " + e.what());
  }
}
}  // namespace

HfTokenizer::HfTokenizer(const json& tj, const json& config, std::vector<int32_t> eos_extra) {
  if (!tj.is_object()) throw Error("tokenizer.json: not a JSON object");
  if (!tj.contains("model")) throw Error("tokenizer.json: no 'model'");
  try {
    normalizer_ = make_normalizer(tj.value("normalizer", json()));
    pre_tokenizer_ = make_pre_tokenizer(tj.value("pre_tokenizer", json()));
    model_ = std::make_unique<BpeModel>(tj["model"]);
    decoder_ = make_decoder(tj.value("decoder", json()));
  } catch (const json::exception& e) {
    throw Error(std::string("tokenizer.json: ") + e.what());
  }
  byte_level_decoder_ = declares_byte_level(tj.value("decoder", json()));

  std::vector<AddedToken> added;
  for (const auto& a : tj.value("added_tokens", json::array())) {
    auto t = parse_added(a, "tokenizer.json");
    if (!a.contains("id") || !a["id"].is_number_integer()) throw Error("tokenizer.json: added token '" + t.content + "' has no id");
    t.id = a["id"].get<int32_t>();
    added.push_back(std::move(t));
  }
  // transformers also registers tokenizer_config.json's added_tokens_decoder entries.
  if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
    for (const auto& [id_str, a] : config["added_tokens_decoder"].items()) {
      int32_t id = -1;
      try {
        id = std::stoi(id_str);
      } catch (...) {
        throw Error("tokenizer_config.json: added_tokens_decoder key '" + id_str + "' is not an id");
      }
      if (std::none_of(added.begin(), added.end(), [&](const AddedToken& t) { return t.id == id; })) {
        auto t = parse_added(a, "tokenizer_config.json");
        t.id = id;
        added.push_back(std::move(t));
      }
    }
  }
  added_ = std::make_unique<AddedVocabulary>(std::move(added), normalizer_.get());

  vocab_size_ = model_->max_id() + 1;
  for (const auto& t : added_->tokens()) vocab_size_ = std::max(vocab_size_, t.id + 1);

  auto id_of = [&](const std::string& content, const char* what) -> int32_t {
    if (auto id = token_to_id(content)) return *id;
    throw Error(std::string("tokenizer_config.json: ") + what + " '" + content + "' is not a token of tokenizer.json");
  };
  const auto bos = token_content(config, "bos_token");
  const auto eos = token_content(config, "eos_token");
  if (bos) {
    bos_token_ = *bos;
    bos_id_ = id_of(*bos, "bos_token");
  }
  if (eos) {
    eos_token_ = *eos;
    eos_ids_.push_back(id_of(*eos, "eos_token"));
  }
  for (int32_t id : eos_extra)
    if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);

  // add_special_tokens: tokenizer_config.json's add_bos_token / add_eos_token win when either is
  // set (transformers' LlamaTokenizerFast rebuilds the post-processor from them); otherwise
  // tokenizer.json's TemplateProcessing, if any.
  const bool cfg_bos = config.value("add_bos_token", false), cfg_eos = config.value("add_eos_token", false);
  if (cfg_bos || cfg_eos) {
    if (cfg_bos) {
      if (!bos_id_) throw Error("tokenizer_config.json: add_bos_token is true but there is no bos_token");
      prefix_ids_.push_back(*bos_id_);
    }
    if (cfg_eos) {
      if (eos_ids_.empty()) throw Error("tokenizer_config.json: add_eos_token is true but there is no eos_token");
      suffix_ids_.push_back(eos_ids_.front());
    }
  } else {
    std::vector<json> procs;
    const json pp = tj.value("post_processor", json());
    if (pp.is_object() && pp.value("type", "") == "Sequence") procs = pp.value("processors", std::vector<json>{});
    else if (pp.is_object()) procs.push_back(pp);
    for (const auto& p : procs) {
      if (p.value("type", "") != "TemplateProcessing") continue;
      bool seen_a = false;
      for (const auto& piece : p.at("single")) {
        if (piece.contains("Sequence")) {
          seen_a = true;
          continue;
        }
        const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
        const auto& ids = p.at("special_tokens").at(name).at("ids");
        for (const auto& id : ids) (seen_a ? suffix_ids_ : prefix_ids_).push_back(id.get<int32_t>());
      }
    }
  }

  // Template variables transformers passes from its special-tokens map.
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (auto c = token_content(config, key)) special_tokens_map_[key] = *c;
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    ojson list = ojson::array();
    for (const auto& t : config["additional_special_tokens"])
      list.push_back(t.is_string() ? t.get<std::string>() : t.value("content", std::string()));
    special_tokens_map_["additional_special_tokens"] = list;
  }

  if (config.contains("chat_template")) {
    const auto& ct = config["chat_template"];
    std::string source;
    if (ct.is_string()) {
      source = ct.get<std::string>();
    } else if (ct.is_array()) {
      // Named templates: "default" is the one transformers uses without a name.
      for (const auto& t : ct)
        if (t.value("name", "") == "default") source = t.value("template", "");
      if (source.empty() && !ct.empty()) source = ct[0].value("template", "");
    }
    if (!source.empty()) {
      try {
        chat_template_ = std::make_unique<ChatTemplate>(source);
      } catch (const Error& e) {
        throw Error(std::string("tokenizer_config.json: ") + e.what());
      }
    }
  }
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (size_t bad = utf8::first_invalid_offset(text); bad != std::string_view::npos)
    throw Error("invalid UTF-8 in input text at byte " + std::to_string(bad));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  const auto segments = added_->extract_and_normalize(std::string(text), normalizer_.get());
  std::vector<std::string> pieces;
  for (size_t s = 0; s < segments.size(); ++s) {
    const auto& seg = segments[s];
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    pieces.clear();
    pieces.push_back(seg.text);
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces, s == 0);
    for (const auto& p : pieces) model_->tokenize(p, ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

const std::string* HfTokenizer::token_string(int32_t id) const {
  if (const auto* a = added_->by_id(id)) return &a->decoded;
  return model_->id_to_token(id);
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const auto* a = added_->by_id(id);
    if (a && a->special && skip_special_tokens) continue;
    if (const auto* t = token_string(id)) tokens.push_back(*t);  // unknown ids are skipped, as in HF
  }
  return decode_tokens(decoder_.get(), std::move(tokens));
}

std::string HfTokenizer::token_bytes(int32_t id) const {
  const auto* t = token_string(id);
  if (!t) return {};
  if (byte_level_decoder_) {
    if (auto b = byte_level::decode(*t)) return *b;
    return *t;
  }
  if (t->size() == 6 && t->compare(0, 3, "<0x") == 0 && (*t)[5] == '>') {
    try {
      return std::string(1, static_cast<char>(std::stoi(t->substr(3, 2), nullptr, 16)));
    } catch (...) {
    }
  }
  std::string s = *t;
  const std::string meta = "\xE2\x96\x81";
  for (size_t p = s.find(meta); p != std::string::npos; p = s.find(meta, p + 1)) s.replace(p, meta.size(), " ");
  return s;
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (const auto* a = added_->by_content(std::string(token))) return a->id;
  return model_->token_to_id(token);
}

bool HfTokenizer::is_special(int32_t id) const {
  const auto* a = added_->by_id(id);
  return a && a->special;
}

int HfTokenizer::vocab_size() const { return vocab_size_; }

bool HfTokenizer::add_bos_token() const { return bos_id_ && !prefix_ids_.empty() && prefix_ids_.front() == *bos_id_; }

std::string HfTokenizer::apply_chat_template(const json& messages, bool add_generation_prompt, const json* extra) const {
  const ojson m(messages);
  if (extra) {
    const ojson e(*extra);
    return apply_chat_template(m, add_generation_prompt, &e);
  }
  return apply_chat_template(m, add_generation_prompt, static_cast<const ojson*>(nullptr));
}

std::string HfTokenizer::apply_chat_template(const ojson& messages, bool add_generation_prompt, const ojson* extra) const {
  if (!chat_template_) throw Error("this tokenizer has no chat_template in tokenizer_config.json");
  if (!messages.is_array()) throw Error("chat messages must be a JSON array");
  // The variables transformers' apply_chat_template passes: its special-tokens map, messages,
  // tools/documents (None unless given), add_generation_prompt, then the caller's extra kwargs.
  ojson ctx = special_tokens_map_;
  ctx["messages"] = messages;
  ctx["tools"] = nullptr;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  if (extra) {
    if (!extra->is_object()) throw Error("chat template extra variables must be a JSON object");
    for (const auto& [k, v] : extra->items()) ctx[k] = v;
  }
  return chat_template_->render(ctx);
}

std::string Tokenizer::apply_chat_template(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                           const nlohmann::ordered_json* extra) const {
  const json m(messages);
  if (extra) {
    const json e(*extra);
    return apply_chat_template(m, add_generation_prompt, &e);
  }
  return apply_chat_template(m, add_generation_prompt, static_cast<const json*>(nullptr));
}

std::unique_ptr<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  const json tj = parse_json(tokenizer_json, "tokenizer.json");
  const json cfg = tokenizer_config_json.empty() ? json::object() : parse_json(tokenizer_config_json, "tokenizer_config.json");
  return std::make_unique<HfTokenizer>(tj, cfg, std::vector<int32_t>{});
}

std::unique_ptr<Tokenizer> Tokenizer::from_dir(const std::string& dir, const std::optional<std::string>& chat_template) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  if (!fs::exists(d / "tokenizer.json")) throw Error("no tokenizer.json in " + dir);
  const json tj = parse_json(read_text_file((d / "tokenizer.json").string()), (d / "tokenizer.json").string());
  json cfg = json::object();
  if (fs::exists(d / "tokenizer_config.json"))
    cfg = parse_json(read_text_file((d / "tokenizer_config.json").string()), (d / "tokenizer_config.json").string());
  if (chat_template) cfg["chat_template"] = *chat_template;
  // generation_config.json's eos_token_id (an id or a list) also ends generation (Llama-3's <|eot_id|>).
  std::vector<int32_t> eos_extra;
  if (fs::exists(d / "generation_config.json")) {
    const json gc = parse_json(read_text_file((d / "generation_config.json").string()), (d / "generation_config.json").string());
    if (gc.contains("eos_token_id")) {
      const auto& e = gc["eos_token_id"];
      if (e.is_number_integer()) eos_extra.push_back(e.get<int32_t>());
      else if (e.is_array())
        for (const auto& x : e)
          if (x.is_number_integer()) eos_extra.push_back(x.get<int32_t>());
    }
  }
  try {
    return std::make_unique<HfTokenizer>(tj, cfg, eos_extra);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (in " + dir + ")");
  }
}

bool Tokenizer::dir_has_tokenizer(const std::string& dir) {
  return std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json");
}

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {}

std::string IncrementalDecoder::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_ += tok_.token_bytes(id);
  // Everything but an unfinished trailing character goes out now; bytes that can never become
  // valid are replaced by U+FFFD rather than held forever.
  const size_t keep = utf8::incomplete_tail_length(pending_);
  std::string out = utf8::to_valid_lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out = utf8::to_valid_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace rs
