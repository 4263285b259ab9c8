// Drives one generation for the HTTP thread that serves it: submits the tokenized request to
// the engine, then turns engine events into client output (incremental detokenizing, stop
// sequences, the family's tool-call/reasoning parser) on an OutputSink. Cancels the engine
// request when the client goes away (a failed write, or GenerationJob::client_gone while
// waiting) or a stop sequence matches. Never throws for engine-side
// failures: they end as ReplyFinish{Error}.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/output_parser.h"
#include "server/output_sink.h"
#include "server/prepare_timing.h"
#include "tokenizer/tokenizer.h"

namespace akv {

struct GenerationJob {
  GenerateRequest request;
  std::vector<std::string> stop_sequences;
  std::unique_ptr<OutputParser> parser;  // plain text when null
  // Called once after a successful generation with the reply's blocks (as the client saw them),
  // the model's raw text (special tokens kept, the end-of-turn token excluded), the prompt ids
  // and the generated ids (end-of-turn token excluded), to remember them for byte-identical
  // re-rendering and KV reuse of the next turn.
  std::function<void(const std::vector<OutputBlock>& blocks, const std::string& raw_text,
                     std::span<const std::int32_t> prompt_ids, std::span<const std::int32_t> generated_ids)>
      on_complete;
  // Called once with how the request ended, whatever the end (the dashboard's turn history).
  std::function<void(const ReplyFinish&)> on_finish;
  std::chrono::milliseconds ping_interval{5000};
  // When the route began on the request (before parsing it): the time to submit is the request
  // path's share of the client's TTFT. Unset: not measured.
  std::optional<std::chrono::steady_clock::time_point> received;
  // Its phases up to here (the route and prepare_chat fill them); wait_ms is what is left of
  // received -> submit, set by the driver.
  PrepareTiming prepare{};
  // Observes received -> submit and its phases at submit (may be null).
  PrepareStats* prepare_stats = nullptr;
  // Whether the client has gone (may be empty: then only a failed write tells). Asked every
  // kClientPollInterval while no engine event comes (queueing, a long prefill), so a client that
  // leaves then is noticed and its engine request cancelled within ~100 ms, not at the next
  // ping or token.
  std::function<bool()> client_gone;
  // Special tokens reach the parser as text (Llama 3's <|python_tag|>, Mistral's [TOOL_CALLS]).
  bool keep_special_tokens = false;
  // Reasoning is generated but not sent (nor among the blocks on_complete gets, so the turn the
  // client sends back still matches).
  bool omit_thinking = false;
};

inline constexpr std::chrono::milliseconds kClientPollInterval{100};

ReplyFinish run_generation(Engine& engine, const Tokenizer& tokenizer, GenerationJob job, OutputSink& sink);

// A non-streaming generation into `sink`. `client_gone` (may be empty) is asked at each token
// and every kClientPollInterval while waiting (prefill, queueing); once it says yes the engine
// request is cancelled and the reply ends as StopReason::Cancelled.
ReplyFinish run_generation_collected(Engine& engine, const Tokenizer& tokenizer, GenerationJob job,
                                     CollectingSink& sink, std::function<bool()> client_gone);

}  // namespace akv
