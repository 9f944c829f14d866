#include "engine/json_schema.h"

#include <nlohmann/json.hpp>

#include <set>
#include <string_view>

#include "common/error.h"

namespace rs {
namespace {

using json = nlohmann::json;

// Keywords that only describe: they constrain nothing the grammar must enforce.
const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "format", "$schema",
                                            "$id", "$comment", "deprecated", "readOnly", "writeOnly", "strict",
                                            "$defs", "definitions", "nullable"};
const std::set<std::string> kEnforced = {"type", "properties", "required", "additionalProperties", "items",
                                         "enum", "const", "anyOf", "$ref"};

// Bounds on what one request may make the server build: a trie node is 1 KB, and $refs can
// multiply nodes (a definition used twice per level doubles them with each level).
constexpr size_t kMaxTrieNodes = 32768;
constexpr size_t kMaxSchemaNodes = 4096;

int32_t trie_new_node(std::vector<JsonSchema::TrieNode>& t) {
  if (t.size() >= kMaxTrieNodes)
    throw Error("json_schema: too large (more than " + std::to_string(kMaxTrieNodes) +
                " trie nodes of property names, enum values or call prefixes)");
  t.emplace_back().child.fill(-1);
  return int32_t(t.size() - 1);
}

// Adds `bytes` below node `root` of `t` (creating nodes), marking `bit` on the way; returns the
// last node.
int32_t trie_insert(std::vector<JsonSchema::TrieNode>& t, int32_t root, std::string_view bytes, uint64_t bit) {
  int32_t n = root;
  t[size_t(n)].below |= bit;
  for (unsigned char c : bytes) {
    int32_t next = t[size_t(n)].child[c];
    if (next < 0) {
      next = trie_new_node(t);
      t[size_t(n)].child[c] = next;
      t[size_t(n)].has_child = true;
    }
    n = next;
    t[size_t(n)].below |= bit;
  }
  return n;
}

class Compiler {
 public:
  explicit Compiler(const json& doc) : doc_(doc), out_(std::make_shared<JsonSchema>()) {
    out_->nodes.emplace_back();  // 0: any value
  }

  std::shared_ptr<const JsonSchema> run() {
    out_->root = node(doc_, "schema", 0);
    if (out_->root == 0) {  // any value: as JSON mode, one object
      out_->nodes.emplace_back();
      out_->root = int32_t(out_->nodes.size() - 1);
    }
    JsonSchema::Node& r = out_->nodes[size_t(out_->root)];
    if (r.kinds == JsonSchema::kAny) r.kinds = JsonSchema::kObject;
    if (r.enum_trie >= 0 || (r.kinds & ~(JsonSchema::kObject | JsonSchema::kArray)) != 0)
      throw Error("json_schema: the top level must be an object or an array (type \"object\" or \"array\")");
    return out_;
  }

 private:
  const json& doc_;
  std::shared_ptr<JsonSchema> out_;

  [[noreturn]] static void bad(const std::string& path, const std::string& what) {
    throw Error("json_schema: " + path + ": " + what);
  }


  const json& resolve(const std::string& ref, const std::string& path) {
    for (const char* base : {"#/$defs/", "#/definitions/"}) {
      const std::string b = base;
      if (ref.rfind(b, 0) != 0) continue;
      const std::string name = ref.substr(b.size());
      const auto defs = doc_.find(b.substr(2, b.size() - 3));  // "$defs" / "definitions"
      if (defs == doc_.end() || !defs->is_object() || !defs->contains(name))
        bad(path, "$ref '" + ref + "' names no definition");
      return (*defs)[name];
    }
    bad(path, "$ref '" + ref + "': only local references into $defs or definitions are supported");
  }

  static uint8_t kind_of(const std::string& t, const std::string& path) {
    if (t == "object") return JsonSchema::kObject;
    if (t == "array") return JsonSchema::kArray;
    if (t == "string") return JsonSchema::kString;
    if (t == "number") return JsonSchema::kNumber;
    if (t == "integer") return JsonSchema::kInteger;
    if (t == "boolean") return JsonSchema::kBoolean;
    if (t == "null") return JsonSchema::kNull;
    bad(path, "unknown type '" + t + "'");
  }

  // Literal values of enum / const, compactly serialised, into one trie.
  int32_t literals(const json& values, const std::string& path) {
    if (!values.is_array() || values.empty()) bad(path, "enum must be a non-empty array");
    const int32_t root = trie_new_node(out_->tries);
    for (const json& v : values) {
      if (v.is_object() || v.is_array()) bad(path, "enum / const values must be strings, numbers, booleans or null");
      const std::string text = v.dump();
      if (text.empty()) bad(path, "empty enum value");
      out_->tries[size_t(trie_insert(out_->tries, root, text, 0))].terminal = 0;
    }
    return root;
  }

  int32_t node(const json& s, const std::string& path, int depth) {
    if (depth > 32) bad(path, "nested deeper than 32 (a recursive $ref?); recursive schemas are not supported");
    if (s.is_boolean()) {
      if (!s.get<bool>()) bad(path, "the schema 'false' accepts nothing");
      return 0;
    }
    if (!s.is_object()) bad(path, "a schema must be an object");
    for (auto& [k, v] : s.items())
      if (!kAnnotations.count(k) && !kEnforced.count(k))
        bad(path, "keyword '" + k + "' is not supported (the output could not be held to it)");
    if (auto r = s.find("$ref"); r != s.end()) {
      if (!r->is_string()) bad(path, "$ref must be a string");
      if (s.size() > 1)
        for (auto& [k, v] : s.items())
          if (kEnforced.count(k) && k != "$ref") bad(path, "'" + k + "' next to $ref is not supported");
      return node(resolve(r->get<std::string>(), path), path + "/$ref", depth + 1);
    }
    if (auto a = s.find("anyOf"); a != s.end()) return any_of(s, *a, path, depth);

    JsonSchema::Node n;
    if (auto t = s.find("type"); t != s.end()) {
      n.kinds = 0;
      if (t->is_string()) n.kinds = kind_of(t->get<std::string>(), path);
      else if (t->is_array() && !t->empty())
        for (const json& x : *t) n.kinds |= x.is_string() ? kind_of(x.get<std::string>(), path) : 0;
      if (n.kinds == 0) bad(path, "type must be a type name or a non-empty list of them");
    }
    if (s.value("nullable", false)) n.kinds |= JsonSchema::kNull;
    if (auto e = s.find("enum"); e != s.end()) n.enum_trie = literals(*e, path + "/enum");
    if (auto c = s.find("const"); c != s.end()) {
      if (n.enum_trie >= 0) bad(path, "enum together with const is not supported");
      n.enum_trie = literals(json::array({*c}), path + "/const");
    }
    if (auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) bad(path, "properties must be an object");
      if (p->size() > size_t(JsonSchema::kMaxProperties))
        bad(path, "more than " + std::to_string(JsonSchema::kMaxProperties) + " properties");
      for (auto& [name, sub] : p->items()) {
        for (unsigned char c : name)
          if (c == '"' || c == '\\' || c < 0x20) bad(path, "property name '" + name + "' needs escaping; not supported");
        n.props.emplace_back(name, -1);
      }
    }
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) bad(path, "required must be an array");
      for (const json& x : *r) {
        size_t i = 0;
        while (i < n.props.size() && (!x.is_string() || n.props[i].first != x.get<std::string>())) ++i;
        if (i == n.props.size()) bad(path, "required names " + x.dump() + ", which is not among its properties");
        n.required |= uint64_t(1) << i;
      }
    }
    if (auto a = s.find("additionalProperties"); a != s.end()) {
      if (!a->is_boolean()) bad(path, "additionalProperties must be true or false (a schema for them is not supported)");
      n.extra_keys = a->get<bool>();
    }
    if (out_->nodes.size() >= kMaxSchemaNodes)
      bad(path, "the schema expands to more than " + std::to_string(kMaxSchemaNodes) + " nodes ($refs multiply them)");
    const int32_t idx = int32_t(out_->nodes.size());
    out_->nodes.push_back(n);
    // Children after the push: they append nodes (and tries) of their own.
    if (auto p = s.find("properties"); p != s.end()) {
      const int32_t root = trie_new_node(out_->tries);
      out_->nodes[size_t(idx)].key_trie = root;
      size_t i = 0;
      for (auto& [name, sub] : p->items()) {
        const int32_t child = node(sub, path + "/properties/" + name, depth + 1);
        out_->nodes[size_t(idx)].props[i].second = child;
        const int32_t end = trie_insert(out_->tries, root, name, uint64_t(1) << i);
        out_->tries[size_t(end)].terminal = int32_t(i);
        ++i;
      }
    }
    if (auto it = s.find("items"); it != s.end()) {
      const int32_t child = node(*it, path + "/items", depth + 1);
      out_->nodes[size_t(idx)].items = child;
    }
    return idx;
  }

  // anyOf: only "one schema, or null" (Optional[...] as pydantic writes it) and lists of bare
  // types. A choice between structures would need the grammar to keep several alternatives alive.
  int32_t any_of(const json& s, const json& alts, const std::string& path, int depth) {
    if (!alts.is_array() || alts.empty()) bad(path, "anyOf must be a non-empty array");
    for (auto& [k, v] : s.items())
      if (kEnforced.count(k) && k != "anyOf") bad(path, "'" + k + "' next to anyOf is not supported");
    const json* other = nullptr;
    uint8_t bare = 0;
    for (const json& a : alts) {
      const bool bare_type = a.is_object() && a.contains("type") && a["type"].is_string() &&
                             a.size() == 1 + a.count("title") + a.count("description");
      const std::string t = bare_type ? a["type"].get<std::string>() : "";
      if (bare_type && t != "object" && t != "array") bare |= kind_of(t, path);
      else if (!other) other = &a;
      else bad(path, "anyOf with more than one structured alternative is not supported");
    }
    if (!other) {
      JsonSchema::Node n;
      n.kinds = bare;
      out_->nodes.push_back(n);
      return int32_t(out_->nodes.size() - 1);
    }
    if (bare & ~JsonSchema::kNull) bad(path, "anyOf mixing a structured alternative with non-null types is not supported");
    const int32_t idx = node(*other, path + "/anyOf", depth + 1);
    if (idx == 0) return 0;  // any value already includes null
    // Every use of a schema compiles its own node (a $ref included), so widening it is local.
    JsonSchema::Node& n = out_->nodes[size_t(idx)];
    if (n.enum_trie >= 0 && bare) out_->tries[size_t(trie_insert(out_->tries, n.enum_trie, "null", 0))].terminal = 0;
    n.kinds |= bare;
    return idx;
  }
};

}  // namespace

std::shared_ptr<const JsonSchema> JsonSchema::compile(const nlohmann::json& schema) {
  return Compiler(schema).run();
}

std::shared_ptr<const JsonWrapped> JsonWrapped::make(
    const std::vector<std::pair<std::string, std::shared_ptr<const JsonSchema>>>& alternatives, std::string suffix) {
  auto w = std::make_shared<JsonWrapped>();
  trie_new_node(w->prefixes);
  for (const auto& [prefix, schema] : alternatives) {
    if (prefix.empty() || !schema) throw Error("wrapped json: an empty prefix or no schema");
    // A terminal on the way (an earlier prefix ends inside this one) or children under this
    // one's end (it ends inside an earlier one) would make the alternative ambiguous.
    const int32_t end = trie_insert(w->prefixes, 0, prefix, 0);
    bool clash = w->prefixes[size_t(end)].has_child || w->prefixes[size_t(end)].terminal >= 0;
    int32_t t = 0;
    for (size_t i = 0; i + 1 < prefix.size() && !clash; ++i) {
      t = w->prefixes[size_t(t)].child[static_cast<unsigned char>(prefix[i])];
      clash = w->prefixes[size_t(t)].terminal >= 0;
    }
    if (clash) throw Error("wrapped json: a prefix is the start of another");
    w->prefixes[size_t(end)].terminal = int32_t(w->schemas.size());
    w->schemas.push_back(schema);
  }
  w->suffix = std::move(suffix);
  return w;
}

}  // namespace rs
