// libFuzzer target: parse arbitrary bytes as a chat template and render it with a small fixed
// conversation. akv::Error (syntax, runtime, limits) is the expected way to fail; anything else
// (a crash, another exception, a sanitizer report, a hang past the render limits) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "chat/chat_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi \u00e9\ud83d\ude00 there"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}]},
      {"role": "tool", "content": "{\"temp\": 21.5}"},
      {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false, "n": 3, "x": 1.5
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  akv::ChatRenderOptions options;
  options.clock = [] { return std::chrono::system_clock::time_point{}; };
  options.limits.max_steps = 200'000;
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_call_depth = 32;
  try {
    const auto t =
        akv::ChatTemplate::parse_or_throw(std::string(reinterpret_cast<const char*>(data), size));
    t.render(context(), options);
  } catch (const akv::Error&) {
  }
  return 0;
}
