// Jinja2 lexer: whitespace control (-, +, trim_blocks, lstrip_blocks) follows jinja2/lexer.py.
#include "chat/lexer.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "base/error.h"
#include "chat/text.h"

namespace akv::jinja {
namespace {

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  // keep_trailing_newline=False drops one final newline.
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos_), pos_);
        break;
      }
      std::string text = src_.substr(pos_, tag - pos_);
      const char type = src_[tag + 1];
      char mod = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (mod != '-' && mod != '+') mod = '\0';
      if (mod == '-') {
        text = py_strip(text, std::nullopt, false, true);
      } else if (mod != '+' && type != '{') {
        lstrip_text(text, line_starting);
      }
      emit_text(text, pos_);
      pos_ = tag + 2 + (mod ? 1 : 0);
      if (type == '#') {
        line_starting = skip_comment(tag);
      } else if (type == '%' && try_raw(tag, line_starting)) {
        // raw block handled
      } else {
        line_starting = lex_tag(tag, type == '%');
      }
    }
    tokens_.push_back(make(TokenKind::Eof, "", src_.size()));
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& msg) const {
    auto [line, col] = line_col(at);
    throw Error(ErrorKind::BadFormat,
                "line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + msg);
  }

  std::pair<int, int> line_col(size_t at) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<int>(line), static_cast<int>(at - line_starts_[line - 1] + 1)};
  }

  Token make(TokenKind kind, std::string text, size_t at) const {
    Token t{kind, std::move(text)};
    std::tie(t.line, t.column) = line_col(at);
    return t;
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && std::strchr("{%#", src_[i + 1]) && src_[i + 1] != '\0') return i;
    }
    return std::string::npos;
  }

  void emit_text(std::string text, size_t at) {
    if (!text.empty()) tokens_.push_back(make(TokenKind::Text, std::move(text), at));
  }

  // lstrip_blocks: drop spaces/tabs between the start of the line and a block/comment tag.
  static void lstrip_text(std::string& text, bool line_starting) {
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return;
    if (l_pos >= text.size()) return;
    std::string_view tail(text);
    tail.remove_prefix(l_pos);
    if (py_strip(tail, std::nullopt, true, false).empty()) text.resize(l_pos);
  }

  // Skips whitespace after a "-" end marker; returns whether the last byte skipped is '\n'.
  bool skip_trailing_space() {
    bool last_newline = false;
    while (pos_ < src_.size()) {
      size_t i = pos_;
      const uint32_t cp = utf8_next(src_, i);
      if (!is_python_space(cp)) break;
      last_newline = cp == '\n';
      pos_ = i;
    }
    return last_newline;
  }

  // trim_blocks: one newline after a block or comment end is dropped.
  bool skip_one_newline() {
    if (pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      return true;
    }
    return false;
  }

  bool skip_comment(size_t tag) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail(tag, "missing end of comment tag");
    const bool strip = end > pos_ && src_[end - 1] == '-';
    pos_ = end + 2;
    return strip ? skip_trailing_space() : skip_one_newline();
  }

  // {% raw %}...{% endraw %}: the body is text, not parsed.
  bool try_raw(size_t tag, bool& line_starting);

  bool lex_tag(size_t tag, bool is_block);
  void lex_string(char quote);
  void lex_number();

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

bool Lexer::try_raw(size_t tag, bool& line_starting) {
  size_t i = pos_;
  auto skip_ws = [&](size_t& k) {
    while (k < src_.size() && std::strchr(" \t\n", src_[k]) && src_[k] != '\0') ++k;
  };
  skip_ws(i);
  if (src_.compare(i, 3, "raw") != 0 || (i + 3 < src_.size() && is_name_char(src_[i + 3]))) {
    return false;
  }
  i += 3;
  skip_ws(i);
  bool strip_after = false;
  if (src_.compare(i, 3, "-%}") == 0) {
    strip_after = true;
    i += 3;
  } else if (src_.compare(i, 2, "%}") == 0) {
    i += 2;
  } else {
    return false;
  }
  pos_ = i;
  if (strip_after)
    skip_trailing_space();
  else
    skip_one_newline();
  // Find {%[-+]? endraw [-]?%}
  for (size_t k = src_.find("{%", pos_); k != std::string::npos; k = src_.find("{%", k + 1)) {
    size_t j = k + 2;
    const bool strip_before = j < src_.size() && src_[j] == '-';
    if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) ++j;
    skip_ws(j);
    if (src_.compare(j, 6, "endraw") != 0) continue;
    j += 6;
    skip_ws(j);
    bool strip_end = false;
    if (src_.compare(j, 3, "-%}") == 0) {
      strip_end = true;
      j += 3;
    } else if (src_.compare(j, 2, "%}") == 0) {
      j += 2;
    } else {
      continue;
    }
    std::string body = src_.substr(pos_, k - pos_);
    if (strip_before) body = py_strip(body, std::nullopt, false, true);
    emit_text(std::move(body), pos_);
    pos_ = j;
    line_starting = strip_end ? skip_trailing_space() : skip_one_newline();
    return true;
  }
  fail(tag, "missing end of raw directive");
}

bool Lexer::lex_tag(size_t tag, bool is_block) {
  tokens_.push_back(make(is_block ? TokenKind::BlockBegin : TokenKind::VarBegin, "", tag));
  const char close = is_block ? '%' : '}';
  std::vector<char> balance;
  while (true) {
    while (pos_ < src_.size() && std::strchr(" \t\n\r\f\v", src_[pos_]) && src_[pos_] != '\0') {
      ++pos_;
    }
    if (pos_ >= src_.size()) {
      fail(tag, is_block ? "unexpected end of template, expected '%}'"
                         : "unexpected end of template, expected '}}'");
    }
    const char c = src_[pos_];
    if (balance.empty()) {
      const bool dash = c == '-' || (is_block && c == '+');
      const size_t at = dash ? pos_ + 1 : pos_;
      if (at + 1 < src_.size() && src_[at] == close && src_[at + 1] == '}') {
        tokens_.push_back(make(is_block ? TokenKind::BlockEnd : TokenKind::VarEnd, "", pos_));
        pos_ = at + 2;
        if (c == '-') return skip_trailing_space();
        if (c == '+' || !is_block) return false;
        return skip_one_newline();
      }
    }
    if (is_name_start(c)) {
      const size_t start = pos_;
      while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
      tokens_.push_back(make(TokenKind::Name, src_.substr(start, pos_ - start), start));
    } else if (is_digit(c)) {
      lex_number();
    } else if (c == '\'' || c == '"') {
      lex_string(c);
    } else {
      static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      std::string op(1, c);
      for (const char* two : kTwo) {
        if (src_.compare(pos_, 2, two) == 0) op = two;
      }
      if (op.size() == 1 && !std::strchr("+-*/%~<>=()[]{},.:|", c)) {
        fail(pos_, std::string("unexpected char '") + c + "'");
      }
      if (c == '(' || c == '[' || c == '{') {
        balance.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
      } else if (c == ')' || c == ']' || c == '}') {
        if (balance.empty() || balance.back() != c)
          fail(pos_, std::string("unexpected '") + c + "'");
        balance.pop_back();
      }
      tokens_.push_back(make(TokenKind::Op, op, pos_));
      pos_ += op.size();
    }
  }
}

void Lexer::lex_number() {
  const size_t start = pos_;
  auto digits = [&] {
    while (pos_ < src_.size() && (is_digit(src_[pos_]) || src_[pos_] == '_')) ++pos_;
  };
  digits();
  bool is_float = false;
  // As Jinja's (?<!\.) lookbehind: after a '.', `0.1` is two items (matrix.0.1), not a float.
  const bool after_dot = start > 0 && src_[start - 1] == '.';
  if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
    is_float = true;
    ++pos_;
    digits();
  }
  if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
    size_t k = pos_ + 1;
    if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
    if (k < src_.size() && is_digit(src_[k])) {
      is_float = true;
      pos_ = k;
      digits();
    }
  }
  std::string text;
  for (size_t k = start; k < pos_; ++k) {
    if (src_[k] != '_') text += src_[k];
  }
  Token t = make(is_float ? TokenKind::Float : TokenKind::Int, text, start);
  if (is_float) {
    t.float_value = std::strtod(text.c_str(), nullptr);
  } else {
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
      fail(start, "integer literal too large");
    }
    t.int_value = static_cast<int64_t>(v);
  }
  tokens_.push_back(std::move(t));
}

void Lexer::lex_string(char quote) {
  const size_t start = pos_;
  ++pos_;
  std::string value;
  while (true) {
    if (pos_ >= src_.size()) fail(start, "unterminated string literal");
    const char c = src_[pos_];
    if (c == quote) {
      ++pos_;
      break;
    }
    if (c != '\\') {
      value += c;
      ++pos_;
      continue;
    }
    if (pos_ + 1 >= src_.size()) fail(start, "unterminated string literal");
    const char e = src_[pos_ + 1];
    pos_ += 2;
    auto hex = [&](int n) -> bool {
      if (pos_ + static_cast<size_t>(n) > src_.size()) return false;
      uint32_t cp = 0;
      for (int k = 0; k < n; ++k) {
        const char h = src_[pos_ + static_cast<size_t>(k)];
        if (!is_hex(h)) return false;
        cp = cp * 16 + static_cast<uint32_t>(is_digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      if (cp > 0x10FFFF) return false;
      pos_ += static_cast<size_t>(n);
      utf8_append(value, cp);
      return true;
    };
    switch (e) {
      case 'n':
        value += '\n';
        break;
      case 't':
        value += '\t';
        break;
      case 'r':
        value += '\r';
        break;
      case 'a':
        value += '\a';
        break;
      case 'b':
        value += '\b';
        break;
      case 'f':
        value += '\f';
        break;
      case 'v':
        value += '\v';
        break;
      case '\\':
        value += '\\';
        break;
      case '\'':
        value += '\'';
        break;
      case '"':
        value += '"';
        break;
      case '\n':
        break;  // line continuation
      case 'x':
        if (!hex(2)) fail(pos_, "truncated \\xXX escape");
        break;
      case 'u':
        if (!hex(4)) fail(pos_, "truncated \\uXXXX escape");
        break;
      case 'U':
        if (!hex(8)) fail(pos_, "truncated \\UXXXXXXXX escape");
        break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
          }
          utf8_append(value, cp);
        } else {
          value += '\\';
          value += e;
        }
    }
  }
  tokens_.push_back(make(TokenKind::String, std::move(value), start));
}

}  // namespace

std::vector<Token> tokenize_or_throw(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace akv::jinja
