// Expression half of the Jinja2 parser: the token cursor and the precedence climb. The
// statement parser (parser.cpp) derives from it. Internal to src/chat.
#pragma once

#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace akv::jinja {

class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

 protected:
  // Bounds recursion: nesting past kMaxParseDepth is a syntax error.
  struct DepthGuard {
    explicit DepthGuard(ExprParser& p);
    ~DepthGuard() { --p_.depth_; }
    ExprParser& p_;
  };

  const Token& peek(size_t ahead = 0) const;
  const Token& next();
  bool peek_op(std::string_view op) const;
  bool peek_name(std::string_view name) const;
  bool accept_op(std::string_view op);
  bool accept_name(std::string_view name);
  const Token& expect(TokenKind kind, std::string_view what);
  void expect_op(std::string_view op);
  [[noreturn]] void fail(const Token& at, const std::string& message) const;
  ExprPtr node(ExprKind kind, const Token& at) const;

  // expr [, expr]* -> Tuple when a comma is present.
  ExprPtr parse_tuple(bool with_condexpr);
  // One expression; with_condexpr allows `a if b else c`.
  ExprPtr parse_expression(bool with_condexpr);
  // `| f(args) | g ...` applied to `operand`; leading_pipe: expects the first '|'.
  ExprPtr parse_filter_chain(ExprPtr operand, bool leading_pipe = true);

 private:
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_filter(ExprPtr operand);
  ExprPtr parse_test(ExprPtr operand);
  ExprPtr parse_subscript(ExprPtr operand);
  void parse_call_args(Expr& call);
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, const Token& at) const;

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace akv::jinja
