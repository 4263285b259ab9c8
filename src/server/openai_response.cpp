#include "server/openai_response.h"

namespace akv {

namespace {
using json = nlohmann::ordered_json;
}

std::string openai_finish_reason(StopReason r) {
  switch (r) {
    case StopReason::MaxTokens: return "length";
    case StopReason::ToolUse: return "tool_calls";
    default: return "stop";
  }
}

json openai_usage(const ReplyUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.output_tokens},
          {"total_tokens", u.prompt_tokens + u.output_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"completion_tokens_details", {{"reasoning_tokens", 0}}}};
}

json openai_chat_completion(const std::string& id, const std::string& model, std::int64_t created,
                            const CollectingSink& out) {
  std::string text, reasoning;
  json tool_calls = json::array();
  for (const OutputBlock& b : out.blocks()) {
    if (b.type == OutputBlock::Type::Text) text += b.text;
    else if (b.type == OutputBlock::Type::Thinking) reasoning += b.text;
    else
      tool_calls.push_back({{"id", b.id},
                            {"type", "function"},
                            {"function", {{"name", b.name}, {"arguments", b.args_json.empty() ? "{}" : b.args_json}}}});
  }
  json message = {{"role", "assistant"},
                  {"content", text.empty() && !tool_calls.empty() ? json(nullptr) : json(text)},
                  {"refusal", nullptr}};
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  if (!tool_calls.empty()) message["tool_calls"] = tool_calls;
  const ReplyFinish& f = out.result();
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"system_fingerprint", "agentkv"},
          {"choices", json::array({{{"index", 0},
                                    {"message", message},
                                    {"logprobs", nullptr},
                                    {"finish_reason", openai_finish_reason(f.reason)}}})},
          {"usage", openai_usage(f.usage)}};
}

bool OpenAiChunkWriter::data(const std::string& payload) { return write_("data: " + payload + "\n\n"); }

bool OpenAiChunkWriter::chunk(json delta, const json& finish_reason) {
  json c = {{"id", id_},
            {"object", "chat.completion.chunk"},
            {"created", created_},
            {"model", model_},
            {"system_fingerprint", "agentkv"},
            {"choices",
             json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}})}};
  if (include_usage_) c["usage"] = nullptr;
  return data(c.dump(-1, ' ', false, json::error_handler_t::replace));
}

bool OpenAiChunkWriter::start(const ReplyUsage&) {
  if (started_) return true;
  started_ = true;
  return chunk({{"role", "assistant"}, {"content", ""}}, nullptr);
}

bool OpenAiChunkWriter::text(std::string_view delta) {
  if (delta.empty()) return true;
  return chunk({{"content", delta}}, nullptr);
}

bool OpenAiChunkWriter::thinking(std::string_view delta) {
  if (delta.empty()) return true;
  return chunk({{"reasoning_content", delta}}, nullptr);
}

bool OpenAiChunkWriter::tool_start(const std::string& id, const std::string& name) {
  ++tool_index_;
  return chunk({{"tool_calls", json::array({{{"index", tool_index_},
                                             {"id", id},
                                             {"type", "function"},
                                             {"function", {{"name", name}, {"arguments", ""}}}}})}},
               nullptr);
}

bool OpenAiChunkWriter::tool_args(std::string_view fragment) {
  if (fragment.empty() || tool_index_ < 0) return true;
  return chunk({{"tool_calls", json::array({{{"index", tool_index_}, {"function", {{"arguments", fragment}}}}})}},
               nullptr);
}

bool OpenAiChunkWriter::finish(const ReplyFinish& f) {
  if (!start(f.usage)) return false;
  if (!chunk(json::object(), openai_finish_reason(f.reason))) return false;
  if (include_usage_) {
    json u = {{"id", id_},
              {"object", "chat.completion.chunk"},
              {"created", created_},
              {"model", model_},
              {"system_fingerprint", "agentkv"},
              {"choices", json::array()},
              {"usage", openai_usage(f.usage)}};
    if (!data(u.dump())) return false;
  }
  return write_("data: [DONE]\n\n");
}

bool OpenAiChunkWriter::error(const std::string& type, const std::string& message) {
  json e = {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}};
  return data(e.dump()) && write_("data: [DONE]\n\n");
}

json openai_text_completion(const std::string& id, const std::string& model, std::int64_t created,
                            const std::string& text, const ReplyFinish& f) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"text", text},
                                    {"index", 0},
                                    {"logprobs", nullptr},
                                    {"finish_reason", f.reason == StopReason::MaxTokens ? "length" : "stop"}}})},
          {"usage", openai_usage(f.usage)}};
}

json openai_text_chunk(const std::string& id, const std::string& model, std::int64_t created,
                       const std::string& text, const json& finish_reason) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}})}};
}

}  // namespace akv
