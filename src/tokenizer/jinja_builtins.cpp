// Filters, tests, string/dict methods and globals of the Jinja subset, with Python/Jinja2 semantics.
#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "common/error.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/utf8.h"

namespace rs::jinja {
namespace {

bool is_py_space(char32_t c) { return utf8::is_white_space(c) || (c >= 0x1C && c <= 0x1F); }

std::vector<std::string> chars_of(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t b = i;
    utf8::next(s, i);
    out.push_back(s.substr(b, i - b));
  }
  return out;
}

// Python str.strip/lstrip/rstrip: `chars` None strips whitespace, else any of its characters.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto cs = chars_of(s);
  std::vector<std::string> set;
  const bool ws = chars.is_undefined() || chars.is_none();
  if (!ws) set = chars_of(chars.str());
  auto strip_it = [&](const std::string& c) {
    if (ws) {
      size_t i = 0;
      return is_py_space(utf8::next(c, i));
    }
    return std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && strip_it(cs[b])) ++b;
  if (right)
    while (e > b && strip_it(cs[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

std::string ascii_case(std::string s, bool upper) {
  for (auto& c : s) c = upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string replace_str(const std::string& s, const std::string& from, const std::string& to, int64_t count, Interpreter& in, Pos p) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    auto cs = chars_of(s);
    int64_t n = 0;
    for (size_t i = 0; i <= cs.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < cs.size()) out += cs[i];
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
    ++n;
    if (out.size() > in.limits.max_output_bytes) in.fail(p, "string too large");
  }
  out.append(s, pos, std::string::npos);
  return out;
}

Value py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  Array out;
  if (sep.is_undefined() || sep.is_none()) {
    auto cs = chars_of(s);
    size_t i = 0;
    int64_t n = 0;
    while (i < cs.size()) {
      while (i < cs.size()) {
        size_t k = 0;
        if (!is_py_space(utf8::next(cs[i], k))) break;
        ++i;
      }
      if (i >= cs.size()) break;
      std::string word;
      if (maxsplit >= 0 && n >= maxsplit) {
        for (; i < cs.size(); ++i) word += cs[i];
        // Python keeps trailing whitespace of the unsplit remainder only when... it strips it.
        size_t e = word.size();
        while (e > 0 && is_py_space(static_cast<unsigned char>(word[e - 1]))) --e;
        word.erase(e);
        out.emplace_back(word);
        break;
      }
      while (i < cs.size()) {
        size_t k = 0;
        if (is_py_space(utf8::next(cs[i], k))) break;
        word += cs[i++];
      }
      out.emplace_back(word);
      ++n;
    }
    return Value(out);
  }
  const std::string& d = sep.str();
  size_t pos = 0;
  int64_t n = 0;
  while (maxsplit < 0 || n < maxsplit) {
    const size_t f = s.find(d, pos);
    if (f == std::string::npos) break;
    out.emplace_back(s.substr(pos, f - pos));
    pos = f + d.size();
    ++n;
  }
  out.emplace_back(s.substr(pos));
  return Value(out);
}

bool prefix_match(const std::string& s, const Value& arg, bool at_start) {
  auto one = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return at_start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (arg.is_array()) {
    for (const auto& a : arg.array())
      if (a.is_string() && one(a.str())) return true;
    return false;
  }
  return arg.is_string() && one(arg.str());
}

const std::string& need_str(Interpreter& in, const Value& v, Pos p, const char* what) {
  if (!v.is_string()) in.fail(p, std::string(what) + " expects a string, got " + v.type_name());
  return v.str();
}

Value bind(Value self, std::string name, Value (*f)(Interpreter&, const Value&, CallArgs&)) {
  return Value::function([self, f](Interpreter& in, CallArgs& a) { return f(in, self, a); }, std::move(name));
}

Value string_method(const Value& s, const std::string& name) {
  using F = Value (*)(Interpreter&, const Value&, CallArgs&);
  static const std::unordered_map<std::string, F> methods = {
      {"strip", [](Interpreter&, const Value& s, CallArgs& a) { return Value(py_strip(s.str(), a.get(0, "chars"), true, true)); }},
      {"lstrip", [](Interpreter&, const Value& s, CallArgs& a) { return Value(py_strip(s.str(), a.get(0, "chars"), true, false)); }},
      {"rstrip", [](Interpreter&, const Value& s, CallArgs& a) { return Value(py_strip(s.str(), a.get(0, "chars"), false, true)); }},
      {"startswith", [](Interpreter&, const Value& s, CallArgs& a) { return Value(prefix_match(s.str(), a.get(0, "prefix"), true)); }},
      {"endswith", [](Interpreter&, const Value& s, CallArgs& a) { return Value(prefix_match(s.str(), a.get(0, "suffix"), false)); }},
      {"split", [](Interpreter&, const Value& s, CallArgs& a) {
         const Value m = a.get(1, "maxsplit");
         return py_split(s.str(), a.get(0, "sep"), m.is_int() ? m.as_int() : -1);
       }},
      {"upper", [](Interpreter&, const Value& s, CallArgs&) { return Value(ascii_case(s.str(), true)); }},
      {"lower", [](Interpreter&, const Value& s, CallArgs&) { return Value(ascii_case(s.str(), false)); }},
      {"replace", [](Interpreter& in, const Value& s, CallArgs& a) {
         const Value c = a.get(2, "count");
         return Value(replace_str(s.str(), need_str(in, a.get(0, "old"), a.pos, "replace"), need_str(in, a.get(1, "new"), a.pos, "replace"),
                                  c.is_int() ? c.as_int() : -1, in, a.pos));
       }},
      {"find", [](Interpreter& in, const Value& s, CallArgs& a) {
         const size_t f = s.str().find(need_str(in, a.get(0, "sub"), a.pos, "find"));
         return f == std::string::npos ? Value(static_cast<int64_t>(-1)) : Value(static_cast<int64_t>(chars_of(s.str().substr(0, f)).size()));
       }},
      {"count", [](Interpreter& in, const Value& s, CallArgs& a) {
         const std::string& sub = need_str(in, a.get(0, "sub"), a.pos, "count");
         int64_t n = 0;
         if (sub.empty()) return Value(static_cast<int64_t>(chars_of(s.str()).size() + 1));
         for (size_t p = s.str().find(sub); p != std::string::npos; p = s.str().find(sub, p + sub.size())) ++n;
         return Value(n);
       }},
      {"join", [](Interpreter& in, const Value& s, CallArgs& a) {
         std::string out;
         bool first = true;
         for (const auto& x : iterate(in, a.get(0, "iterable"), a.pos)) {
           if (!first) out += s.str();
           first = false;
           out += need_str(in, x, a.pos, "join");
         }
         return Value(out);
       }},
      {"title", [](Interpreter&, const Value& s, CallArgs&) {
         std::string out = s.str();
         bool prev_alpha = false;
         for (auto& c : out) {
           const bool alpha = std::isalpha(static_cast<unsigned char>(c));
           c = alpha ? (prev_alpha ? std::tolower(static_cast<unsigned char>(c)) : std::toupper(static_cast<unsigned char>(c))) : c;
           prev_alpha = alpha;
         }
         return Value(out);
       }},
      {"capitalize", [](Interpreter&, const Value& s, CallArgs&) {
         std::string out = ascii_case(s.str(), false);
         if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
         return Value(out);
       }},
      {"isdigit", [](Interpreter&, const Value& s, CallArgs&) {
         return Value(!s.str().empty() && std::all_of(s.str().begin(), s.str().end(), [](char c) { return c >= '0' && c <= '9'; }));
       }},
      {"isspace", [](Interpreter&, const Value& s, CallArgs&) {
         return Value(!s.str().empty() && py_strip(s.str(), Value(), true, true).empty());
       }},
  };
  auto it = methods.find(name);
  if (it == methods.end()) return Value();
  return bind(s, name, it->second);
}

Value object_method(const Value& o, const std::string& name) {
  using F = Value (*)(Interpreter&, const Value&, CallArgs&);
  static const std::unordered_map<std::string, F> methods = {
      {"items", [](Interpreter&, const Value& o, CallArgs&) {
         Array out;
         for (const auto& [k, v] : o.object().items)
           if (k != "__namespace__") out.emplace_back(Array{Value(k), v});
         return Value(out);
       }},
      {"keys", [](Interpreter&, const Value& o, CallArgs&) {
         Array out;
         for (const auto& kv : o.object().items)
           if (kv.first != "__namespace__") out.emplace_back(kv.first);
         return Value(out);
       }},
      {"values", [](Interpreter&, const Value& o, CallArgs&) {
         Array out;
         for (const auto& kv : o.object().items)
           if (kv.first != "__namespace__") out.push_back(kv.second);
         return Value(out);
       }},
      {"get", [](Interpreter& in, const Value& o, CallArgs& a) {
         const Value k = a.get(0, "key");
         if (k.is_string())
           if (const Value* v = o.object().find(k.str())) return *v;
         return a.get(1, "default", Value::none());
       }},
  };
  auto it = methods.find(name);
  if (it == methods.end()) return Value();
  return bind(o, name, it->second);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

int64_t length_of(Interpreter& in, const Value& v, Pos p) {
  if (v.is_string()) return static_cast<int64_t>(chars_of(v.str()).size());
  if (v.is_array()) return static_cast<int64_t>(v.array().size());
  if (v.is_object()) return static_cast<int64_t>(iterate(in, v, p).size());
  if (v.is_undefined()) return 0;
  in.fail(p, "object of type '" + v.type_name() + "' has no len()");
}

// Attribute lookup as Jinja's environment.getattr does: the attribute (method) first, then the item.
Value attribute_path(Interpreter& in, const Value& v, const Value& attr, Pos p) {
  if (attr.is_undefined() || attr.is_none()) return v;
  if (attr.is_int()) return in.get_item(v, attr, p);
  Value cur = v;
  const std::string path = attr.to_str();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && part.size() < 18 && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = numeric ? in.get_item(cur, Value(static_cast<int64_t>(std::stoll(part))), p) : in.get_item(cur, Value(part), p);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

std::vector<Value> sorted_values(Interpreter& in, std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute, Pos p) {
  auto key = [&](const Value& v) {
    Value k = attribute_path(in, v, attribute, p);
    if (!case_sensitive && k.is_string()) return Value(ascii_case(k.str(), false));
    return k;
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& v : items) keyed.emplace_back(key(v), v);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    const auto c = compare(a.first, b.first);
    if (!c) in.fail(p, "cannot sort values of types '" + a.first.type_name() + "' and '" + b.first.type_name() + "'");
    return reverse ? *c > 0 : *c < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return out;
}
}  // namespace

Value Interpreter::get_attr(const Value& obj, const std::string& name, Pos p) {
  if (obj.is_undefined()) fail(p, "cannot read attribute '" + name + "' of an undefined value");
  if (obj.is_string()) return string_method(obj, name);
  if (obj.is_object()) {
    Value m = object_method(obj, name);
    if (!m.is_undefined() && !obj.object().find("__namespace__")) return m;
    if (const Value* v = obj.object().find(name)) return *v;
    return Value();
  }
  return Value();
}

bool Interpreter::run_test(const std::string& name, const Value& v, CallArgs& a, Pos p) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_int() || v.is_float();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_array() || v.is_object() || v.is_string();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
  if (name == "callable") return v.is_function();
  if (name == "lower") return v.is_string() && ascii_case(v.str(), false) == v.str();
  if (name == "upper") return v.is_string() && ascii_case(v.str(), true) == v.str();
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (!v.is_int()) fail(p, "test '" + name + "' needs an integer");
    if (name == "even") return v.as_int() % 2 == 0;
    if (name == "odd") return v.as_int() % 2 != 0;
    const int64_t d = a.get(0, "num").as_int();
    if (d == 0) fail(p, "divisibleby(0)");
    return v.as_int() % d == 0;
  }
  const Value other = a.get(0, "other");
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other);
  if (name == "ne" || name == "!=") return !equals(v, other);
  if (name == "lt" || name == "lessthan" || name == "<" || name == "le" || name == "<=" || name == "gt" ||
      name == "greaterthan" || name == ">" || name == "ge" || name == ">=") {
    const auto c = compare(v, other);
    if (!c) fail(p, "cannot compare '" + v.type_name() + "' and '" + other.type_name() + "'");
    if (name == "lt" || name == "lessthan" || name == "<") return *c < 0;
    if (name == "le" || name == "<=") return *c <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return *c > 0;
    return *c >= 0;
  }
  if (name == "in") {
    const Value c = a.get(0, "seq");
    if (c.is_string()) return v.is_string() && c.str().find(v.str()) != std::string::npos;
    for (const auto& x : iterate(*this, c, p))
      if (equals(x, v)) return true;
    return false;
  }
  if (name == "sameas") {
    if (v.identity() || other.identity()) return v.identity() == other.identity();
    return v.kind() == other.kind() && equals(v, other);
  }
  fail(p, "unknown test '" + name + "'");
}

Value Interpreter::run_filter(const std::string& name, const Value& v, CallArgs& a, Pos p) {
  if (name == "length" || name == "count") return Value(length_of(*this, v, p));
  if (name == "trim") return Value(py_strip(v.to_str(), a.get(0, "chars"), true, true));
  if (name == "tojson") {
    const Value indent = a.get(0, "indent");
    if (!indent.is_undefined() && !indent.is_none() && !indent.is_int()) fail(p, "tojson indent must be an integer");
    return Value(v.to_json(indent.is_int() ? static_cast<int>(indent.as_int()) : -1, a.get(99, "sort_keys").truthy()));
  }
  if (name == "default" || name == "d") {
    const bool boolean = a.get(1, "boolean").truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
    return v;
  }
  if (name == "join") {
    const Value sep = a.get(0, "d", Value(""));
    const Value attr = a.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& x : iterate(*this, v, p)) {
      step(p);
      if (!first) out += sep.to_str();
      first = false;
      out += attribute_path(*this, x, attr, p).to_str();
      if (out.size() > limits.max_output_bytes) fail(p, "string too large");
    }
    return Value(out);
  }
  if (name == "upper") return Value(ascii_case(v.to_str(), true));
  if (name == "lower") return Value(ascii_case(v.to_str(), false));
  if (name == "capitalize" || name == "title") {
    CallArgs none;
    return call(string_method(Value(v.to_str()), name), none, p);
  }
  if (name == "replace") {
    const Value c = a.get(2, "count");
    return Value(replace_str(v.to_str(), a.get(0, "old").to_str(), a.get(1, "new").to_str(), c.is_int() ? c.as_int() : -1, *this, p));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value(Array{});
    if (!v.is_object()) fail(p, "items filter needs a mapping, got " + v.type_name());
    CallArgs none;
    return call(object_method(v, "items"), none, p);
  }
  if (name == "dictsort") {
    if (!v.is_object()) fail(p, "dictsort needs a mapping");
    CallArgs none;
    auto items = call(object_method(v, "items"), none, p).array();
    const bool by_value = a.get(1, "by").to_str() == "value";
    return Value(sorted_values(*this, items, a.get(2, "reverse").truthy(), a.get(0, "case_sensitive").truthy(),
                               Value(static_cast<int64_t>(by_value ? 1 : 0)), p));
  }
  if (name == "first" || name == "last") {
    auto items = iterate(*this, v, p);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value(iterate(*this, v, p));
  if (name == "string") return Value(v.to_str());
  if (name == "safe") return v;
  if (name == "escape" || name == "e" || name == "forceescape") return Value(html_escape(v.to_str()));
  if (name == "int") {
    if (v.is_number()) return Value(v.as_int());
    if (v.is_string()) {
      try {
        size_t used = 0;
        const std::string t = py_strip(v.str(), Value(), true, true);
        const long long x = std::stoll(t, &used, static_cast<int>(a.get(1, "base", Value(10)).as_int()));
        if (used == t.size()) return Value(static_cast<int64_t>(x));
        return Value(static_cast<int64_t>(std::stod(t)));
      } catch (...) {
      }
    }
    return a.get(0, "default", Value(0));
  }
  if (name == "float") {
    if (v.is_number()) return Value(v.as_float());
    if (v.is_string()) {
      try {
        return Value(std::stod(v.str()));
      } catch (...) {
      }
    }
    return a.get(0, "default", Value(0.0));
  }
  if (name == "abs") {
    if (!v.is_number()) fail(p, "abs needs a number");
    return v.is_float() ? Value(std::fabs(v.as_float())) : Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (name == "round") {
    const int64_t prec = a.get(0, "precision", Value(0)).as_int();
    const std::string method = a.get(1, "method", Value("common")).to_str();
    const double m = std::pow(10.0, static_cast<double>(prec));
    double x = v.as_float() * m;
    x = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    return Value(x / m);
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto cs = chars_of(v.str());
      std::string out;
      for (size_t i = cs.size(); i-- > 0;) out += cs[i];
      return Value(out);
    }
    auto items = iterate(*this, v, p);
    std::reverse(items.begin(), items.end());
    return Value(items);
  }
  if (name == "sort") {
    return Value(sorted_values(*this, iterate(*this, v, p), a.get(0, "reverse").truthy(), a.get(1, "case_sensitive").truthy(),
                               a.get(2, "attribute"), p));
  }
  if (name == "unique") {
    Array out;
    for (const auto& x : iterate(*this, v, p)) {
      step(p);
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equals(x, y); })) out.push_back(x);
    }
    return Value(out);
  }
  if (name == "min" || name == "max") {
    auto items = sorted_values(*this, iterate(*this, v, p), false, a.get(0, "case_sensitive").truthy(), a.get(1, "attribute"), p);
    if (items.empty()) return Value();
    return name == "min" ? items.front() : items.back();
  }
  if (name == "sum") {
    Value acc = a.get(1, "start", Value(0));
    const Value attr = a.get(0, "attribute");
    for (const auto& x : iterate(*this, v, p)) {
      const Value y = attribute_path(*this, x, attr, p);
      if (!y.is_number() || !acc.is_number()) fail(p, "sum needs numbers");
      acc = acc.is_float() || y.is_float() ? Value(acc.as_float() + y.as_float()) : Value(acc.as_int() + y.as_int());
    }
    return acc;
  }
  if (name == "map") {
    Array out;
    if (a.has(99, "attribute")) {
      const Value attr = a.get(99, "attribute");
      const Value def = a.get(99, "default");
      for (const auto& x : iterate(*this, v, p)) {
        Value y = attribute_path(*this, x, attr, p);
        out.push_back(y.is_undefined() && !def.is_undefined() ? def : y);
      }
      return Value(out);
    }
    if (a.args.empty()) fail(p, "map needs a filter name or attribute=");
    CallArgs rest;
    rest.args.assign(a.args.begin() + 1, a.args.end());
    rest.kwargs = a.kwargs;
    const std::string f = a.args[0].to_str();
    for (const auto& x : iterate(*this, v, p)) out.push_back(run_filter(f, x, rest, p));
    return Value(out);
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool want = name == "select" || name == "selectattr";
    const size_t test_at = by_attr ? 1 : 0;
    CallArgs rest;
    if (a.args.size() > test_at + 1) rest.args.assign(a.args.begin() + test_at + 1, a.args.end());
    Array out;
    for (const auto& x : iterate(*this, v, p)) {
      step(p);
      const Value subject = by_attr ? attribute_path(*this, x, a.get(0, "attribute"), p) : x;
      const bool r = a.args.size() > test_at ? run_test(a.args[test_at].to_str(), subject, rest, p) : subject.truthy();
      if (r == want) out.push_back(x);
    }
    return Value(out);
  }
  if (name == "indent") {
    const Value w = a.get(0, "width", Value(4));
    const std::string pad = w.is_string() ? w.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, w.as_int())), ' ');
    const bool first = a.get(1, "first").truthy(), blank = a.get(2, "blank").truthy();
    const std::string s = v.to_str();
    std::string out;
    size_t start = 0;
    bool is_first = true;
    while (start <= s.size()) {
      const size_t nl = s.find('\n', start);
      const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      if ((!is_first || first) && (blank || !line.empty())) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      is_first = false;
    }
    return Value(out);
  }
  if (name == "wordcount") return Value(static_cast<int64_t>(py_split(v.to_str(), Value(), -1).array().size()));
  if (name == "batch") {
    const int64_t n = a.get(0, "linecount").as_int();
    if (n <= 0) fail(p, "batch size must be positive");
    Array out, cur;
    for (const auto& x : iterate(*this, v, p)) {
      cur.push_back(x);
      if (static_cast<int64_t>(cur.size()) == n) {
        out.emplace_back(cur);
        cur.clear();
      }
    }
    if (!cur.empty()) out.emplace_back(cur);
    return Value(out);
  }
  fail(p, "unknown filter '" + name + "'");
}

void add_builtin_globals(std::unordered_map<std::string, Value>& g) {
  g["range"] = Value::function(
      [](Interpreter& in, CallArgs& a) -> Value {
        int64_t start = 0, stop = 0, step = 1;
        if (a.args.size() == 1) stop = a.args[0].as_int();
        else if (a.args.size() >= 2) {
          start = a.args[0].as_int();
          stop = a.args[1].as_int();
          if (a.args.size() >= 3) step = a.args[2].as_int();
        } else in.fail(a.pos, "range() needs arguments");
        if (step == 0) in.fail(a.pos, "range() step must not be zero");
        const int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0) : (start > stop ? (start - stop - step - 1) / -step : 0);
        if (n > 100000) in.fail(a.pos, "range() of " + std::to_string(n) + " items exceeds the sandbox limit of 100000");
        Array out;
        for (int64_t i = 0; i < n; ++i) out.emplace_back(start + i * step);
        return Value(out);
      },
      "range");
  g["namespace"] = Value::function(
      [](Interpreter&, CallArgs& a) -> Value {
        Object o;
        o.set("__namespace__", Value(true));
        for (const auto& arg : a.args)
          if (arg.is_object())
            for (const auto& [k, v] : arg.object().items) o.set(k, v);
        for (const auto& [k, v] : a.kwargs) o.set(k, v);
        return Value(o);
      },
      "namespace");
  g["dict"] = Value::function(
      [](Interpreter&, CallArgs& a) -> Value {
        Object o;
        for (const auto& [k, v] : a.kwargs) o.set(k, v);
        return Value(o);
      },
      "dict");
  g["raise_exception"] = Value::function(
      [](Interpreter&, CallArgs& a) -> Value { throw TemplateRaised{a.get(0, "message").to_str()}; }, "raise_exception");
  g["strftime_now"] = Value::function(
      [](Interpreter& in, CallArgs& a) -> Value {
        const std::time_t now = in.fixed_now ? *in.fixed_now : std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[256];
        const std::string fmt = a.get(0, "format").to_str();
        const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
        return Value(std::string(buf, n));
      },
      "strftime_now");
}

}  // namespace rs::jinja
