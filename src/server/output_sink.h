// What a generation produces, dialect-neutral: text, reasoning and tool calls arriving in
// order, then a finish. Streaming writers (Anthropic SSE, OpenAI chunks) and the collector for
// non-streaming replies implement OutputSink; the generation driver feeds it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/prepare_timing.h"

namespace akv {

struct ReplyUsage {
  std::int64_t prompt_tokens = 0;  // the whole prompt (= count_tokens)
  std::int64_t cached_tokens = 0;  // prefix served from the KV cache (restored or reused)
  std::int64_t output_tokens = 0;
  std::int64_t uncached_tokens() const { return prompt_tokens - cached_tokens; }
};

enum class StopReason { EndTurn, MaxTokens, StopSequence, ToolUse, Cancelled, Error };

struct ReplyTiming {
  double prepare_ms = 0;  // request received -> submit (parse, render, tokenize)
  PrepareTiming prepare{};  // prepare_ms by phase (they add up to it)
  double ttft_ms = 0;    // submit -> first token (queueing + prefill)
  double decode_ms = 0;  // first token -> last token
};

struct ReplyFinish {
  StopReason reason = StopReason::EndTurn;
  ReplyTiming timing{};
  std::string stop_sequence{};  // the matched stop sequence (StopSequence)
  std::string error_message{};  // Error
  ReplyUsage usage{};
};

class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // Once, before anything else, when the engine has admitted the request (usage has the prompt
  // and cached token counts). Returns false when the client has gone.
  virtual bool start(const ReplyUsage& usage) = 0;
  virtual bool text(std::string_view delta) = 0;
  virtual bool thinking(std::string_view delta) = 0;
  virtual bool tool_start(const std::string& id, const std::string& name) = 0;
  virtual bool tool_args(std::string_view json_fragment) = 0;
  virtual bool tool_end() = 0;
  virtual bool finish(const ReplyFinish& finish) = 0;
  // Keep-alive while waiting (streaming only). Returns false when the client has gone.
  virtual bool ping() { return true; }
};

// A completed reply for the non-streaming dialects.
struct OutputBlock {
  enum class Type { Text, Thinking, ToolUse } type = Type::Text;
  std::string text{};       // Text, Thinking
  std::string id{};         // ToolUse
  std::string name{};       // ToolUse
  std::string args_json{};  // ToolUse, concatenated fragments
};

class CollectingSink final : public OutputSink {
 public:
  bool start(const ReplyUsage& usage) override;
  bool text(std::string_view delta) override;
  bool thinking(std::string_view delta) override;
  bool tool_start(const std::string& id, const std::string& name) override;
  bool tool_args(std::string_view json_fragment) override;
  bool tool_end() override { return true; }
  bool finish(const ReplyFinish& finish) override;

  const std::vector<OutputBlock>& blocks() const { return blocks_; }
  const ReplyFinish& result() const { return finish_; }
  bool finished() const { return finished_; }

 private:
  std::vector<OutputBlock> blocks_;
  ReplyFinish finish_;
  bool finished_ = false;
};

}  // namespace akv
