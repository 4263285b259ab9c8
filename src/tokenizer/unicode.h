// UTF-8 helpers and Unicode normalization for the tokenizer. Character classes and
// normalization forms come from utf8proc; nothing here hand-rolls Unicode tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace akv::tok {

// Length in bytes of the UTF-8 sequence starting with lead byte `b` (1 for a stray
// continuation or an invalid lead byte, so loops always advance).
inline int utf8_char_len(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b >> 5) == 0x6) return 2;
  if ((b >> 4) == 0xE) return 3;
  if ((b >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at text[pos] and advances pos; returns -1 for invalid input
// (pos still advances by at least one byte).
int32_t utf8_next(std::string_view text, size_t& pos);

void utf8_append(std::string& out, int32_t code_point);

// Length of the longest prefix of `bytes` that ends on a complete, valid UTF-8 character.
size_t utf8_valid_prefix_len(std::string_view bytes);

// True when `bytes` is entirely valid UTF-8.
bool utf8_is_valid(std::string_view bytes);

// Replaces invalid UTF-8 with U+FFFD, one per invalid byte (Rust from_utf8_lossy-style
// per maximal invalid subpart is close enough for decode output).
std::string utf8_lossy(std::string_view bytes);

enum class NormalForm { Nfc, Nfd, Nfkc, Nfkd };

// Unicode normalization via utf8proc. Invalid UTF-8 is returned unchanged.
std::string normalize_unicode(std::string_view text, NormalForm form);

// Unicode-aware lower-casing (per code point, utf8proc_tolower).
std::string to_lower(std::string_view text);

// Unicode categories via utf8proc.
bool is_numeric(int32_t code_point);     // Nd, Nl, No
bool is_whitespace(int32_t code_point);  // White_Space-like: Zs/Zl/Zp and \t\n\v\f\r, U+0085
bool is_alphanumeric(int32_t code_point);
bool is_punctuation(int32_t code_point);  // P* categories

}  // namespace akv::tok
