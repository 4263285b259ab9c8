// How a model family writes tool calls in its output, detected from its chat template. Shared
// by the prompt builder (which template family), the output parser and the forced-call grammar.
#pragma once

#include <string_view>
#include <vector>

namespace akv {

enum class ToolCallFormat {
  None,    // the template has no tool syntax: output is plain text
  Hermes,  // Qwen 2.5/3, QwQ, Hermes: <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
  Llama3Json,  // Llama 3.1-3.3: {"name": N, "parameters": {...}} as the whole reply, or after
               // <|python_tag|>
  Mistral,     // Mistral/Nemo: [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
  // Qwen3-Coder (and the Qwen3.5 family): <tool_call>\n<function=N>\n<parameter=P>\nvalue\n
  // </parameter>\n...</function>\n</tool_call>, values typed by the tool's schema
  // (qwen_xml_call_parser.h).
  QwenXml,
  // GPT-OSS harmony: every reply is channel messages (analysis, commentary, final); a call is
  // a commentary message to=functions.N with JSON arguments (harmony_parser.h).
  Harmony,
};

std::string_view to_string(ToolCallFormat format);

// Looks for each family's markers in the template source, first match wins:
//   "<|channel|>" and "<|message|>"         -> Harmony (channels are in every reply);
//   "<function=" and "<parameter="          -> QwenXml (its templates also hold "<tool_call>");
//   "<tool_call>"                           -> Hermes;
//   "[TOOL_CALLS]"                          -> Mistral;
//   "<|python_tag|>", or "<|start_header_id|>" with `"parameters": ` -> Llama3Json.
// None when nothing matches.
ToolCallFormat detect_tool_call_format(std::string_view template_source);

// The special tokens that end a reply, where the vocabulary has them: <|im_end|>, <|eot_id|>,
// <|eom_id|>, <end_of_turn>, <|end|>, <|endoftext|>; for a harmony vocabulary (one with a
// special <|channel|>) <|return|> and <|call|> instead of <|end|>, which there closes one
// message of a reply (its analysis) rather than the reply.
std::vector<std::string_view> end_of_turn_tokens(bool harmony_vocabulary);

// True when the template knows Qwen3-style reasoning ("<think>" appears in it).
bool template_uses_think_tags(std::string_view template_source);

}  // namespace akv
