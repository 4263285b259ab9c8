// libFuzzer target for the HTTP request parsers: a body through fields::parse_body, then
// parse_anthropic_messages, parse_anthropic_count_tokens, parse_openai_chat and
// parse_openai_completion. Each must return or throw akv::Error (a 400); any other exception
// would be a 500 and aborts the run, as does a crash (ASan + UBSan).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "base/error.h"
#include "server/anthropic_request.h"
#include "server/json_fields.h"
#include "server/openai_request.h"

namespace {

template <typename Parse>
void must_return_or_refuse(const char* name, Parse parse) {
  try {
    parse();
  } catch (const akv::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s threw a non-Error exception (a 500): %s\n", name, e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::ordered_json body;
  bool parsed = false;
  must_return_or_refuse("fields::parse_body", [&] {
    body = akv::fields::parse_body(text);
    parsed = true;
  });
  if (!parsed) return 0;
  must_return_or_refuse("parse_anthropic_messages", [&] { akv::parse_anthropic_messages(body); });
  must_return_or_refuse("parse_anthropic_count_tokens", [&] { akv::parse_anthropic_count_tokens(body); });
  must_return_or_refuse("parse_openai_chat", [&] { akv::parse_openai_chat(body); });
  must_return_or_refuse("parse_openai_completion", [&] { akv::parse_openai_completion(body); });
  return 0;
}
