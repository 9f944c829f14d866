#include "tokenizer/tokenizer.h"
#include "common/error.h"
// Placeholder definitions so every room links; replaced by issue 3.
namespace rs {
std::unique_ptr<Tokenizer> Tokenizer::from_json(std::string_view, std::string_view) { throw Error("tokenizer not built yet"); }
std::unique_ptr<Tokenizer> Tokenizer::from_dir(const std::string&) { throw Error("tokenizer not built yet"); }
bool Tokenizer::dir_has_tokenizer(const std::string&) { return false; }
IncrementalDecoder::IncrementalDecoder(const Tokenizer& tok, bool skip) : tok_(tok), skip_special_(skip) {}
std::string IncrementalDecoder::push(int32_t) { throw Error("tokenizer not built yet"); }
std::string IncrementalDecoder::flush() { return {}; }
bool is_valid_utf8(std::string_view) { throw Error("tokenizer not built yet"); }
}  // namespace rs
