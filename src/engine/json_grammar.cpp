#include "engine/json_grammar.h"

#include <string>

#include "engine/json_schema.h"

#include "tokenizer/tokenizer.h"

namespace rs {
namespace {

enum Mode : uint8_t {
  kStart,        // before the top-level '{'
  kValue,        // a value must come (after ':' or ',' in an array)
  kValueOrEnd,   // just after '[': a value or ']'
  kKeyOrEnd,     // just after '{': a key or '}'
  kKey,          // after ',' in an object: a key
  kColon,        // after a key
  kAfterValue,   // ',' or the container's closing bracket
  kString,
  kNumber,
  kLiteral,
  kEnum,  // schema mode: one of the node's literal values, byte by byte along its trie
  kDone,
};

// Number phases (JsonState::sub in kNumber); "complete" phases may end the number.
enum NumberPhase : uint8_t { kMinus = 1, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };
bool number_complete(uint8_t phase) { return phase == kZero || phase == kInt || phase == kFrac || phase == kExpDigits; }

constexpr std::string_view kLiterals[3] = {"true", "false", "null"};
constexpr uint8_t kMaxSpaces = 16;

bool is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

JsonState JsonState::with_schema(const JsonSchema* schema) {
  JsonState s;
  s.schema = schema;
  s.value_node = schema ? schema->root : 0;
  return s;
}

JsonState JsonState::with_wrapper(const JsonWrapped* w) {
  JsonState s;
  s.wrapped = w;
  return s;
}

bool JsonState::in_plain_string() const {
  return mode == kString && sub == 0 && !(in_key && schema && trie != -2);
}

bool JsonState::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!step(static_cast<uint8_t>(c))) return false;
  return true;
}

bool JsonState::step(uint8_t c) {
  if (!wrapped) return step_value(c);
  if (failed) return false;
  if (wrap_phase == 1) {  // the value; once it is complete, the suffix follows
    if (!step_value(c)) return false;
    if (done) {
      done = wrapped->suffix.empty();
      wrap_phase = 2;
      wrap_pos = 0;
    }
    return true;
  }
  if (wrap_phase == 0) {  // the prefix: along the trie to the leaf that names the alternative
    wrap_pos = wrapped->prefixes[size_t(wrap_pos)].child[c];
    if (wrap_pos < 0) {
      failed = true;
      return false;
    }
    if (const int32_t alt = wrapped->prefixes[size_t(wrap_pos)].terminal; alt >= 0) {
      const JsonWrapped* w = wrapped;
      *this = with_schema(w->schemas[size_t(alt)].get());
      wrapped = w;
      wrap_phase = 1;
    }
    return true;
  }
  if (done || c != uint8_t(wrapped->suffix[size_t(wrap_pos)])) {  // the suffix, byte by byte
    failed = true;
    return false;
  }
  done = size_t(++wrap_pos) == wrapped->suffix.size();
  return true;
}

bool JsonState::step_value(uint8_t c) {
  if (failed) return false;
  auto fail = [&] {
    failed = true;
    return false;
  };
  auto top_is_object = [&] { return depth > 0 && (objects >> (depth - 1) & 1u); };
  auto value_done = [&] {
    if (depth == 0) {
      done = true;
      mode = kDone;
    } else {
      mode = kAfterValue;
    }
  };
  auto node = [&](int32_t i) -> const JsonSchema::Node& { return schema->nodes[size_t(i)]; };
  auto open = [&](bool object) {
    if (depth >= kJsonMaxDepth) return false;
    if (schema) {
      if (depth >= kJsonSchemaMaxDepth) return false;
      frames[depth] = Frame{0, value_node};
      if (!object) value_node = node(value_node).items;
    }
    objects = object ? objects | (uint64_t(1) << depth) : objects & ~(uint64_t(1) << depth);
    ++depth;
    mode = object ? kKeyOrEnd : kValueOrEnd;
    return true;
  };
  auto close = [&](bool object) {
    if (depth == 0 || top_is_object() != object) return false;
    if (schema && object) {
      const Frame& f = frames[depth - 1];
      if (node(f.node).required & ~f.seen) return false;  // a required property is missing
    }
    --depth;
    value_done();
    return true;
  };
  // Schema mode: may another key follow in the top object (one not given yet, or any extra key)?
  auto key_possible = [&] {
    const Frame& f = frames[depth - 1];
    const JsonSchema::Node& o = node(f.node);
    return o.extra_keys || (o.key_trie >= 0 && (schema->tries[size_t(o.key_trie)].below & ~f.seen) != 0);
  };
  auto begin_value = [&](uint8_t ch) {
    if (schema) {
      const JsonSchema::Node& n = node(value_node);
      if (n.enum_trie >= 0) {
        const int32_t t = schema->trie_child(n.enum_trie, ch);
        if (t < 0) return false;
        trie = t;
        mode = kEnum;
        if (!schema->tries[size_t(t)].has_child) value_done();
        return true;
      }
      const uint8_t need = ch == '{' ? JsonSchema::kObject
                           : ch == '[' ? JsonSchema::kArray
                           : ch == '"' ? JsonSchema::kString
                           : ch == '-' || is_digit(ch) ? JsonSchema::kNumber | JsonSchema::kInteger
                           : ch == 't' || ch == 'f' ? JsonSchema::kBoolean
                           : ch == 'n' ? JsonSchema::kNull
                                       : 0;
      if (!(n.kinds & need)) return false;
    }
    if (ch == '{') return open(true);
    if (ch == '[') return open(false);
    if (ch == '"') {
      mode = kString;
      sub = 0;
      in_key = false;
      return true;
    }
    if (ch == '-' || is_digit(ch)) {
      mode = kNumber;
      sub = ch == '-' ? kMinus : ch == '0' ? kZero : kInt;
      return true;
    }
    for (uint8_t l = 0; l < 3; ++l)
      if (ch == kLiterals[l][0]) {
        mode = kLiteral;
        literal = l;
        sub = 1;
        return true;
      }
    return false;
  };

  switch (mode) {
    case kString:
      if (in_key && schema && trie != -2 && sub == 0) {  // a key the object constrains
        Frame& f = frames[depth - 1];
        const JsonSchema::Node& o = node(f.node);
        if (c == '"') {
          const int32_t p = trie >= 0 ? schema->tries[size_t(trie)].terminal : -1;
          if (p >= 0) {
            if (f.seen >> p & 1u) return fail();  // the same key twice
            f.seen |= uint64_t(1) << p;
            value_node = o.props[size_t(p)].second;
          } else {
            if (!o.extra_keys) return fail();
            value_node = 0;
          }
          in_key = false;
          mode = kColon;
          return true;
        }
        const int32_t next = c >= 0x20 && c != '\\' ? schema->trie_child(trie, c) : -1;
        if (next >= 0 && (o.extra_keys || (schema->tries[size_t(next)].below & ~f.seen) != 0)) {
          trie = next;
          return true;
        }
        if (!o.extra_keys) return fail();
        trie = -2;  // not a property name: an extra key, read as any string below
      }
      if (sub == 1) {  // after a backslash
        if (c == 'u') {
          sub = 2 + 4;  // four hex digits to come
          return true;
        }
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
          sub = 0;
          return true;
        }
        return fail();
      }
      if (sub > 2) {  // \u digits
        if (!is_hex(c)) return fail();
        sub = sub == 3 ? 0 : sub - 1;
        return true;
      }
      if (c == '\\') {
        sub = 1;
        return true;
      }
      if (c < 0x20) return fail();  // control characters must be escaped
      if (c == '"') {
        if (in_key) {
          in_key = false;
          mode = kColon;
          value_node = 0;  // schema mode: an extra key's value is unconstrained
        } else {
          value_done();
        }
      }
      return true;
    case kNumber:
      if (schema && (c == '.' || c == 'e' || c == 'E') && !(node(value_node).kinds & JsonSchema::kNumber))
        return fail();  // schema: an integer
      switch (sub) {
        case kMinus:
          if (!is_digit(c)) return fail();
          sub = c == '0' ? kZero : kInt;
          return true;
        case kZero:
        case kInt:
          if (is_digit(c) && sub == kInt) return true;
          if (c == '.') {
            sub = kDot;
            return true;
          }
          if (c == 'e' || c == 'E') {
            sub = kExp;
            return true;
          }
          break;
        case kDot:
          if (!is_digit(c)) return fail();
          sub = kFrac;
          return true;
        case kFrac:
          if (is_digit(c)) return true;
          if (c == 'e' || c == 'E') {
            sub = kExp;
            return true;
          }
          break;
        case kExp:
          if (c == '+' || c == '-') {
            sub = kExpSign;
            return true;
          }
          [[fallthrough]];
        case kExpSign:
          if (!is_digit(c)) return fail();
          sub = kExpDigits;
          return true;
        case kExpDigits:
          if (is_digit(c)) return true;
          break;
      }
      // The byte ends the number (numbers only appear inside containers): read it as what follows.
      if (!number_complete(sub)) return fail();
      value_done();
      return step_value(c);
    case kLiteral:
      if (c != static_cast<uint8_t>(kLiterals[literal][sub])) return fail();
      if (++sub == kLiterals[literal].size()) value_done();
      return true;
    case kEnum: {
      const int32_t t = schema->trie_child(trie, c);
      if (t >= 0) {
        trie = t;
        if (!schema->tries[size_t(t)].has_child) value_done();
        return true;
      }
      // A literal that is a prefix of another (1 and 12) ends at the byte that is neither.
      if (schema->tries[size_t(trie)].terminal < 0) return fail();
      value_done();
      return step_value(c);
    }
    case kDone:
      return fail();
    default:
      break;
  }

  // Structural modes: whitespace, then one structural byte.
  if (is_space(c)) {
    if (++spaces > kMaxSpaces) return fail();
    return true;
  }
  spaces = 0;
  switch (mode) {
    case kStart:
      if (schema) return begin_value(c) ? true : fail();  // the root is an object or an array
      return c == '{' && open(true) ? true : fail();
    case kValueOrEnd:
      if (c == ']') return close(false) ? true : fail();
      [[fallthrough]];
    case kValue:
      return begin_value(c) ? true : fail();
    case kKeyOrEnd:
      if (c == '}') return close(true) ? true : fail();
      [[fallthrough]];
    case kKey:
      if (c != '"') return fail();
      if (schema) {
        if (!key_possible()) return fail();
        const int32_t root = node(frames[depth - 1].node).key_trie;
        trie = root >= 0 ? root : -2;
      }
      mode = kString;
      sub = 0;
      in_key = true;
      return true;
    case kColon:
      if (c != ':') return fail();
      mode = kValue;
      return true;
    case kAfterValue:
      if (c == ',') {
        mode = top_is_object() ? kKey : kValue;
        if (schema) {
          if (top_is_object() && !key_possible()) return fail();  // every allowed key is given
          if (!top_is_object()) value_node = node(frames[depth - 1].node).items;
        }
        return true;
      }
      if (c == '}' || c == ']') return close(c == '}') ? true : fail();
      return fail();
    default:
      return fail();
  }
}

// A byte trie of the vocabulary: children as sibling lists (the root's are indexed directly).
struct JsonMasker::Trie {
  struct Node {
    int32_t first_child = -1, next_sibling = -1, first_token = -1;
    uint8_t byte = 0;
  };
  std::vector<Node> nodes;
  int32_t root_child[256];
  std::vector<int32_t> next_token;  // tokens with the same bytes, as a list per node
  std::vector<std::string> bytes;   // per token id

  int32_t child(int32_t parent, uint8_t b) {
    int32_t* link = parent < 0 ? &root_child[b] : &nodes[size_t(parent)].first_child;
    if (parent < 0) {
      if (*link < 0) {
        *link = static_cast<int32_t>(nodes.size());
        nodes.push_back(Node{-1, -1, -1, b});
      }
      return *link;
    }
    for (int32_t n = *link; n >= 0; n = nodes[size_t(n)].next_sibling)
      if (nodes[size_t(n)].byte == b) return n;
    const auto n = static_cast<int32_t>(nodes.size());
    nodes.push_back(Node{-1, *link, -1, b});
    nodes[size_t(parent)].first_child = n;
    return n;
  }
};

JsonMasker::JsonMasker(const Tokenizer& tok, int vocab_size, std::vector<int32_t> eos_ids)
    : vocab_(vocab_size), eos_(std::move(eos_ids)), trie_(std::make_unique<Trie>()) {
  Trie& t = *trie_;
  for (int32_t& r : t.root_child) r = -1;
  t.next_token.assign(size_t(vocab_), -1);
  t.bytes.resize(size_t(vocab_));
  const int tok_vocab = std::min(vocab_, tok.vocab_size());
  for (int32_t id = 0; id < tok_vocab; ++id) {
    if (tok.is_special(id)) continue;
    std::string b = tok.token_bytes(id);
    if (b.empty()) continue;  // could never make progress
    int32_t node = -1;
    for (char c : b) node = t.child(node, static_cast<uint8_t>(c));
    t.next_token[size_t(id)] = t.nodes[size_t(node)].first_token;
    t.nodes[size_t(node)].first_token = id;
    bool plain = true;
    for (char c : b) plain = plain && c != '"' && c != '\\' && static_cast<uint8_t>(c) >= 0x20;
    if (plain) {
      if (plain_string_.empty()) plain_string_.assign(size_t(words()), 0u);
      plain_string_[size_t(id) / 32] |= 1u << (id % 32);
      ++plain_string_count_;
    } else {
      string_special_.push_back(id);
    }
    t.bytes[size_t(id)] = std::move(b);
  }
  if (plain_string_.empty()) plain_string_.assign(size_t(words()), 0u);
}

JsonMasker::~JsonMasker() = default;

std::string_view JsonMasker::token_bytes(int32_t id) const {
  return id >= 0 && id < vocab_ ? std::string_view(trie_->bytes[size_t(id)]) : std::string_view();
}

int JsonMasker::allowed(const JsonState& s, std::vector<uint32_t>& mask) const {
  mask.assign(size_t(words()), 0u);
  int count = 0;
  auto allow = [&](int32_t id) {
    mask[size_t(id) / 32] |= 1u << (id % 32);
    ++count;
  };
  if (s.failed) return 0;
  if (s.done) {
    for (int32_t e : eos_)
      if (e >= 0 && e < vocab_) allow(e);
    return count;
  }
  if (s.in_plain_string()) {
    mask = plain_string_;
    count = plain_string_count_;
    for (int32_t id : string_special_) {
      JsonState st = s;
      if (st.feed(trie_->bytes[size_t(id)])) allow(id);
    }
    return count;
  }
  const Trie& t = *trie_;
  std::vector<std::pair<int32_t, JsonState>> todo;
  for (int b = 0; b < 256; ++b)
    if (t.root_child[b] >= 0) todo.emplace_back(t.root_child[b], s);
  while (!todo.empty()) {
    auto [node, st] = todo.back();
    todo.pop_back();
    const Trie::Node& n = t.nodes[size_t(node)];
    if (!st.step(n.byte)) continue;  // the whole subtree starts with a rejected prefix
    for (int32_t id = n.first_token; id >= 0; id = t.next_token[size_t(id)]) allow(id);
    for (int32_t c = n.first_child; c >= 0; c = t.nodes[size_t(c)].next_sibling) todo.emplace_back(c, st);
  }
  return count;
}

}  // namespace rs
