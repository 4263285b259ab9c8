// One event of a parsed model reply (the output parsers' common currency): text, reasoning, or a
// tool call's start, argument fragment and end.
#pragma once

#include <string>

namespace akv {

struct OutputEvent {
  enum class Kind { TextDelta, ThinkingDelta, ToolCallStart, ToolCallArgsDelta, ToolCallEnd };
  Kind kind = Kind::TextDelta;
  std::string text{};  // TextDelta, ThinkingDelta; ToolCallArgsDelta: a fragment of the input JSON
  std::string name{};  // ToolCallStart
  std::string id{};    // ToolCallStart
};

}  // namespace akv
