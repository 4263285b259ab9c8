// GPT-2's byte <-> printable-character table used by ByteLevel pre-tokenizers and decoders:
// every byte maps to one code point, printable bytes to themselves.
#pragma once

#include <string>
#include <string_view>

namespace akv::tok {

// Appends the byte-level image of the raw bytes `raw` (each byte -> one UTF-8 character).
void append_byte_level(std::string& out, std::string_view raw);

// Appends the raw bytes of a byte-level token. Returns false (and appends nothing) if some
// character of `token` is not in the table; the caller then keeps the token as is.
bool append_byte_level_decoded(std::string& out, std::string_view token);

}  // namespace akv::tok
