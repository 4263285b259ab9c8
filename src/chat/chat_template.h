// ChatTemplate: a Hugging Face chat template (Jinja2 source from tokenizer_config.json's
// `chat_template` or a .jinja file) parsed once and rendered per request, byte-identical to
// transformers' apply_chat_template(tokenize=False).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "chat/render_limits.h"

namespace akv {

namespace jinja {
struct Stmt;
}  // namespace jinja

struct ChatRenderOptions {
  // Time for strftime_now (local time). Empty: the system clock. Tests pin a date.
  std::function<std::chrono::system_clock::time_point()> clock;
  // As transformers does: `tools` and `documents` default to None and `add_generation_prompt`
  // to False when the context lacks them. Off: the context is passed to Jinja as is.
  bool transformers_defaults = true;
  jinja::RenderLimits limits;
};

class ChatTemplate {
 public:
  // Parses `source`. Throws Error(BadFormat, "line L, column C: message") on a syntax error.
  // Cost: linear in the template size; parse once per model, not per request.
  static ChatTemplate parse_or_throw(std::string source);

  // Renders with `context` as the template's variables: messages, tools, add_generation_prompt,
  // bos_token, eos_token and any extra kwargs (enable_thinking, ...). Object key order is kept
  // (it shows in `tools|tojson`), which is why the context is an ordered_json.
  // Throws Error(InvalidArgument) for raise_exception (message = the template's text, exactly)
  // and for runtime errors ("line L, column C: TypeError: ..."); Error(ResourceExhausted) when
  // a RenderLimits bound is hit. Const and safe to call from several threads at once.
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::ordered_json& context, const ChatRenderOptions& options) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Stmt>>> body_;
};

}  // namespace akv
