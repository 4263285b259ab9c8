#include "server/tool_output_parser.h"

#include "server/api_error.h"

namespace akv {

namespace {

class ToolOutputParser final : public OutputParser {
 public:
  explicit ToolOutputParser(ToolCallParserOptions options) : parser_(std::move(options)) {}

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

  ToolCallParser parser_;
};

}  // namespace

std::unique_ptr<OutputParser> make_tool_output_parser(ToolCallParserOptions options) {
  return std::make_unique<ToolOutputParser>(std::move(options));
}

}  // namespace akv
