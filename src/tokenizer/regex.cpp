// PCRE2 wrapper: compile once with UTF|UCP and JIT, match many times.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "base/error.h"

namespace akv::tok {

std::shared_ptr<const Regex> Regex::compile_or_throw(std::string_view pattern, std::string_view where) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    throw Error(ErrorKind::BadFormat, std::string(where) + ": regex does not compile at offset " +
                                          std::to_string(error_offset) + ": " +
                                          reinterpret_cast<const char*>(message));
  }
  std::shared_ptr<Regex> regex(new Regex());
  regex->code_ = code;
  regex->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return regex;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset <= text.size()) {
    int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, match, nullptr)
                  : pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH or a resource limit: no further matches
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    size_t begin = ovector[0];
    size_t end = ovector[1];
    if (end == begin) {
      // Empty match: skip one whole character so the next search starts on a boundary.
      if (begin >= text.size()) break;
      size_t step = 1;
      while (begin + step < text.size() && (static_cast<unsigned char>(text[begin + step]) & 0xC0) == 0x80) ++step;
      offset = begin + step;
      continue;
    }
    out.emplace_back(begin, end);
    offset = end;
  }
  pcre2_match_data_free(match);
}

}  // namespace akv::tok
