// UTF-8 decoding/encoding and utf8proc-backed normalization and categories.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>

namespace akv::tok {

int32_t utf8_next(std::string_view text, size_t& pos) {
  utf8proc_int32_t cp = -1;
  utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos),
                                        static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
  if (n <= 0) {
    pos += 1;
    return -1;
  }
  pos += static_cast<size_t>(n);
  return cp;
}

void utf8_append(std::string& out, int32_t code_point) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(code_point, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

size_t utf8_valid_prefix_len(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t next = pos;
    if (utf8_next(bytes, next) < 0) return pos;
    pos = next;
  }
  return pos;
}

bool utf8_is_valid(std::string_view bytes) { return utf8_valid_prefix_len(bytes) == bytes.size(); }

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t start = pos;
    if (utf8_next(bytes, pos) < 0) {
      out += "\xEF\xBF\xBD";
      pos = start + 1;
    } else {
      out.append(bytes.data() + start, pos - start);
    }
  }
  return out;
}

std::string normalize_unicode(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::Nfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::Nfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::Nfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::Nfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* result = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &result,
                                    static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(text);
  std::string out(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
  std::free(result);
  return out;
}

std::string to_lower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = pos;
    int32_t cp = utf8_next(text, pos);
    if (cp < 0) {
      out.append(text.data() + start, pos - start);
    } else {
      utf8_append(out, utf8proc_tolower(cp));
    }
  }
  return out;
}

bool is_numeric(int32_t cp) {
  auto c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_whitespace(int32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\v' || cp == '\f' || cp == '\r' || cp == 0x85) return true;
  auto c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

bool is_alphanumeric(int32_t cp) {
  auto c = utf8proc_category(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || is_numeric(cp);
}

bool is_punctuation(int32_t cp) {
  auto c = utf8proc_category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

}  // namespace akv::tok
