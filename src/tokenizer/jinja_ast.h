#pragma once
// Syntax tree of the Jinja subset (expressions and statements), produced by jinja_parser.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_value.h"

namespace rs::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  Literal,   // literal
  Name,      // name
  List,      // args
  Tuple,     // args
  Dict,      // kwargs-like pairs in dict_items
  Attr,      // a.name
  Index,     // a[b]
  Slice,     // a[b:c:d] (null parts absent)
  Call,      // a(args, kwargs)
  Filter,    // a | name(args, kwargs); a may be null inside {% filter %}
  Test,      // a is [not] name(args)
  Not,       // not a
  Neg,       // -a
  Pos,       // +a
  Binary,    // a op b  (name = op)
  And,
  Or,
  Cond,      // a if b else c
};

struct Expr {
  ExprKind kind;
  Pos pos;
  std::string name;
  Value literal;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> dict_items;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue, Scope };

struct Stmt {
  StmtKind kind;
  Pos pos;
  std::string text;                                  // Text
  ExprPtr expr;                                      // Output, Set value, For iterable, CallBlock call
  std::vector<std::pair<ExprPtr, Body>> branches;    // If: (cond, body)...
  Body body, else_body;                              // For/If-else/SetBlock/Macro/Filter/Scope
  std::vector<std::string> targets;                  // For/Set names; Set to ns.attr: {ns, attr} with is_attr
  bool is_attr_target = false;
  ExprPtr filter;                                    // For ... if cond; FilterBlock filter chain
  bool recursive = false;
  std::string name;                                  // Macro name
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro params (default may be null)
};

struct Template {
  Body body;
};

}  // namespace rs::jinja
