#include "tokenizer/jinja_interpreter.h"

#include <cmath>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace rs::jinja {

Value CallArgs::get(size_t index, const char* name, Value fallback) const {
  if (index < args.size()) return args[index];
  for (const auto& [k, v] : kwargs)
    if (k == name) return v;
  return fallback;
}
bool CallArgs::has(size_t index, const char* name) const {
  if (index < args.size()) return true;
  for (const auto& kv : kwargs)
    if (kv.first == name) return true;
  return false;
}

void Interpreter::fail(Pos p, const std::string& msg) const {
  throw Error("chat template line " + std::to_string(p.line) + " column " + std::to_string(p.column) + ": " + msg);
}

void Interpreter::step(Pos p) {
  if (++steps > limits.max_steps)
    fail(p, "template exceeded " + std::to_string(limits.max_steps) + " evaluation steps (runaway loop?)");
}

void Interpreter::append(std::string& out, const std::string& s, Pos p) {
  if (out.size() + s.size() > limits.max_output_bytes)
    fail(p, "template output exceeds " + std::to_string(limits.max_output_bytes) + " bytes");
  out += s;
}

std::string Interpreter::render(const Template& t, const std::unordered_map<std::string, Value>& globals) {
  scopes.clear();
  scopes.push_back(globals);
  scopes.emplace_back();
  steps = 0;
  call_depth = 0;
  std::string out;
  exec(t.body, out);
  return out;
}

Value Interpreter::lookup(const std::string& name) const {
  for (size_t i = scopes.size(); i-- > 0;) {
    auto it = scopes[i].find(name);
    if (it != scopes[i].end()) return it->second;
  }
  return Value();
}

void Interpreter::assign(const std::string& name, Value v) { scopes.back()[name] = std::move(v); }

Interpreter::Flow Interpreter::exec(const Body& body, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s, std::string& out) {
  step(s.pos);
  switch (s.kind) {
    case StmtKind::Text: append(out, s.text, s.pos); break;
    case StmtKind::Output: append(out, eval(*s.expr).to_str(), s.pos); break;
    case StmtKind::If:
      for (const auto& [cond, body] : s.branches)
        if (eval(*cond).truthy()) return exec(body, out);
      return exec(s.else_body, out);
    case StmtKind::For: exec_for(s, out); break;
    case StmtKind::Set: {
      Value v = eval(*s.expr);
      if (s.is_attr_target) {
        Value ns = lookup(s.targets[0]);
        if (!ns.is_object() || !ns.object().find("__namespace__"))
          fail(s.pos, "cannot assign attribute on '" + s.targets[0] + "': only a namespace() allows it");
        ns.object().set(s.targets[1], std::move(v));
      } else if (s.targets.size() == 1) {
        assign(s.targets[0], std::move(v));
      } else {
        const auto items = iterate(*this, v, s.pos);
        if (items.size() != s.targets.size())
          fail(s.pos, "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(s.targets.size()) + " names");
        for (size_t i = 0; i < items.size(); ++i) assign(s.targets[i], items[i]);
      }
      break;
    }
    case StmtKind::SetBlock: {
      std::string captured;
      exec(s.body, captured);
      Value v(captured);
      if (s.filter) {
        // The filter chain's innermost input is the captured text.
        std::vector<const Expr*> chain;
        for (const Expr* f = s.filter.get(); f; f = f->a.get()) chain.push_back(f);
        for (size_t i = chain.size(); i-- > 0;) {
          CallArgs args = eval_args(*chain[i]);
          v = run_filter(chain[i]->name, v, args, chain[i]->pos);
        }
      }
      assign(s.targets[0], v);
      break;
    }
    case StmtKind::Macro: assign(s.name, make_macro(s)); break;
    case StmtKind::CallBlock: {
      // {% call m() %}body{% endcall %}: the body is `caller()` inside m.
      const Stmt* self = &s;
      auto caller_scopes = scopes;
      Value caller = Value::function(
          [self, caller_scopes](Interpreter& in, CallArgs& a) -> Value {
            auto saved = std::move(in.scopes);
            in.scopes = caller_scopes;
            in.scopes.emplace_back();
            for (size_t i = 0; i < self->params.size(); ++i) in.assign(self->params[i].first, a.get(i, self->params[i].first.c_str()));
            std::string o;
            try {
              in.exec(self->body, o);
            } catch (...) {
              in.scopes = std::move(saved);
              throw;
            }
            in.scopes = std::move(saved);
            return Value(o);
          },
          "caller");
      scopes.emplace_back();
      assign("caller", caller);
      Value r;
      try {
        r = eval(*s.expr);
      } catch (...) {
        scopes.pop_back();
        throw;
      }
      scopes.pop_back();
      append(out, r.to_str(), s.pos);
      break;
    }
    case StmtKind::FilterBlock: {
      std::string captured;
      exec(s.body, captured);
      Value v(captured);
      std::vector<const Expr*> chain;
      for (const Expr* f = s.filter.get(); f; f = f->a.get()) chain.push_back(f);
      for (size_t i = chain.size(); i-- > 0;) {
        CallArgs args = eval_args(*chain[i]);
        v = run_filter(chain[i]->name, v, args, chain[i]->pos);
      }
      append(out, v.to_str(), s.pos);
      break;
    }
    case StmtKind::Break: return Flow::Break;
    case StmtKind::Continue: return Flow::Continue;
    case StmtKind::Scope: return exec(s.body, out);
  }
  return Flow::Normal;
}

void Interpreter::exec_for(const Stmt& s, std::string& out) {
  if (s.recursive) fail(s.pos, "recursive for loops are not supported");
  const Value iterable = eval(*s.expr);
  std::vector<Value> items = iterate(*this, iterable, s.expr->pos);
  auto bind = [&](const Value& item) {
    if (s.targets.size() == 1) {
      assign(s.targets[0], item);
      return;
    }
    const auto parts = iterate(*this, item, s.pos);
    if (parts.size() != s.targets.size())
      fail(s.pos, "cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.targets.size()) + " loop variables");
    for (size_t i = 0; i < parts.size(); ++i) assign(s.targets[i], parts[i]);
  };
  if (s.filter) {
    // `for x in xs if cond`: the filter runs before loop.* is computed, as in Jinja.
    std::vector<Value> kept;
    scopes.emplace_back();
    for (const auto& it : items) {
      step(s.pos);
      bind(it);
      if (eval(*s.filter).truthy()) kept.push_back(it);
    }
    scopes.pop_back();
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(s.else_body, out);
    return;
  }
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    step(s.pos);
    scopes.emplace_back();
    Object loop;
    loop.set("index0", Value(i));
    loop.set("index", Value(i + 1));
    loop.set("revindex0", Value(n - i - 1));
    loop.set("revindex", Value(n - i));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == n - 1));
    loop.set("length", Value(n));
    loop.set("depth", Value(1));
    loop.set("depth0", Value(0));
    loop.set("previtem", i > 0 ? items[i - 1] : Value());
    loop.set("nextitem", i + 1 < n ? items[i + 1] : Value());
    loop.set("cycle", Value::function(
                          [i](Interpreter& in, CallArgs& a) -> Value {
                            if (a.args.empty()) in.fail(a.pos, "loop.cycle() needs at least one value");
                            return a.args[static_cast<size_t>(i) % a.args.size()];
                          },
                          "cycle"));
    assign("loop", Value(std::move(loop)));
    bind(items[i]);
    Flow f;
    try {
      f = exec(s.body, out);
    } catch (...) {
      scopes.pop_back();
      throw;
    }
    scopes.pop_back();
    if (f == Flow::Break) break;
  }
}

Value Interpreter::make_macro(const Stmt& s) {
  const Stmt* m = &s;
  return Value::function(
      [m](Interpreter& in, CallArgs& a) -> Value {
        if (++in.call_depth > in.limits.max_call_depth)
          in.fail(a.pos, "macro calls nested deeper than " + std::to_string(in.limits.max_call_depth));
        std::unordered_map<std::string, Value> locals;
        Array varargs;
        for (size_t i = 0; i < a.args.size(); ++i) {
          if (i < m->params.size()) locals[m->params[i].first] = a.args[i];
          else varargs.push_back(a.args[i]);
        }
        Object extra_kwargs;
        for (const auto& [k, v] : a.kwargs) {
          bool known = false;
          for (const auto& p : m->params) known |= p.first == k;
          if (known) locals[k] = v;
          else extra_kwargs.set(k, v);
        }
        auto saved = std::move(in.scopes);
        in.scopes.clear();
        in.scopes.push_back(saved.front());
        in.scopes.emplace_back();
        if (saved.size() > 1) {
          // Caller-visible macros and template-level names (Jinja resolves them at call time).
          for (const auto& [k, v] : saved[1]) in.scopes.back()[k] = v;
        }
        in.scopes.emplace_back();
        std::string out;
        try {
          for (const auto& p : m->params) {
            if (!locals.count(p.first)) locals[p.first] = p.second ? in.eval(*p.second) : Value();
          }
          for (auto& [k, v] : locals) in.assign(k, v);
          in.assign("varargs", Value(varargs));
          in.assign("kwargs", Value(extra_kwargs));
          if (auto c = saved.back().find("caller"); c != saved.back().end()) in.assign("caller", c->second);
          in.exec(m->body, out);
        } catch (...) {
          in.scopes = std::move(saved);
          --in.call_depth;
          throw;
        }
        in.scopes = std::move(saved);
        --in.call_depth;
        return Value(out);
      },
      s.name);
}

CallArgs Interpreter::eval_args(const Expr& e) {
  CallArgs a;
  a.pos = e.pos;
  for (const auto& x : e.args) a.args.push_back(eval(*x));
  for (const auto& [k, x] : e.kwargs) a.kwargs.emplace_back(k, eval(*x));
  return a;
}

Value Interpreter::call(const Value& fn, CallArgs& args, Pos p) {
  if (!fn.is_function()) fail(p, "'" + fn.type_name() + "' object is not callable");
  args.pos = p;
  return fn.fn()(*this, args);
}

namespace {
int64_t py_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

Value slice(Interpreter& in, const Value& v, const Value& start, const Value& stop, const Value& stepv, Pos p) {
  const int64_t step = stepv.is_undefined() || stepv.is_none() ? 1 : stepv.as_int();
  if (step == 0) in.fail(p, "slice step cannot be zero");
  std::vector<Value> items;
  std::vector<std::string> chars;
  int64_t n;
  if (v.is_string()) {
    const auto& s = v.str();
    for (size_t i = 0; i < s.size();) {
      const size_t b = i;
      utf8::next(s, i);
      chars.push_back(s.substr(b, i - b));
    }
    n = static_cast<int64_t>(chars.size());
  } else if (v.is_array()) {
    n = static_cast<int64_t>(v.array().size());
  } else {
    in.fail(p, "'" + v.type_name() + "' object is not subscriptable");
  }
  auto clamp = [&](const Value& x, int64_t def) -> int64_t {
    if (x.is_undefined() || x.is_none()) return def;
    int64_t k = x.as_int();
    if (k < 0) k += n;
    if (step > 0) return std::clamp<int64_t>(k, 0, n);
    return std::clamp<int64_t>(k, -1, n - 1);
  };
  const int64_t b = clamp(start, step > 0 ? 0 : n - 1), e = clamp(stop, step > 0 ? n : -1);
  std::string s_out;
  Array a_out;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
    in.step(p);
    if (v.is_string()) s_out += chars[i];
    else a_out.push_back(v.array()[i]);
  }
  return v.is_string() ? Value(s_out) : Value(a_out);
}
}  // namespace

Value Interpreter::get_item(const Value& obj, const Value& key, Pos p) {
  if (obj.is_undefined()) fail(p, "cannot index an undefined value");
  if (obj.is_array()) {
    if (!key.is_int() && !key.is_bool()) {
      if (key.is_string()) return get_attr(obj, key.str(), p);
      fail(p, "list indices must be integers, not " + key.type_name());
    }
    const int64_t n = static_cast<int64_t>(obj.array().size());
    const int64_t i = py_index(key.as_int(), n);
    if (i < 0 || i >= n) return Value();
    return obj.array()[i];
  }
  if (obj.is_object()) {
    if (key.is_string()) {
      if (const Value* v = obj.object().find(key.str())) return *v;
      return Value();
    }
    return Value();
  }
  if (obj.is_string()) {
    if (key.is_string()) return get_attr(obj, key.str(), p);
    if (!key.is_int()) fail(p, "string indices must be integers");
    Value one(static_cast<int64_t>(1));
    const int64_t i = key.as_int();
    Value r = slice(*this, obj, Value(i), i == -1 ? Value() : Value(i + 1), one, p);
    return r.str().empty() ? Value() : r;
  }
  return Value();
}

Value Interpreter::eval(const Expr& e) {
  step(e.pos);
  switch (e.kind) {
    case ExprKind::Literal: return e.literal;
    case ExprKind::Name: return lookup(e.name);
    case ExprKind::List:
    case ExprKind::Tuple: {
      Array a;
      for (const auto& x : e.args) a.push_back(eval(*x));
      return Value(std::move(a));
    }
    case ExprKind::Dict: {
      Object o;
      for (const auto& [k, v] : e.dict_items) {
        const Value kv = eval(*k);
        if (!kv.is_string()) fail(k->pos, "only string keys are supported in dict literals");
        o.set(kv.str(), eval(*v));
      }
      return Value(std::move(o));
    }
    case ExprKind::Attr: {
      const Value obj = eval(*e.a);
      if (obj.is_undefined()) fail(e.pos, "'" + (e.a->kind == ExprKind::Name ? e.a->name : std::string("value")) + "' is undefined (reading ." + e.name + ")");
      return get_attr(obj, e.name, e.pos);
    }
    case ExprKind::Index: {
      const Value obj = eval(*e.a);
      if (obj.is_undefined()) fail(e.pos, "'" + (e.a->kind == ExprKind::Name ? e.a->name : std::string("value")) + "' is undefined (subscripted)");
      return get_item(obj, eval(*e.b), e.pos);
    }
    case ExprKind::Slice: {
      const Value obj = eval(*e.a);
      return slice(*this, obj, e.b ? eval(*e.b) : Value(), e.c ? eval(*e.c) : Value(),
                   e.args.empty() ? Value() : eval(*e.args[0]), e.pos);
    }
    case ExprKind::Call: {
      const Value fn = eval(*e.a);
      if (fn.is_undefined())
        fail(e.pos, "'" + (e.a->kind == ExprKind::Name ? e.a->name : e.a->kind == ExprKind::Attr ? e.a->name : std::string("value")) + "' is undefined (called)");
      CallArgs args = eval_args(e);
      return call(fn, args, e.pos);
    }
    case ExprKind::Filter: {
      const Value v = e.a ? eval(*e.a) : Value();
      CallArgs args = eval_args(e);
      return run_filter(e.name, v, args, e.pos);
    }
    case ExprKind::Test: {
      const Value v = eval(*e.a);
      CallArgs args = eval_args(e);
      const bool r = run_test(e.name, v, args, e.pos);
      return Value(e.negated ? !r : r);
    }
    case ExprKind::Not: return Value(!eval(*e.a).truthy());
    case ExprKind::Neg:
    case ExprKind::Pos: {
      const Value v = eval(*e.a);
      if (!v.is_number()) fail(e.pos, "bad operand type for unary " + std::string(e.kind == ExprKind::Neg ? "-" : "+") + ": '" + v.type_name() + "'");
      if (e.kind == ExprKind::Pos) return v.is_bool() ? Value(v.as_int()) : v;
      return v.is_float() ? Value(-v.as_float()) : Value(-v.as_int());
    }
    case ExprKind::And: {
      Value l = eval(*e.a);
      return l.truthy() ? eval(*e.b) : l;
    }
    case ExprKind::Or: {
      Value l = eval(*e.a);
      return l.truthy() ? l : eval(*e.b);
    }
    case ExprKind::Cond: return eval(*e.b).truthy() ? eval(*e.a) : (e.c ? eval(*e.c) : Value());
    case ExprKind::Binary: return eval_binary(e);
  }
  return Value();
}

namespace {
bool contains(Interpreter& in, const Value& container, const Value& item, Pos p) {
  if (container.is_string()) {
    if (!item.is_string()) in.fail(p, "'in <string>' requires string as left operand, not " + item.type_name());
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_array()) {
    for (const auto& x : container.array())
      if (equals(x, item)) return true;
    return false;
  }
  if (container.is_object()) return item.is_string() && container.object().find(item.str()) != nullptr;
  if (container.is_undefined()) return false;
  in.fail(p, "argument of type '" + container.type_name() + "' is not iterable");
}
}  // namespace

Value Interpreter::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  const Value l = eval(*e.a);
  const Value r = eval(*e.b);
  auto type_error = [&]() -> Value {
    fail(e.pos, "unsupported operand type(s) for " + op + ": '" + l.type_name() + "' and '" + r.type_name() + "'");
  };
  if (op == "==") return Value(equals(l, r));
  if (op == "!=") return Value(!equals(l, r));
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    const auto c = compare(l, r);
    if (!c) fail(e.pos, "'" + op + "' not supported between instances of '" + l.type_name() + "' and '" + r.type_name() + "'");
    if (op == "<") return Value(*c < 0);
    if (op == "<=") return Value(*c <= 0);
    if (op == ">") return Value(*c > 0);
    return Value(*c >= 0);
  }
  if (op == "in") return Value(contains(*this, r, l, e.pos));
  if (op == "not in") return Value(!contains(*this, r, l, e.pos));
  if (op == "~") {
    std::string s = l.to_str() + r.to_str();
    if (s.size() > limits.max_output_bytes) fail(e.pos, "string too large");
    return Value(std::move(s));
  }
  if (op == "+") {
    if (l.is_number() && r.is_number()) {
      if (l.is_float() || r.is_float()) return Value(l.as_float() + r.as_float());
      return Value(l.as_int() + r.as_int());
    }
    if (l.is_string() && r.is_string()) {
      if (l.str().size() + r.str().size() > limits.max_output_bytes) fail(e.pos, "string too large");
      return Value(l.str() + r.str());
    }
    if (l.is_array() && r.is_array()) {
      Array a = l.array();
      a.insert(a.end(), r.array().begin(), r.array().end());
      return Value(std::move(a));
    }
    return type_error();
  }
  if (op == "*") {
    const Value* seq = l.is_string() || l.is_array() ? &l : r.is_string() || r.is_array() ? &r : nullptr;
    if (seq) {
      const Value& count = seq == &l ? r : l;
      if (!count.is_int() && !count.is_bool()) return type_error();
      const int64_t n = std::max<int64_t>(0, count.as_int());
      const size_t unit = seq->is_string() ? seq->str().size() : seq->array().size();
      if (unit * static_cast<size_t>(n) > limits.max_output_bytes) fail(e.pos, "sequence repetition too large");
      if (seq->is_string()) {
        std::string s;
        for (int64_t i = 0; i < n; ++i) s += seq->str();
        return Value(s);
      }
      Array a;
      for (int64_t i = 0; i < n; ++i) a.insert(a.end(), seq->array().begin(), seq->array().end());
      return Value(a);
    }
  }
  if (!l.is_number() || !r.is_number()) return type_error();
  const bool fl = l.is_float() || r.is_float();
  if (op == "-") return fl ? Value(l.as_float() - r.as_float()) : Value(l.as_int() - r.as_int());
  if (op == "*") return fl ? Value(l.as_float() * r.as_float()) : Value(l.as_int() * r.as_int());
  if (op == "/") {
    if (r.as_float() == 0) fail(e.pos, "division by zero");
    return Value(l.as_float() / r.as_float());
  }
  if (op == "//" || op == "%") {
    if (r.as_float() == 0) fail(e.pos, "integer division or modulo by zero");
    if (fl) {
      const double q = std::floor(l.as_float() / r.as_float());
      return op == "//" ? Value(q) : Value(l.as_float() - q * r.as_float());
    }
    const int64_t a = l.as_int(), b = r.as_int();
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;  // Python floors
    return op == "//" ? Value(q) : Value(a - q * b);
  }
  if (op == "**") {
    if (!fl && r.as_int() >= 0) {
      if (r.as_int() > 64) fail(e.pos, "exponent too large");
      int64_t acc = 1;
      for (int64_t i = 0; i < r.as_int(); ++i) acc *= l.as_int();
      return Value(acc);
    }
    return Value(std::pow(l.as_float(), r.as_float()));
  }
  return type_error();
}

std::vector<Value> iterate(Interpreter& in, const Value& v, Pos p) {
  if (v.is_array()) return v.array();
  if (v.is_object()) {
    std::vector<Value> keys;
    for (const auto& kv : v.object().items)
      if (kv.first != "__namespace__") keys.emplace_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> chars;
    const auto& s = v.str();
    for (size_t i = 0; i < s.size();) {
      const size_t b = i;
      utf8::next(s, i);
      chars.emplace_back(s.substr(b, i - b));
    }
    return chars;
  }
  if (v.is_undefined()) return {};
  in.fail(p, "'" + v.type_name() + "' object is not iterable");
}

}  // namespace rs::jinja
