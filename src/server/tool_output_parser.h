// OutputParser over chat/'s ToolCallParser: the model family's tool-call and reasoning syntax
// becomes tool_use and thinking output; everything else is text.
#pragma once

#include <memory>

#include "chat/tool_call_parser.h"
#include "server/output_parser.h"

namespace akv {

std::unique_ptr<OutputParser> make_tool_output_parser(ToolCallParserOptions options);

}  // namespace akv
