// Statement parsing (if/for/set/macro/call/filter/with/generation/break/continue); expression
// parsing lives in expr_parser.cpp.
#include "chat/parser.h"

#include <algorithm>

#include "base/error.h"
#include "chat/expr_parser.h"

namespace akv::jinja {
namespace {

class StmtParser : public ExprParser {
 public:
  using ExprParser::ExprParser;

  Body parse_all() {
    Body body = parse_body({});
    return body;
  }

 private:
  // Parses statements until a block tag named in `end_names` (left unconsumed: the stream is
  // then at its name token) or the end of the template.
  Body parse_body(std::initializer_list<std::string_view> end_names) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = peek();
      switch (t.kind) {
        case TokenKind::Text: {
          auto s = stmt(StmtKind::Text, t);
          s->text = t.text;
          next();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::VarBegin: {
          auto s = stmt(StmtKind::Output, t);
          next();
          s->expr = parse_tuple(true);
          expect(TokenKind::VarEnd, "'}}'");
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::BlockBegin: {
          const Token& name = peek(1);
          if (name.kind != TokenKind::Name) fail(name, "expected a tag name");
          if (std::find(end_names.begin(), end_names.end(), name.text) != end_names.end()) {
            next();  // the caller reads the name
            return body;
          }
          next();
          body.push_back(parse_statement());
          break;
        }
        case TokenKind::Eof:
          if (end_names.size() != 0) {
            std::string expected;
            for (auto n : end_names)
              expected += (expected.empty() ? "'" : " or '") + std::string(n) + "'";
            fail(t, "unexpected end of template, expected " + expected);
          }
          return body;
        default:
          fail(t, "unexpected token");
      }
    }
  }

  StmtPtr stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  void end_tag() { expect(TokenKind::BlockEnd, "end of statement block"); }

  // After parse_body stopped at an end name: consumes `name` and the tag end.
  std::string take_end_name() {
    std::string name = next().text;
    return name;
  }

  StmtPtr parse_statement() {
    const Token& t = next();  // the tag name
    const std::string& n = t.text;
    if (n == "if") return parse_if(t);
    if (n == "for") return parse_for(t);
    if (n == "set") return parse_set(t);
    if (n == "macro") return parse_macro(t);
    if (n == "call") return parse_call_block(t);
    if (n == "filter") return parse_filter_block(t);
    if (n == "with") return parse_with(t);
    if (n == "generation") {
      auto s = stmt(StmtKind::Scope, t);
      end_tag();
      s->body = parse_body({"endgeneration"});
      take_end_name();
      end_tag();
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail(t, "'" + n + "' outside of a loop");
      auto s = stmt(n == "break" ? StmtKind::Break : StmtKind::Continue, t);
      end_tag();
      return s;
    }
    fail(t, "encountered unknown tag '" + n + "'");
  }

  StmtPtr parse_if(const Token& t) {
    auto s = stmt(StmtKind::If, t);
    s->expr = parse_expression(true);
    end_tag();
    s->body = parse_body({"elif", "else", "endif"});
    const Token& end = next();
    if (end.text == "elif") {
      s->else_body.push_back(parse_if(end));
      return s;  // the nested if consumed endif
    }
    if (end.text == "else") {
      end_tag();
      s->else_body = parse_body({"endif"});
      next();
    }
    end_tag();
    return s;
  }

  void parse_targets(Stmt& s, bool allow_attr) {
    bool parens = accept_op("(");
    do {
      const Token& name = expect(TokenKind::Name, "a variable name");
      s.targets.push_back(name.text);
      if (allow_attr && s.targets.size() == 1 && !parens && peek_op(".")) {
        next();
        s.text = expect(TokenKind::Name, "an attribute name").text;
        return;
      }
      if (!accept_op(",")) break;
      s.targets_tuple = true;
    } while (peek().kind == TokenKind::Name && peek().text != "in");
    if (parens) expect_op(")");
  }

  StmtPtr parse_for(const Token& t) {
    auto s = stmt(StmtKind::For, t);
    parse_targets(*s, false);
    if (!accept_name("in")) fail(peek(), "expected 'in'");
    s->expr = parse_tuple(false);
    if (accept_name("if")) s->cond = parse_expression(true);
    accept_name("recursive");
    end_tag();
    ++loop_depth_;
    s->body = parse_body({"else", "endfor"});
    --loop_depth_;
    if (next().text == "else") {
      end_tag();
      s->else_body = parse_body({"endfor"});
      next();
    }
    end_tag();
    return s;
  }

  StmtPtr parse_set(const Token& t) {
    auto s = stmt(StmtKind::Set, t);
    parse_targets(*s, true);
    if (accept_op("=")) {
      s->expr = parse_tuple(true);
      end_tag();
      return s;
    }
    s->kind = StmtKind::SetBlock;
    if (peek_op("|")) s->filter = parse_filter_chain(block_value(peek()));
    end_tag();
    s->body = parse_body({"endset"});
    next();
    end_tag();
    return s;
  }

  void parse_params(Stmt& s) {
    expect_op("(");
    while (!accept_op(")")) {
      if (!s.targets.empty()) expect_op(",");
      if (accept_op(")")) break;
      s.targets.push_back(expect(TokenKind::Name, "a parameter name").text);
      s.defaults.push_back(accept_op("=") ? parse_expression(true) : nullptr);
    }
  }

  StmtPtr parse_macro(const Token& t) {
    auto s = stmt(StmtKind::Macro, t);
    s->text = expect(TokenKind::Name, "a macro name").text;
    parse_params(*s);
    end_tag();
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved_loop_depth;
    next();
    if (peek().kind == TokenKind::Name) next();  // {% endmacro name %}
    end_tag();
    return s;
  }

  StmtPtr parse_call_block(const Token& t) {
    auto s = stmt(StmtKind::CallBlock, t);
    if (peek_op("(")) parse_params(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::Call) fail(t, "expected a call after 'call'");
    end_tag();
    s->body = parse_body({"endcall"});
    next();
    end_tag();
    return s;
  }

  StmtPtr parse_filter_block(const Token& t) {
    auto s = stmt(StmtKind::FilterBlock, t);
    s->filter = parse_filter_chain(block_value(t), /*leading_pipe=*/false);
    end_tag();
    s->body = parse_body({"endfilter"});
    next();
    end_tag();
    return s;
  }

  StmtPtr parse_with(const Token& t) {
    auto s = stmt(StmtKind::Scope, t);
    while (peek().kind != TokenKind::BlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect(TokenKind::Name, "a variable name").text);
      expect_op("=");
      s->defaults.push_back(parse_expression(true));
    }
    end_tag();
    s->body = parse_body({"endwith"});
    next();
    end_tag();
    return s;
  }

  ExprPtr block_value(const Token& at) { return node(ExprKind::BlockValue, at); }

  int loop_depth_ = 0;
};

}  // namespace

Body parse_template_or_throw(std::string_view source) {
  StmtParser parser(tokenize_or_throw(source));
  return parser.parse_all();
}

}  // namespace akv::jinja
