#pragma once
// Renders a parsed template. Sandboxed: templates reach only the values they are given and the
// builtins below (no files, no environment), and every render is bounded in steps, loop
// iterations, call depth and output size, so a hostile template ends in an error, not a hang.
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja_ast.h"

namespace rs::jinja {

struct Limits {
  size_t max_output_bytes = 8u << 20;
  int64_t max_steps = 20'000'000;  // expression and statement evaluations
  int max_call_depth = 100;        // nested macro calls
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
  Pos pos;
  // Positional `index` or keyword `name`, else `fallback`.
  Value get(size_t index, const char* name, Value fallback = Value()) const;
  bool has(size_t index, const char* name) const;
};

struct Interpreter {
  Limits limits;
  std::optional<std::time_t> fixed_now;  // strftime_now's clock, when set (tests)
  std::vector<std::unordered_map<std::string, Value>> scopes;
  int64_t steps = 0;
  int call_depth = 0;

  std::string render(const Template& t, const std::unordered_map<std::string, Value>& globals);

  // Used by builtins.
  [[noreturn]] void fail(Pos p, const std::string& msg) const;
  Value call(const Value& fn, CallArgs& args, Pos p);
  bool run_test(const std::string& name, const Value& v, CallArgs& args, Pos p);
  Value run_filter(const std::string& name, const Value& v, CallArgs& args, Pos p);
  Value get_attr(const Value& obj, const std::string& name, Pos p);
  Value get_item(const Value& obj, const Value& key, Pos p);
  void step(Pos p);

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, std::string& out);
  Flow exec_stmt(const Stmt& s, std::string& out);
  void exec_for(const Stmt& s, std::string& out);
  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v);
  void append(std::string& out, const std::string& s, Pos p);
  Value make_macro(const Stmt& s);
  CallArgs eval_args(const Expr& e);
};

// Iterating a value the way a Jinja for loop does (dict -> keys, string -> characters).
std::vector<Value> iterate(Interpreter& in, const Value& v, Pos p);

}  // namespace rs::jinja
