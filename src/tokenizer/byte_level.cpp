// The GPT-2 bytes_to_unicode table, built once.
#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "tokenizer/unicode.h"

namespace akv::tok {
namespace {

struct ByteTable {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 324> code_point_to_byte;  // code points used are < 324

  ByteTable() {
    code_point_to_byte.fill(-1);
    int next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      int cp = printable ? b : next_extra++;
      utf8_append(byte_to_utf8[b], cp);
      code_point_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteTable& table() {
  static const ByteTable t;
  return t;
}

}  // namespace

void append_byte_level(std::string& out, std::string_view raw) {
  const ByteTable& t = table();
  for (unsigned char b : raw) out += t.byte_to_utf8[b];
}

bool append_byte_level_decoded(std::string& out, std::string_view token) {
  const ByteTable& t = table();
  size_t start_size = out.size();
  size_t pos = 0;
  while (pos < token.size()) {
    int32_t cp = utf8_next(token, pos);
    if (cp < 0 || cp >= static_cast<int32_t>(t.code_point_to_byte.size()) || t.code_point_to_byte[cp] < 0) {
      out.resize(start_size);
      return false;
    }
    out += static_cast<char>(t.code_point_to_byte[cp]);
  }
  return true;
}

}  // namespace akv::tok
