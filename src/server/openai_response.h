// OpenAI replies: chat.completion objects and chat.completion.chunk streams (api-notes §2):
// data-only SSE, a first chunk with the assistant role, tool_calls deltas carrying index, id,
// type and name on their first fragment, a final chunk with finish_reason, an optional usage
// chunk with choices [] (stream_options.include_usage), then `data: [DONE]`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/output_sink.h"

namespace akv {

std::string openai_finish_reason(StopReason r);
nlohmann::ordered_json openai_usage(const ReplyUsage& u);

nlohmann::ordered_json openai_chat_completion(const std::string& id, const std::string& model,
                                              std::int64_t created, const CollectingSink& out);

class OpenAiChunkWriter final : public OutputSink {
 public:
  OpenAiChunkWriter(std::string id, std::string model, std::int64_t created, bool include_usage,
                    std::function<bool(std::string_view)> write)
      : id_(std::move(id)), model_(std::move(model)), created_(created), include_usage_(include_usage),
        write_(std::move(write)) {}

  bool start(const ReplyUsage& usage) override;
  bool text(std::string_view delta) override;
  bool thinking(std::string_view delta) override;
  bool tool_start(const std::string& id, const std::string& name) override;
  bool tool_args(std::string_view json_fragment) override;
  bool tool_end() override { return true; }
  bool finish(const ReplyFinish& finish) override;
  // A mid-stream failure: `data: {"error": ...}` then [DONE].
  bool error(const std::string& type, const std::string& message);

 private:
  bool chunk(nlohmann::ordered_json delta, const nlohmann::ordered_json& finish_reason);
  bool data(const std::string& payload);

  std::string id_, model_;
  std::int64_t created_;
  bool include_usage_;
  std::function<bool(std::string_view)> write_;
  bool started_ = false;
  int tool_index_ = -1;
};

// Legacy /v1/completions objects.
nlohmann::ordered_json openai_text_completion(const std::string& id, const std::string& model, std::int64_t created,
                                              const std::string& text, const ReplyFinish& finish);
nlohmann::ordered_json openai_text_chunk(const std::string& id, const std::string& model, std::int64_t created,
                                         const std::string& text, const nlohmann::ordered_json& finish_reason);

}  // namespace akv
