// ChatTemplate: parse once, render per request with transformers' context conventions.
#include "chat/chat_template.h"

#include "chat/interpreter.h"
#include "chat/parser.h"

namespace akv {

ChatTemplate ChatTemplate::parse_or_throw(std::string source) {
  ChatTemplate t;
  t.body_ = std::make_shared<const jinja::Body>(jinja::parse_template_or_throw(source));
  t.source_ = std::move(source);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render(context, ChatRenderOptions{});
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context,
                                 const ChatRenderOptions& options) const {
  jinja::Value vars = context.is_object() ? jinja::Value::from_json(context) : jinja::Value::dict();
  if (options.transformers_defaults) {
    jinja::DictData& d = vars.get_dict();
    if (!d.find("tools")) d.set(jinja::Value("tools"), jinja::Value::none());
    if (!d.find("documents")) d.set(jinja::Value("documents"), jinja::Value::none());
    if (!d.find("add_generation_prompt")) {
      d.set(jinja::Value("add_generation_prompt"), jinja::Value(false));
    }
  }
  jinja::Interpreter::Clock clock = options.clock;
  if (!clock) clock = [] { return std::chrono::system_clock::now(); };
  jinja::Interpreter interpreter(options.limits, std::move(clock));
  return interpreter.render(*body_, vars);
}

}  // namespace akv
