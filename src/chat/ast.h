// The syntax tree the parser builds and the interpreter walks. Nodes own their children; the
// tree is immutable after parsing and may be rendered from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace akv::jinja {

enum class ExprKind {
  Literal,  // literal
  Name,     // name
  List,     // args: items
  Tuple,    // args: items
  Dict,     // args: key0, value0, key1, value1, ...
  Attr,     // args[0].name
  Item,     // args[0][args[1]]
  Slice,    // args[0][args[1]:args[2]:args[3]]; missing parts are null
  Call,     // args[0](args[1..], kwargs)
  Filter,   // args[0] | name(args[1..], kwargs)
  Test,     // args[0] is [not] name(args[1..], kwargs)
  Unary,    // name: "not", "-", "+"; args[0]
  Binary,   // name: operator ("+", "==", "in", "not in", "and", "or", "~", ...); args[0], args[1]
  Cond,     // args[0] if args[1] else args[2] (args[2] may be null)
  BlockValue,  // the rendered body of a {% filter %} / {% set x | f %} block
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // Test: `is not`
  ExprPtr star_args;     // Call/Filter/Test: f(*star_args)
  ExprPtr star_kwargs;   // Call/Filter/Test: f(**star_kwargs)
};

enum class StmtKind {
  Text,         // text
  Output,       // {{ expr }}
  If,           // if expr: body else else_body (elif nests an If in else_body)
  For,          // for targets in expr [if cond]: body else else_body
  Set,          // set targets = expr, or set targets[0].attr = expr
  SetBlock,     // set targets[0] [| filter]: body
  Macro,        // macro name(targets = defaults): body
  CallBlock,    // call(targets = defaults) expr: body (body is `caller`)
  FilterBlock,  // filter filter: body
  Break,
  Continue,
  Scope,  // generation / with: body in a new scope; with: targets = defaults
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind;
  int line = 0;
  int column = 0;
  std::string text;  // Text: data; Macro: name; Set: attribute for `set ns.attr = ...`
  ExprPtr expr;
  ExprPtr cond;
  ExprPtr filter;  // SetBlock/FilterBlock: a Filter chain whose innermost operand is BlockValue
  std::vector<std::string> targets;
  std::vector<ExprPtr> defaults;  // parallel to targets for Macro/CallBlock/Scope; null: none
  bool targets_tuple = false;     // For/Set: targets were written as a tuple
  Body body;
  Body else_body;
};

}  // namespace akv::jinja
