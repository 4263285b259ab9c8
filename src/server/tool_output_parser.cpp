#include "server/tool_output_parser.h"

#include "server/api_error.h"

namespace akv {

namespace {

// Any parser with feed/finish -> OutputEvents and call counts.
template <typename Parser, typename Options>
class ToolOutputParser final : public OutputParser {
 public:
  explicit ToolOutputParser(Options options) : parser_(std::move(options)) {}

  bool feed(std::string_view text, OutputSink& sink) override { return forward(parser_.feed(text), sink); }
  bool finish(OutputSink& sink) override { return forward(parser_.finish(), sink); }
  // A call cut short (max_tokens, a stop sequence) makes the reply's stop reason that cut's.
  bool saw_tool_call() const override {
    return parser_.n_tool_calls() > 0 && parser_.n_complete_calls() == parser_.n_tool_calls();
  }

 private:
  static bool forward(const std::vector<OutputEvent>& events, OutputSink& sink) {
    for (const OutputEvent& e : events) {
      bool ok = true;
      switch (e.kind) {
        case OutputEvent::Kind::TextDelta: ok = sink.text(e.text); break;
        case OutputEvent::Kind::ThinkingDelta: ok = sink.thinking(e.text); break;
        case OutputEvent::Kind::ToolCallStart: ok = sink.tool_start(e.id, e.name); break;
        case OutputEvent::Kind::ToolCallArgsDelta: ok = sink.tool_args(e.text); break;
        case OutputEvent::Kind::ToolCallEnd: ok = sink.tool_end(); break;
      }
      if (!ok) return false;
    }
    return true;
  }

  Parser parser_;
};

}  // namespace

std::unique_ptr<OutputParser> make_tool_output_parser(ToolCallParserOptions options) {
  return std::make_unique<ToolOutputParser<ToolCallParser, ToolCallParserOptions>>(std::move(options));
}

std::unique_ptr<OutputParser> make_harmony_output_parser(HarmonyParserOptions options) {
  return std::make_unique<ToolOutputParser<HarmonyParser, HarmonyParserOptions>>(std::move(options));
}

std::unique_ptr<OutputParser> make_qwen_xml_output_parser(QwenXmlCallParserOptions options) {
  return std::make_unique<ToolOutputParser<QwenXmlCallParser, QwenXmlCallParserOptions>>(std::move(options));
}

}  // namespace akv
