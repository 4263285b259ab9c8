// Drives one generation for the HTTP thread that serves it: submits the tokenized request to
// the engine, then turns engine events into client output (incremental detokenizing, stop
// sequences, the family's tool-call/reasoning parser) on an OutputSink. Cancels the engine
// request when the client goes away or a stop sequence matches. Never throws for engine-side
// failures: they end as ReplyFinish{Error}.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/output_parser.h"
#include "server/output_sink.h"
#include "tokenizer/tokenizer.h"

namespace akv {

struct GenerationJob {
  GenerateRequest request;
  std::vector<std::string> stop_sequences;
  std::unique_ptr<OutputParser> parser;  // plain text when null
  // Called once with the full generated text (before stop-sequence trimming), e.g. to remember
  // the raw assistant output for byte-identical re-rendering on the next turn.
  std::function<void(const std::string& raw_text)> on_complete;
  std::chrono::milliseconds ping_interval{5000};
};

ReplyFinish run_generation(Engine& engine, const Tokenizer& tokenizer, GenerationJob job, OutputSink& sink);

}  // namespace akv
