// Jinja2 lexer with the settings transformers uses (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False): template text becomes Text tokens with whitespace control
// already applied; tags become begin/end tokens around expression tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace akv::jinja {

enum class TokenKind {
  Text,        // template data between tags
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,  // text holds the decoded value
  Int,
  Float,
  Op,  // text holds the operator: + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
  Eof,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in bytes
  int64_t int_value = 0;
  double float_value = 0;
};

// Tokenizes a whole template. Throws Error(BadFormat, "line L, column C: ...") on an unclosed
// tag, comment or string, or a character that cannot start a token.
std::vector<Token> tokenize_or_throw(std::string_view source);

}  // namespace akv::jinja
