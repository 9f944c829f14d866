#pragma once
// Structured outputs (response_format {"type": "json_schema"}): a JSON Schema compiled into the
// tables JsonState (json_grammar.h) consults byte by byte, so the output is one JSON value the
// schema accepts. Supported: type (one or a list), properties, required, additionalProperties
// (false, or absent/true: extra keys with any value), items, enum, const, nullable anyOf /
// type lists, local $ref into $defs / definitions (not recursive), and the annotations (title,
// description, default, examples, format, $schema, $id, ...), which constrain nothing. Any other
// keyword (pattern, minLength, minimum, oneOf, allOf, ...) is refused: a schema the output could
// silently violate is worse than a clear 400.
#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rs {

struct JsonSchema {
  enum Kind : uint8_t { kObject = 1, kArray = 2, kString = 4, kNumber = 8, kInteger = 16, kBoolean = 32, kNull = 64, kAny = 127 };
  static constexpr int kMaxProperties = 64;  // per object (the seen-set is a 64-bit mask)

  // A byte trie (property names, enum literals): child per byte, -1 none.
  struct TrieNode {
    std::array<int32_t, 256> child;
    int32_t terminal = -1;  // key tries: the property index; enum tries: 0
    uint64_t below = 0;     // key tries: properties whose names pass through this node
    bool has_child = false;
  };
  struct Node {
    uint8_t kinds = kAny;
    bool extra_keys = true;  // object: keys outside `props` allowed, their values unconstrained
    std::vector<std::pair<std::string, int32_t>> props;  // name bytes (as between the quotes), node
    uint64_t required = 0;   // bit i: props[i] must appear
    int32_t key_trie = -1;   // root of the trie over props' names
    int32_t items = 0;       // array: the items' node (0: any value)
    int32_t enum_trie = -1;  // >= 0: the value is one of these literals, compactly serialised
  };
  std::vector<Node> nodes;  // nodes[0]: any JSON value
  int32_t root = 0;
  std::vector<TrieNode> tries;

  // Throws rs::Error("...") naming the offending keyword or path.
  static std::shared_ptr<const JsonSchema> compile(const nlohmann::json& schema);

  int32_t trie_child(int32_t t, uint8_t b) const { return t < 0 ? -1 : tries[size_t(t)].child[b]; }
};

// One of several literal prefixes, then a JSON value the schema that prefix selects accepts, then
// a literal suffix: how a forced tool call is written (the server builds it from the model's
// tool-call syntax, one alternative per allowed function, its parameters as the schema).
struct JsonWrapped {
  std::vector<JsonSchema::TrieNode> prefixes;  // node 0 the root; a leaf's terminal = alternative
  std::vector<std::shared_ptr<const JsonSchema>> schemas;  // per alternative (object or array at the top)
  std::string suffix;

  // No prefix may be a proper prefix of another (throws rs::Error).
  static std::shared_ptr<const JsonWrapped> make(
      const std::vector<std::pair<std::string, std::shared_ptr<const JsonSchema>>>& alternatives, std::string suffix);
};

}  // namespace rs
