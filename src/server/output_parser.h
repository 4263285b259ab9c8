// Turns the model's decoded text into what the client sees: plain text, reasoning and tool
// calls, by the model family's conventions. The driver feeds it text that is already free of
// stop sequences; it calls the sink as pieces become certain.
#pragma once

#include <memory>
#include <string_view>

#include "server/output_sink.h"

namespace akv {

class OutputParser {
 public:
  virtual ~OutputParser() = default;
  // Returns false when the sink reports the client gone.
  virtual bool feed(std::string_view text, OutputSink& sink) = 0;
  virtual bool finish(OutputSink& sink) = 0;
  // Whether tool calls were emitted, all of them complete (the reply's stop reason becomes
  // tool_use).
  virtual bool saw_tool_call() const = 0;
};

// Everything is text.
std::unique_ptr<OutputParser> make_plain_output_parser();

}  // namespace akv
