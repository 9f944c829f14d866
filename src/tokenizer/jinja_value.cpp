#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/utf8.h"

namespace rs::jinja {

const Value* Object::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
Value* Object::find(const std::string& key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
void Object::set(const std::string& key, Value v) {
  if (Value* p = find(key)) *p = std::move(v);
  else items.emplace_back(key, std::move(v));
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& e : j) a.push_back(from_json(e));
      return Value(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      for (const auto& [k, v] : j.items()) o.items.emplace_back(k, from_json(v));
      return Value(std::move(o));
    }
    default: return none();
  }
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::Array: return arr_.get();
    case Kind::Object: return obj_.get();
    case Kind::String: return str_.get();
    case Kind::Function: return fn_.get();
    default: return nullptr;
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool:
    case Kind::Int: return int_ != 0;
    case Kind::Float: return float_ != 0.0;
    case Kind::String: return !str_->empty();
    case Kind::Array: return !arr_->empty();
    case Kind::Object: return !obj_->items.empty();
    case Kind::Function: return true;
  }
  return false;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, laid out like Python's repr: plain notation for exponents in
  // [-4, 16), scientific otherwise, and always a '.0' on integral values.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const auto e_pos = sci.find('e');
  std::string mant = sci.substr(0, e_pos);
  const int exp = std::stoi(sci.substr(e_pos + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out;
  if (exp >= -4 && exp < 16) {
    const int point = exp + 1;  // digits before the decimal point
    if (point <= 0) {
      out = "0." + std::string(-point, '0') + digits;
    } else if (point >= static_cast<int>(digits.size())) {
      out = digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, point) + "." + digits.substr(point);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

namespace {
std::string py_str_repr(const std::string& s) {
  // Python picks single quotes unless the text has one and no double quote.
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == q || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else out.push_back(static_cast<char>(c));
  }
  out.push_back(q);
  return out;
}

void json_string(const std::string& s, std::string& out) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}
}  // namespace

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return int_ ? "True" : "False";
    case Kind::Int: return std::to_string(int_);
    case Kind::Float: return python_float_repr(float_);
    case Kind::String: return *str_;
    case Kind::Function: return "<function " + *str_ + ">";
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::String: return py_str_repr(*str_);
    case Kind::Array: {
      std::string out = "[";
      for (size_t i = 0; i < arr_->size(); ++i) {
        if (i) out += ", ";
        out += (*arr_)[i].repr();
      }
      return out + "]";
    }
    case Kind::Object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : obj_->items) {
        if (!first) out += ", ";
        first = false;
        out += py_str_repr(k) + ": " + v.repr();
      }
      return out + "}";
    }
    default: return to_str();
  }
}

std::string Value::to_json(int indent, bool sort_keys, int depth) const {
  std::string out;
  const std::string nl = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * (depth + 1), ' ') : "";
  const std::string nl_end = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * depth, ' ') : "";
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return "null";
    case Kind::Bool: return int_ ? "true" : "false";
    case Kind::Int: return std::to_string(int_);
    case Kind::Float:
      if (std::isnan(float_)) return "NaN";
      if (std::isinf(float_)) return float_ > 0 ? "Infinity" : "-Infinity";
      return python_float_repr(float_);
    case Kind::String: json_string(*str_, out); return out;
    case Kind::Function: return "null";
    case Kind::Array: {
      if (arr_->empty()) return "[]";
      out = "[";
      for (size_t i = 0; i < arr_->size(); ++i) {
        if (i) out += item_sep;
        out += nl + (*arr_)[i].to_json(indent, sort_keys, depth + 1);
      }
      return out + nl_end + "]";
    }
    case Kind::Object: {
      if (obj_->items.empty()) return "{}";
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : obj_->items) items.push_back(&kv);
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out = "{";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        out += nl;
        json_string(items[i]->first, out);
        out += ": " + items[i]->second.to_json(indent, sort_keys, depth + 1);
      }
      return out + nl_end + "}";
    }
  }
  return "null";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::Array: return "list";
    case Kind::Object: return "dict";
    case Kind::Function: return "function";
  }
  return "?";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.str() == b.str();
    case Value::Kind::Array: {
      if (a.array().size() != b.array().size()) return false;
      for (size_t i = 0; i < a.array().size(); ++i)
        if (!equals(a.array()[i], b.array()[i])) return false;
      return true;
    }
    case Value::Kind::Object: {
      if (a.object().items.size() != b.object().items.size()) return false;
      for (const auto& [k, v] : a.object().items) {
        const Value* o = b.object().find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::Function: return a.identity() == b.identity();
    default: return false;
  }
}

std::optional<int> compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.as_float(), y = b.as_float();
    if (!a.is_float() && !b.is_float()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());  // UTF-8 byte order = code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_array() && b.is_array()) {
    const auto &x = a.array(), &y = b.array();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return std::nullopt;
}

}  // namespace rs::jinja
