#include "chat/tool_call_format.h"

namespace akv {

std::string_view to_string(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::None:
      return "none";
    case ToolCallFormat::Hermes:
      return "hermes";
    case ToolCallFormat::Llama3Json:
      return "llama3_json";
    case ToolCallFormat::Mistral:
      return "mistral";
    case ToolCallFormat::QwenXml:
      return "qwen_xml";
    case ToolCallFormat::Harmony:
      return "harmony";
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view source) {
  auto has = [source](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has("<|channel|>") && has("<|message|>")) return ToolCallFormat::Harmony;
  if (has("<function=") && has("<parameter=")) return ToolCallFormat::QwenXml;
  if (source.find("<tool_call>") != std::string_view::npos) return ToolCallFormat::Hermes;
  if (source.find("[TOOL_CALLS]") != std::string_view::npos) return ToolCallFormat::Mistral;
  if (source.find("<|python_tag|>") != std::string_view::npos) return ToolCallFormat::Llama3Json;
  if (source.find("<|start_header_id|>") != std::string_view::npos &&
      source.find("\"parameters\": ") != std::string_view::npos)
    return ToolCallFormat::Llama3Json;
  return ToolCallFormat::None;
}

std::vector<std::string_view> end_of_turn_tokens(bool harmony_vocabulary) {
  std::vector<std::string_view> out = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|endoftext|>"};
  if (harmony_vocabulary) {
    out.push_back("<|return|>");
    out.push_back("<|call|>");
  } else {
    out.push_back("<|end|>");
  }
  return out;
}

bool template_uses_think_tags(std::string_view source) {
  return source.find("<think>") != std::string_view::npos;
}

}  // namespace akv
