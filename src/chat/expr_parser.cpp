// Jinja2 expression grammar, following jinja2/parser.py (parse_or ... parse_primary).
#include "chat/expr_parser.h"

#include "base/error.h"
#include "chat/parser.h"

namespace akv::jinja {

ExprParser::DepthGuard::DepthGuard(ExprParser& p) : p_(p) {
  if (++p_.depth_ > kMaxParseDepth) {
    --p_.depth_;
    p_.fail(p_.peek(), "template nesting too deep");
  }
}

const Token& ExprParser::peek(size_t ahead) const {
  const size_t i = pos_ + ahead;
  return i < tokens_.size() ? tokens_[i] : tokens_.back();
}

const Token& ExprParser::next() {
  const Token& t = peek();
  if (pos_ + 1 < tokens_.size()) ++pos_;
  return t;
}

bool ExprParser::peek_op(std::string_view op) const {
  return peek().kind == TokenKind::Op && peek().text == op;
}

bool ExprParser::peek_name(std::string_view name) const {
  return peek().kind == TokenKind::Name && peek().text == name;
}

bool ExprParser::accept_op(std::string_view op) {
  if (!peek_op(op)) return false;
  next();
  return true;
}

bool ExprParser::accept_name(std::string_view name) {
  if (!peek_name(name)) return false;
  next();
  return true;
}

void ExprParser::fail(const Token& at, const std::string& message) const {
  throw Error(ErrorKind::BadFormat, "line " + std::to_string(at.line) + ", column " +
                                        std::to_string(at.column) + ": " + message);
}

namespace {
std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::Text:
      return "template text";
    case TokenKind::VarBegin:
      return "'{{'";
    case TokenKind::VarEnd:
      return "'}}'";
    case TokenKind::BlockBegin:
      return "'{%'";
    case TokenKind::BlockEnd:
      return "'%}'";
    case TokenKind::Eof:
      return "end of template";
    case TokenKind::String:
      return "string literal";
    default:
      return "'" + t.text + "'";
  }
}
}  // namespace

const Token& ExprParser::expect(TokenKind kind, std::string_view what) {
  if (peek().kind != kind)
    fail(peek(), "expected " + std::string(what) + ", got " + describe(peek()));
  return next();
}

void ExprParser::expect_op(std::string_view op) {
  if (!peek_op(op)) fail(peek(), "expected '" + std::string(op) + "', got " + describe(peek()));
  next();
}

ExprPtr ExprParser::node(ExprKind kind, const Token& at) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = at.line;
  e->column = at.column;
  return e;
}

ExprPtr ExprParser::binary(std::string op, ExprPtr a, ExprPtr b, const Token& at) const {
  auto e = node(ExprKind::Binary, at);
  e->name = std::move(op);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

ExprPtr ExprParser::parse_tuple(bool with_condexpr) {
  const Token& start = peek();
  ExprPtr first = parse_expression(with_condexpr);
  if (!peek_op(",")) return first;
  auto tuple = node(ExprKind::Tuple, start);
  tuple->args.push_back(std::move(first));
  while (accept_op(",")) {
    const TokenKind k = peek().kind;
    if (k == TokenKind::VarEnd || k == TokenKind::BlockEnd || peek_op(")")) break;
    tuple->args.push_back(parse_expression(with_condexpr));
  }
  return tuple;
}

ExprPtr ExprParser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this);
  const Token& start = peek();
  ExprPtr e = parse_or();
  if (!with_condexpr) return e;
  while (peek_name("if")) {
    next();
    auto cond = node(ExprKind::Cond, start);
    cond->args.push_back(std::move(e));
    cond->args.push_back(parse_or());
    cond->args.push_back(accept_name("else") ? parse_expression(true) : nullptr);
    e = std::move(cond);
  }
  return e;
}

ExprPtr ExprParser::parse_or() {
  ExprPtr left = parse_and();
  while (peek_name("or")) {
    const Token& t = next();
    left = binary("or", std::move(left), parse_and(), t);
  }
  return left;
}

ExprPtr ExprParser::parse_and() {
  ExprPtr left = parse_not();
  while (peek_name("and")) {
    const Token& t = next();
    left = binary("and", std::move(left), parse_not(), t);
  }
  return left;
}

ExprPtr ExprParser::parse_not() {
  if (peek_name("not")) {
    DepthGuard guard(*this);
    const Token& t = next();
    auto e = node(ExprKind::Unary, t);
    e->name = "not";
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr ExprParser::parse_compare() {
  ExprPtr left = parse_math1();
  while (true) {
    const Token& t = peek();
    std::string op;
    if (t.kind == TokenKind::Op && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                    t.text == ">" || t.text == "<=" || t.text == ">=")) {
      op = t.text;
      next();
    } else if (peek_name("in")) {
      op = "in";
      next();
    } else if (peek_name("not") && peek(1).kind == TokenKind::Name && peek(1).text == "in") {
      op = "not in";
      next();
      next();
    } else {
      return left;
    }
    left = binary(op, std::move(left), parse_math1(), t);
  }
}

ExprPtr ExprParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (peek_op("+") || peek_op("-")) {
    const Token& t = next();
    left = binary(t.text, std::move(left), parse_concat(), t);
  }
  return left;
}

ExprPtr ExprParser::parse_concat() {
  ExprPtr left = parse_math2();
  while (peek_op("~")) {
    const Token& t = next();
    left = binary("~", std::move(left), parse_math2(), t);
  }
  return left;
}

ExprPtr ExprParser::parse_math2() {
  ExprPtr left = parse_pow();
  while (peek_op("*") || peek_op("/") || peek_op("//") || peek_op("%")) {
    const Token& t = next();
    left = binary(t.text, std::move(left), parse_pow(), t);
  }
  return left;
}

ExprPtr ExprParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (peek_op("**")) {
    const Token& t = next();
    left = binary("**", std::move(left), parse_unary(true), t);
  }
  return left;
}

ExprPtr ExprParser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  const Token& t = peek();
  ExprPtr e;
  if (peek_op("-") || peek_op("+")) {
    next();
    e = node(ExprKind::Unary, t);
    e->name = t.text;
    e->args.push_back(parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr ExprParser::parse_primary() {
  const Token& t = peek();
  switch (t.kind) {
    case TokenKind::Name: {
      next();
      auto e = node(ExprKind::Literal, t);
      if (t.text == "true" || t.text == "True")
        e->literal = Value(true);
      else if (t.text == "false" || t.text == "False")
        e->literal = Value(false);
      else if (t.text == "none" || t.text == "None")
        e->literal = Value::none();
      else {
        e->kind = ExprKind::Name;
        e->name = t.text;
      }
      return e;
    }
    case TokenKind::String: {
      std::string s = next().text;
      while (peek().kind == TokenKind::String) s += next().text;  // adjacent literals join
      auto e = node(ExprKind::Literal, t);
      e->literal = Value(std::move(s));
      return e;
    }
    case TokenKind::Int: {
      next();
      auto e = node(ExprKind::Literal, t);
      e->literal = Value(t.int_value);
      return e;
    }
    case TokenKind::Float: {
      next();
      auto e = node(ExprKind::Literal, t);
      e->literal = Value(t.float_value);
      return e;
    }
    default:
      break;
  }
  if (accept_op("(")) {
    if (accept_op(")")) return node(ExprKind::Tuple, t);
    ExprPtr first = parse_expression(true);
    if (accept_op(")")) return first;
    auto tuple = node(ExprKind::Tuple, t);
    tuple->args.push_back(std::move(first));
    while (accept_op(",")) {
      if (peek_op(")")) break;
      tuple->args.push_back(parse_expression(true));
    }
    expect_op(")");
    return tuple;
  }
  if (accept_op("[")) {
    auto list = node(ExprKind::List, t);
    while (!accept_op("]")) {
      if (!list->args.empty()) {
        expect_op(",");
        if (accept_op("]")) break;
      }
      list->args.push_back(parse_expression(true));
    }
    return list;
  }
  if (accept_op("{")) {
    auto dict = node(ExprKind::Dict, t);
    while (!accept_op("}")) {
      if (!dict->args.empty()) {
        expect_op(",");
        if (accept_op("}")) break;
      }
      dict->args.push_back(parse_expression(true));
      expect_op(":");
      dict->args.push_back(parse_expression(true));
    }
    return dict;
  }
  fail(t, "unexpected " + describe(t));
}

ExprPtr ExprParser::parse_postfix(ExprPtr e) {
  while (true) {
    const Token& t = peek();
    if (accept_op(".")) {
      const Token& name = next();
      if (name.kind == TokenKind::Name) {
        auto attr = node(ExprKind::Attr, t);
        attr->name = name.text;
        attr->args.push_back(std::move(e));
        e = std::move(attr);
      } else if (name.kind == TokenKind::Int) {
        auto item = node(ExprKind::Item, t);
        item->args.push_back(std::move(e));
        auto idx = node(ExprKind::Literal, name);
        idx->literal = Value(name.int_value);
        item->args.push_back(std::move(idx));
        e = std::move(item);
      } else {
        fail(name, "expected an attribute name after '.'");
      }
    } else if (peek_op("[")) {
      next();
      e = parse_subscript(std::move(e));
    } else if (peek_op("(")) {
      auto call = node(ExprKind::Call, t);
      call->args.push_back(std::move(e));
      parse_call_args(*call);
      e = std::move(call);
    } else {
      return e;
    }
  }
}

ExprPtr ExprParser::parse_subscript(ExprPtr operand) {
  const Token& t = peek();
  ExprPtr parts[3];
  int n_colons = 0;
  while (!peek_op("]")) {
    if (accept_op(":")) {
      if (++n_colons > 2) fail(t, "invalid slice");
      continue;
    }
    if (parts[n_colons]) fail(peek(), "expected ']'");
    parts[n_colons] = parse_expression(true);
  }
  next();
  if (n_colons == 0) {
    if (!parts[0]) fail(t, "expected a subscript");
    auto item = node(ExprKind::Item, t);
    item->args.push_back(std::move(operand));
    item->args.push_back(std::move(parts[0]));
    return item;
  }
  auto slice = node(ExprKind::Slice, t);
  slice->args.push_back(std::move(operand));
  for (auto& p : parts) slice->args.push_back(std::move(p));
  return slice;
}

void ExprParser::parse_call_args(Expr& call) {
  expect_op("(");
  bool first = true;
  while (!accept_op(")")) {
    if (!first) {
      expect_op(",");
      if (accept_op(")")) break;
    }
    first = false;
    if (peek_op("*") || peek_op("**")) {
      ExprPtr& slot = next().text == "*" ? call.star_args : call.star_kwargs;
      if (slot) fail(peek(), "repeated * or ** argument");
      slot = parse_expression(true);
    } else if (peek().kind == TokenKind::Name && peek(1).kind == TokenKind::Op &&
               peek(1).text == "=") {
      std::string key = next().text;
      next();
      call.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!call.kwargs.empty()) fail(peek(), "positional argument follows keyword argument");
      call.args.push_back(parse_expression(true));
    }
  }
}

ExprPtr ExprParser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (peek_op("|")) {
      next();
      e = parse_filter(std::move(e));
    } else if (peek_name("is")) {
      next();
      e = parse_test(std::move(e));
    } else if (peek_op("(")) {
      auto call = node(ExprKind::Call, peek());
      call->args.push_back(std::move(e));
      parse_call_args(*call);
      e = std::move(call);
    } else {
      return e;
    }
  }
}

ExprPtr ExprParser::parse_filter_chain(ExprPtr operand, bool leading_pipe) {
  if (leading_pipe) expect_op("|");
  operand = parse_filter(std::move(operand));
  while (accept_op("|")) operand = parse_filter(std::move(operand));
  return operand;
}

ExprPtr ExprParser::parse_filter(ExprPtr operand) {
  DepthGuard guard(*this);
  const Token& name = expect(TokenKind::Name, "a filter name");
  auto f = node(ExprKind::Filter, name);
  f->name = name.text;
  while (accept_op(".")) f->name += "." + expect(TokenKind::Name, "a filter name").text;
  f->args.push_back(std::move(operand));
  if (peek_op("(")) parse_call_args(*f);
  return f;
}

ExprPtr ExprParser::parse_test(ExprPtr operand) {
  DepthGuard guard(*this);
  const bool negated = accept_name("not");
  const Token& name = expect(TokenKind::Name, "a test name");
  auto t = node(ExprKind::Test, name);
  t->name = name.text;
  t->negated = negated;
  t->args.push_back(std::move(operand));
  const Token& n = peek();
  if (peek_op("(")) {
    parse_call_args(*t);
  } else if ((n.kind == TokenKind::Name || n.kind == TokenKind::String ||
              n.kind == TokenKind::Int || n.kind == TokenKind::Float || peek_op("[") ||
              peek_op("{")) &&
             !(n.kind == TokenKind::Name &&
               (n.text == "else" || n.text == "or" || n.text == "and" || n.text == "is" ||
                n.text == "if" || n.text == "in" || n.text == "not"))) {
    t->args.push_back(parse_postfix(parse_primary()));
  }
  return t;
}

}  // namespace akv::jinja
