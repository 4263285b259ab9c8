// Jinja2 parser: tokens -> statement tree, with Jinja's operator precedence
// (or < and < not < comparisons < + - < ~ < * / // % < ** < unary < postfix/filters/tests).
#pragma once

#include <string_view>

#include "chat/ast.h"

namespace akv::jinja {

// Parses a whole template. Throws Error(BadFormat, "line L, column C: message") on a syntax
// error. Nesting deeper than kMaxParseDepth is a syntax error (keeps recursion bounded).
Body parse_template_or_throw(std::string_view source);

inline constexpr int kMaxParseDepth = 200;

}  // namespace akv::jinja
