#include "tokenizer/jinja_parser.h"

#include <set>

#include "common/error.h"

namespace rs::jinja {
namespace {

constexpr int kMaxNesting = 200;  // parse depth bound: deeply nested input is an error, not a stack overflow

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  std::unique_ptr<Template> run() {
    auto tmpl = std::make_unique<Template>();
    std::string end;
    tmpl->body = parse_body({}, end);
    return tmpl;
  }

 private:
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.fail(p.cur().pos, "template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  [[noreturn]] void fail(Pos p, const std::string& msg) const {
    throw Error("chat template line " + std::to_string(p.line) + " column " + std::to_string(p.column) + ": " + msg);
  }
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().value == n; }
  std::string describe(const Token& tk) const {
    switch (tk.type) {
      case Tok::End: return "end of template";
      case Tok::BlockEnd: return "'%}'";
      case Tok::VarEnd: return "'}}'";
      case Tok::Text: return "text";
      default: return "'" + tk.value + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur().pos, std::string("expected '") + op + "', found " + describe(cur()));
    ++i_;
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail(cur().pos, "expected a name, found " + describe(cur()));
    return t_[i_++].value;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail(cur().pos, "expected '%}', found " + describe(cur()));
    ++i_;
  }

  // Statements until a {% <one of end_words> %}; the word found is stored in `end`.
  Body parse_body(const std::set<std::string>& end_words, std::string& end) {
    DepthGuard g(*this);
    Body body;
    while (true) {
      const Token& tk = cur();
      if (tk.type == Tok::End) {
        if (!end_words.empty()) {
          std::string expected;
          for (const auto& w : end_words) expected += (expected.empty() ? "{% " : " or {% ") + w + " %}";
          fail(tk.pos, "unexpected end of template, expected " + expected);
        }
        return body;
      }
      if (tk.type == Tok::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Text;
        s->pos = tk.pos;
        s->text = tk.value;
        body.push_back(std::move(s));
        ++i_;
        continue;
      }
      if (tk.type == Tok::VarBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Output;
        s->pos = tk.pos;
        s->expr = parse_expr();
        if (cur().type != Tok::VarEnd) fail(cur().pos, "expected '}}', found " + describe(cur()));
        ++i_;
        body.push_back(std::move(s));
        continue;
      }
      if (tk.type != Tok::BlockBegin) fail(tk.pos, "unexpected " + describe(tk));
      const Token& kw = peek();
      if (kw.type != Tok::Name) fail(kw.pos, "expected a statement name, found " + describe(kw));
      if (end_words.count(kw.value)) {
        end = kw.value;
        i_ += 2;
        return body;
      }
      i_ += 2;
      body.push_back(parse_statement(kw));
    }
  }

  StmtPtr parse_statement(const Token& kw) {
    auto s = std::make_unique<Stmt>();
    s->pos = kw.pos;
    const std::string& w = kw.value;
    std::string end;
    if (w == "if") {
      s->kind = StmtKind::If;
      ExprPtr cond = parse_expr();
      expect_block_end();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"}, end);
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "elif") {
          cond = parse_expr();
          expect_block_end();
          continue;
        }
        if (end == "else") {
          expect_block_end();
          s->else_body = parse_body({"endif"}, end);
        }
        expect_block_end();
        break;
      }
    } else if (w == "for") {
      s->kind = StmtKind::For;
      s->targets.push_back(expect_name());
      while (is_op(",")) {
        ++i_;
        s->targets.push_back(expect_name());
      }
      if (!is_name("in")) fail(cur().pos, "expected 'in' in for loop, found " + describe(cur()));
      ++i_;
      s->expr = parse_expr(/*allow_cond=*/false);
      if (is_name("if")) {
        ++i_;
        s->filter = parse_expr(false);
      }
      if (is_name("recursive")) {
        ++i_;
        s->recursive = true;
      }
      expect_block_end();
      s->body = parse_body({"else", "endfor"}, end);
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, end);
      }
      expect_block_end();
    } else if (w == "set") {
      const std::string first = expect_name();
      s->targets.push_back(first);
      if (is_op(".")) {
        ++i_;
        s->targets.push_back(expect_name());
        s->is_attr_target = true;
      } else {
        while (is_op(",")) {
          ++i_;
          s->targets.push_back(expect_name());
        }
      }
      if (is_op("=")) {
        ++i_;
        s->kind = StmtKind::Set;
        s->expr = parse_tuple_or_expr();
        expect_block_end();
      } else {
        s->kind = StmtKind::SetBlock;
        if (is_op("|")) s->filter = parse_filter_chain(nullptr);
        expect_block_end();
        s->body = parse_body({"endset"}, end);
        expect_block_end();
      }
    } else if (w == "macro") {
      s->kind = StmtKind::Macro;
      s->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        std::string p = expect_name();
        ExprPtr def;
        if (is_op("=")) {
          ++i_;
          def = parse_expr();
        }
        s->params.emplace_back(std::move(p), std::move(def));
        if (!is_op(",")) break;
        ++i_;
      }
      expect_op(")");
      expect_block_end();
      s->body = parse_body({"endmacro"}, end);
      if (cur().type == Tok::Name) ++i_;  // {% endmacro name %}
      expect_block_end();
    } else if (w == "call") {
      s->kind = StmtKind::CallBlock;
      if (is_op("(")) {  // caller parameters
        ++i_;
        while (!is_op(")")) {
          s->params.emplace_back(expect_name(), nullptr);
          if (!is_op(",")) break;
          ++i_;
        }
        expect_op(")");
      }
      s->expr = parse_expr();
      if (s->expr->kind != ExprKind::Call) fail(s->pos, "{% call %} needs a macro call");
      expect_block_end();
      s->body = parse_body({"endcall"}, end);
      expect_block_end();
    } else if (w == "filter") {
      s->kind = StmtKind::FilterBlock;
      s->filter = parse_filter_chain(nullptr, /*leading_pipe=*/false);
      expect_block_end();
      s->body = parse_body({"endfilter"}, end);
      expect_block_end();
    } else if (w == "break" || w == "continue") {
      s->kind = w == "break" ? StmtKind::Break : StmtKind::Continue;
      expect_block_end();
    } else if (w == "generation") {
      // transformers' AssistantTracker extension: marks assistant text; renders its body.
      s->kind = StmtKind::Scope;
      expect_block_end();
      s->body = parse_body({"endgeneration"}, end);
      expect_block_end();
    } else {
      fail(kw.pos, "unknown statement '" + w + "'");
    }
    return s;
  }

  ExprPtr make(ExprKind k, Pos p) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = p;
    return e;
  }

  // `a, b` without brackets (set x = 1, 2) is a tuple.
  ExprPtr parse_tuple_or_expr() {
    const Pos p = cur().pos;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = make(ExprKind::Tuple, p);
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      ++i_;
      if (cur().type == Tok::BlockEnd) break;
      t->args.push_back(parse_expr());
    }
    return t;
  }

  ExprPtr parse_expr(bool allow_cond = true) {
    DepthGuard g(*this);
    ExprPtr e = parse_or();
    if (allow_cond && is_name("if")) {
      const Pos p = cur().pos;
      ++i_;
      auto c = make(ExprKind::Cond, p);
      c->b = parse_or();
      c->a = std::move(e);
      if (is_name("else")) {
        ++i_;
        c->c = parse_expr();
      }
      return c;
    }
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      auto e = make(ExprKind::Or, cur().pos);
      ++i_;
      e->a = std::move(l);
      e->b = parse_and();
      l = std::move(e);
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      auto e = make(ExprKind::And, cur().pos);
      ++i_;
      e->a = std::move(l);
      e->b = parse_not();
      l = std::move(e);
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      auto e = make(ExprKind::Not, cur().pos);
      ++i_;
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr l = parse_math1();
    while (true) {
      std::string op;
      const Pos p = cur().pos;
      if (cur().type == Tok::Op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == "<=" ||
                                    cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        ++i_;
      } else if (is_name("in")) {
        op = "in";
        ++i_;
      } else if (is_name("not") && peek().type == Tok::Name && peek().value == "in") {
        op = "not in";
        i_ += 2;
      } else {
        return l;
      }
      auto e = make(ExprKind::Binary, p);
      e->name = op;
      e->a = std::move(l);
      e->b = parse_math1();
      l = std::move(e);
    }
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      auto e = make(ExprKind::Binary, cur().pos);
      e->name = t_[i_++].value;
      e->a = std::move(l);
      e->b = parse_concat();
      l = std::move(e);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      auto e = make(ExprKind::Binary, cur().pos);
      e->name = t_[i_++].value;
      e->a = std::move(l);
      e->b = parse_math2();
      l = std::move(e);
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      auto e = make(ExprKind::Binary, cur().pos);
      e->name = t_[i_++].value;
      e->a = std::move(l);
      e->b = parse_pow();
      l = std::move(e);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary();
    while (is_op("**")) {
      auto e = make(ExprKind::Binary, cur().pos);
      e->name = t_[i_++].value;
      e->a = std::move(l);
      e->b = parse_unary();
      l = std::move(e);
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter = true) {
    DepthGuard g(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(is_op("-") ? ExprKind::Neg : ExprKind::Pos, cur().pos);
      ++i_;
      node->a = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& tk = cur();
    const Pos p = tk.pos;
    switch (tk.type) {
      case Tok::Name: {
        ++i_;
        if (tk.value == "true" || tk.value == "True") return literal(Value(true), p);
        if (tk.value == "false" || tk.value == "False") return literal(Value(false), p);
        if (tk.value == "none" || tk.value == "None") return literal(Value::none(), p);
        auto e = make(ExprKind::Name, p);
        e->name = tk.value;
        return e;
      }
      case Tok::String: {
        std::string s;
        while (cur().type == Tok::String) s += t_[i_++].value;  // adjacent literals concatenate
        return literal(Value(std::move(s)), p);
      }
      case Tok::Int: {
        ++i_;
        try {
          return literal(Value(static_cast<int64_t>(std::stoll(tk.value))), p);
        } catch (...) {
          fail(p, "integer literal out of range");
        }
      }
      case Tok::Float: {
        ++i_;
        try {
          return literal(Value(std::stod(tk.value)), p);
        } catch (...) {
          fail(p, "float literal out of range");
        }
      }
      case Tok::Op: {
        if (tk.value == "(") {
          ++i_;
          if (is_op(")")) {
            ++i_;
            return make(ExprKind::Tuple, p);
          }
          ExprPtr e = parse_expr();
          if (is_op(",")) {
            auto t = make(ExprKind::Tuple, p);
            t->args.push_back(std::move(e));
            while (is_op(",")) {
              ++i_;
              if (is_op(")")) break;
              t->args.push_back(parse_expr());
            }
            e = std::move(t);
          }
          expect_op(")");
          return e;
        }
        if (tk.value == "[") {
          ++i_;
          auto l = make(ExprKind::List, p);
          while (!is_op("]")) {
            l->args.push_back(parse_expr());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("]");
          return l;
        }
        if (tk.value == "{") {
          ++i_;
          auto d = make(ExprKind::Dict, p);
          while (!is_op("}")) {
            ExprPtr k = parse_expr();
            expect_op(":");
            ExprPtr v = parse_expr();
            d->dict_items.emplace_back(std::move(k), std::move(v));
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("}");
          return d;
        }
        break;
      }
      default: break;
    }
    fail(p, "unexpected " + describe(tk) + " in expression");
  }

  ExprPtr literal(Value v, Pos p) {
    auto e = make(ExprKind::Literal, p);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        const Pos p = cur().pos;
        ++i_;
        auto e = make(ExprKind::Attr, p);
        if (cur().type == Tok::Int) {  // x.0 means x[0]
          e->kind = ExprKind::Index;
          try {
            e->b = literal(Value(static_cast<int64_t>(std::stoll(t_[i_++].value))), p);
          } catch (...) {
            fail(p, "index out of range");
          }
        } else {
          e->name = expect_name();
        }
        e->a = std::move(node);
        node = std::move(e);
      } else if (is_op("[")) {
        const Pos p = cur().pos;
        ++i_;
        ExprPtr parts[3];
        int n = 0;
        bool is_slice = false;
        while (true) {
          if (is_op(":")) {
            is_slice = true;
            ++i_;
            if (++n > 2) fail(p, "too many ':' in slice");
            continue;
          }
          if (is_op("]")) break;
          if (parts[n]) fail(cur().pos, "expected ':' or ']' in subscript");
          parts[n] = parse_expr();
        }
        expect_op("]");
        auto e = make(is_slice ? ExprKind::Slice : ExprKind::Index, p);
        e->a = std::move(node);
        if (is_slice) {
          e->b = std::move(parts[0]);
          e->c = std::move(parts[1]);
          if (parts[2]) e->args.push_back(std::move(parts[2]));
        } else {
          if (!parts[0]) fail(p, "empty subscript");
          e->b = std::move(parts[0]);
        }
        node = std::move(e);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  void parse_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().value == "=") {
        std::string k = t_[i_].value;
        i_ += 2;
        e.kwargs.emplace_back(std::move(k), parse_expr());
      } else {
        if (!e.kwargs.empty()) fail(cur().pos, "positional argument after keyword argument");
        e.args.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(ExprKind::Call, cur().pos);
    e->a = std::move(callee);
    parse_args(*e);
    return e;
  }

  ExprPtr parse_filter_chain(ExprPtr node, bool leading_pipe = true) {
    bool first = true;
    while ((first && !leading_pipe) || is_op("|")) {
      if (!(first && !leading_pipe)) ++i_;
      first = false;
      auto f = make(ExprKind::Filter, cur().pos);
      f->name = expect_name();
      while (is_op(".")) {  // dotted filter names
        ++i_;
        f->name += "." + expect_name();
      }
      if (is_op("(")) parse_args(*f);
      f->a = std::move(node);
      node = std::move(f);
    }
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        auto t = make(ExprKind::Test, cur().pos);
        ++i_;
        if (is_name("not")) {
          t->negated = true;
          ++i_;
        }
        // `none`/`true`/`false` are test names here, not literals.
        t->name = expect_name();
        if (is_op("(")) {
          parse_args(*t);
        } else if (cur().type == Tok::String || cur().type == Tok::Int || cur().type == Tok::Float ||
                   (cur().type == Tok::Name && cur().value != "and" && cur().value != "or" && cur().value != "else" &&
                    cur().value != "if" && cur().value != "in" && cur().value != "is" && cur().value != "not" &&
                    cur().value != "recursive")) {
          t->args.push_back(parse_unary(false));
        }
        t->a = std::move(node);
        node = std::move(t);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }
};
}  // namespace

std::unique_ptr<Template> parse(const std::string& source) { return Parser(lex(source)).run(); }

}  // namespace rs::jinja
