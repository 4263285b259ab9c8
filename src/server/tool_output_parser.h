// OutputParser over chat/'s parsers (ToolCallParser, HarmonyParser, QwenXmlCallParser): the model family's tool-call and reasoning syntax
// becomes tool_use and thinking output; everything else is text.
#pragma once

#include <memory>

#include "chat/harmony_parser.h"
#include "chat/qwen_xml_call_parser.h"
#include "chat/tool_call_parser.h"
#include "server/output_parser.h"

namespace akv {

std::unique_ptr<OutputParser> make_tool_output_parser(ToolCallParserOptions options);
// GPT-OSS: analysis -> thinking, commentary calls -> tool_use, final -> text.
std::unique_ptr<OutputParser> make_harmony_output_parser(HarmonyParserOptions options);
// Qwen3-Coder's XML calls, values typed by the tools' schemas.
std::unique_ptr<OutputParser> make_qwen_xml_output_parser(QwenXmlCallParserOptions options);

}  // namespace akv
