// A compiled PCRE2 pattern (UTF + UCP, JIT when available) for pre-tokenizer splits and
// Replace normalizers/decoders. Immutable after compile; find_all is thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace akv::tok {

class Regex {
 public:
  // Compiles `pattern`. Throws Error{BadFormat} naming `where` and the PCRE2 message.
  static std::shared_ptr<const Regex> compile_or_throw(std::string_view pattern, std::string_view where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) byte ranges of all non-overlapping matches, left to right.
  // `text` must be valid UTF-8 (the tokenizer sanitizes its input first).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace akv::tok
