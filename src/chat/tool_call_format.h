// How a model family writes tool calls in its output, detected from its chat template. Shared
// by the prompt builder (which template family), the output parser and the forced-call grammar.
#pragma once

#include <string_view>

namespace akv {

enum class ToolCallFormat {
  None,    // the template has no tool syntax: output is plain text
  Hermes,  // Qwen 2.5/3, QwQ, Hermes: <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
  Llama3Json,  // Llama 3.1-3.3: {"name": N, "parameters": {...}} as the whole reply, or after
               // <|python_tag|>
  Mistral,     // Mistral/Nemo: [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
};

std::string_view to_string(ToolCallFormat format);

// Looks for each family's markers in the template source: "<tool_call>", "[TOOL_CALLS]",
// "<|python_tag|>" / Llama 3's `"parameters": ` call rendering. None when nothing matches.
ToolCallFormat detect_tool_call_format(std::string_view template_source);

// True when the template knows Qwen3-style reasoning ("<think>" appears in it).
bool template_uses_think_tags(std::string_view template_source);

}  // namespace akv
