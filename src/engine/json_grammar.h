#pragma once
// JSON mode (response_format {"type": "json_object"}): the output is constrained, byte by byte,
// to one JSON object; with a compiled JSON Schema (json_schema.h), to a value that schema
// accepts. JsonState is a pushdown automaton over bytes small enough to copy freely (the
// container stack is a 64-bit mask, plus a fixed frame array in schema mode), so the
// allowed-token mask of a step is a depth-first
// walk over a byte trie of the vocabulary that copies the state at every node and prunes a
// subtree at the first byte the grammar rejects.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace rs {

class Tokenizer;

struct JsonSchema;
struct JsonWrapped;

constexpr int kJsonSchemaMaxDepth = 24;  // containers a structured output may nest

struct JsonState {
  // Structured outputs: the compiled schema (owned by the request), or none for JSON mode.
  static JsonState with_schema(const JsonSchema* schema);
  // A wrapped value (json_schema.h JsonWrapped): prefix, the value, suffix; done after the suffix.
  static JsonState with_wrapper(const JsonWrapped* wrapped);
  const JsonSchema* schema = nullptr;
  const JsonWrapped* wrapped = nullptr;
  uint8_t wrap_phase = 0;  // 0: in the prefix trie, 1: the value, 2: the suffix
  int32_t wrap_pos = 0;    // prefix trie node, or suffix bytes matched
  struct Frame {
    uint64_t seen = 0;  // object: properties already given
    int32_t node = 0;   // the container's schema node
  };
  Frame frames[kJsonSchemaMaxDepth];  // schema mode: one per open container
  int32_t value_node = 0;  // schema node of the value that comes next or is being read
  int32_t trie = -1;       // key: position in the object's key trie (-2: an extra key); enum: in the literal trie

  uint64_t objects = 0;   // bit d set: the container at depth d is an object (else an array)
  uint8_t depth = 0;      // open containers
  uint8_t mode = 0;       // what the grammar expects next (json_grammar.cpp)
  uint8_t sub = 0;        // inside a token: escape / \u digit count / number phase / literal position
  uint8_t literal = 0;    // which of true, false, null
  uint8_t spaces = 0;     // consecutive whitespace, capped so a model cannot pad forever
  bool in_key = false;    // the string being read is an object key
  bool done = false;      // the top-level object is closed: only EOS may follow
  bool failed = false;

  // Feeds one byte; false (and failed) when the byte cannot continue a JSON object (or, with a
  // schema, a value the schema accepts).
  bool step(uint8_t c);
  bool feed(std::string_view bytes);
  bool step_value(uint8_t c);  // the JSON value itself (step() adds a wrapper's prefix and suffix)
  // Inside a string whose next plain bytes (no quote, backslash or control byte) cannot fail:
  // any string value, or a key the object does not constrain.
  bool in_plain_string() const;
};

constexpr int kJsonMaxDepth = 64;

// The allowed-token bitmask of a state over one tokenizer's vocabulary (ids below vocab_size).
// Special tokens are never allowed; EOS only once the object is complete, and then nothing else.
class JsonMasker {
 public:
  JsonMasker(const Tokenizer& tok, int vocab_size, std::vector<int32_t> eos_ids);
  ~JsonMasker();
  int words() const { return (vocab_ + 31) / 32; }
  // mask[id / 32] bit id % 32 set: the token may come next. Returns how many are allowed.
  int allowed(const JsonState& s, std::vector<uint32_t>& mask) const;
  std::string_view token_bytes(int32_t id) const;

 private:
  struct Trie;
  int vocab_;
  std::vector<int32_t> eos_;
  std::unique_ptr<Trie> trie_;
  // Inside a string (the common case, where nearly the whole vocabulary is allowed) a token
  // without '"', '\\' or control bytes keeps the state as it is: those are allowed in bulk, and
  // only the others are simulated.
  std::vector<uint32_t> plain_string_;  // bitmask
  int plain_string_count_ = 0;
  std::vector<int32_t> string_special_;
};

}  // namespace rs
