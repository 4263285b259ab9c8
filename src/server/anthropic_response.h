// Anthropic Messages replies: the non-streaming message object (api-notes §1.3) and the SSE
// writer (§1.4) that enforces the event grammar clients depend on: exactly one message_start
// with full usage, content blocks strictly sequential (0, 1, 2...) and typed, one block per
// tool call, cumulative usage in message_delta, then message_stop; `event: error` after a 200.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/output_sink.h"

namespace akv {

std::string anthropic_stop_reason(StopReason r);
nlohmann::ordered_json anthropic_usage(const ReplyUsage& u);

nlohmann::ordered_json anthropic_message(const std::string& id, const std::string& model,
                                         const CollectingSink& out);

class AnthropicSseWriter final : public OutputSink {
 public:
  // `write` sends bytes to the client and returns false when it has gone.
  AnthropicSseWriter(std::string id, std::string model, std::function<bool(std::string_view)> write)
      : id_(std::move(id)), model_(std::move(model)), write_(std::move(write)) {}

  bool start(const ReplyUsage& usage) override;
  bool text(std::string_view delta) override;
  bool thinking(std::string_view delta) override;
  bool tool_start(const std::string& id, const std::string& name) override;
  bool tool_args(std::string_view json_fragment) override;
  bool tool_end() override;
  bool finish(const ReplyFinish& finish) override;
  bool ping() override;
  // A mid-stream failure: `event: error` (the stream then ends).
  bool error(const std::string& type, const std::string& message);

 private:
  enum class Open { None, Text, Thinking, ToolUse };
  bool event(const char* name, const nlohmann::ordered_json& data);
  bool open_block(Open kind, nlohmann::ordered_json content_block);
  bool close_block();

  std::string id_, model_;
  std::function<bool(std::string_view)> write_;
  bool started_ = false;
  Open open_ = Open::None;
  int index_ = -1;
};

}  // namespace akv
