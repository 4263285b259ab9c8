// libFuzzer target: encode then decode arbitrary bytes, and stream random ids through the
// incremental detokenizer. Tokenizer: $AGENTKV_FUZZ_TOKENIZER_DIR or stories260K's.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

// Default: stories260K from ../shared/testdata (AGENTKV_TESTDATA is set by fuzz/CMakeLists.txt).
std::string default_tokenizer_dir() { return std::string(AGENTKV_TESTDATA) + "/models/stories260K/hf"; }

const akv::Tokenizer& tokenizer() {
  static const akv::Tokenizer tok = [] {
    const char* dir = std::getenv("AGENTKV_FUZZ_TOKENIZER_DIR");
    return akv::Tokenizer::load_or_throw(dir != nullptr ? dir : default_tokenizer_dir());
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const akv::Tokenizer& tok = tokenizer();
  std::string_view text(reinterpret_cast<const char*>(data), size);

  for (bool add_special : {false, true}) {
    std::vector<int32_t> ids = tok.encode(text, add_special);
    for (int32_t id : ids) AKV_CHECK(id >= 0 && id < tok.vocab_size(), "encode produced an id outside the vocab");
    std::string decoded = tok.decode(ids, false);
    AKV_CHECK(akv::tok::utf8_is_valid(decoded), "decode produced invalid UTF-8");
    // Valid UTF-8 without added-token text or a literal U+2581 must round-trip exactly
    // (stories260K: Prepend+Replace normalizer, byte fallback, Strip of the prepended space).
    if (!add_special && akv::tok::utf8_is_valid(text) && text.find('<') == std::string_view::npos &&
        text.find("\xE2\x96\x81") == std::string_view::npos && text.find('\0') == std::string_view::npos)
      AKV_CHECK(decoded == text, "encode/decode round trip changed valid text");
  }

  // The same bytes as little-endian ids (mostly in range) through the streaming detokenizer.
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size; i += 2) {
    int32_t id = static_cast<int32_t>(data[i] | (data[i + 1] << 8)) % (tok.vocab_size() + 8) - 4;
    ids.push_back(id);
  }
  for (bool skip : {false, true}) {
    akv::IncrementalDetokenizer detok(tok, skip);
    std::string streamed;
    for (int32_t id : ids) {
      std::string piece = detok.feed(id);
      AKV_CHECK(akv::tok::utf8_is_valid(piece), "detokenizer emitted invalid UTF-8");
      streamed += piece;
    }
    streamed += detok.flush();
    AKV_CHECK(akv::tok::utf8_is_valid(streamed), "detokenizer flush emitted invalid UTF-8");
  }
  return 0;
}
