#pragma once
// Values of the Jinja subset, with Python's semantics (what transformers' Jinja2 does): truthiness,
// str()/repr(), ==, ordering, and json.dumps for `tojson`. Lists and dicts are shared by reference,
// like Python objects; dicts keep insertion order.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace rs::jinja {

class Value;
using Array = std::vector<Value>;

struct Object {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  void set(const std::string& key, Value v);
};

struct Interpreter;
struct CallArgs;
// A callable: macros, bound methods, global functions (range, namespace, raise_exception, ...).
using Function = std::function<Value(Interpreter&, CallArgs&)>;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, Array, Object, Function };

  Value() = default;  // undefined
  static Value none() { Value v; v.kind_ = Kind::None; return v; }
  Value(bool b) : kind_(Kind::Bool), int_(b) {}
  Value(int64_t i) : kind_(Kind::Int), int_(i) {}
  Value(int i) : kind_(Kind::Int), int_(i) {}
  Value(double d) : kind_(Kind::Float), float_(d) {}
  Value(std::string s) : kind_(Kind::String), str_(std::make_shared<std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(Array a) : kind_(Kind::Array), arr_(std::make_shared<Array>(std::move(a))) {}
  Value(Object o) : kind_(Kind::Object), obj_(std::make_shared<Object>(std::move(o))) {}
  static Value function(Function f, std::string name) {
    Value v;
    v.kind_ = Kind::Function;
    v.fn_ = std::make_shared<Function>(std::move(f));
    v.str_ = std::make_shared<std::string>(std::move(name));
    return v;
  }
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(float_) : int_; }
  double as_float() const { return kind_ == Kind::Float ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return *str_; }
  Array& array() const { return *arr_; }
  Object& object() const { return *obj_; }
  const Function& fn() const { return *fn_; }
  const std::string& function_name() const { return *str_; }
  // Identity of a shared list/dict (Python `is`).
  const void* identity() const;

  bool truthy() const;
  std::string to_str() const;   // Python str()
  std::string repr() const;     // Python repr()
  // Python json.dumps(ensure_ascii=False, indent, separators, sort_keys) as transformers' tojson.
  std::string to_json(int indent, bool sort_keys, int depth = 0) const;
  std::string type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<std::string> str_;
  std::shared_ptr<Array> arr_;
  std::shared_ptr<Object> obj_;
  std::shared_ptr<Function> fn_;
};

bool equals(const Value& a, const Value& b);
// Python ordering; nullopt when Python would raise TypeError.
std::optional<int> compare(const Value& a, const Value& b);
std::string python_float_repr(double d);

}  // namespace rs::jinja
