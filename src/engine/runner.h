// Turns a step plan into one ForwardBatch (every chunk back to back, decodes first) and runs the
// model over the shared paged KV. Keeps its buffers from step to step: after warm-up a step
// allocates nothing here. Engine thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "models/model.h"

namespace akv {

class StepRunner {
 public:
  StepRunner(Model& model, KvStorage& kv);

  // What a run hands back for each chunk whose next token is due: its logits row, or only the
  // row's argmax_row id (backend.h), picked where the logits are (greedy sampling; the rows
  // never reach the host).
  enum class Output { Logits, GreedyIds };

  // Runs plan.chunks through the model (appending their KV). Logits are computed only for
  // chunks that reach the end of their sequence's tokens (the next token is due).
  // Does not change the sequences. Lets exceptions from the model through.
  void run(const StepPlan& plan, Output output = Output::Logits);
  // [vocab] logits of chunk i of the last run, or empty if it had none or ran for GreedyIds.
  std::span<const float> logits_for(std::size_t chunk) const;
  // The greedy id of chunk i of the last run, or -1 if it had no logits or ran for Logits.
  std::int32_t greedy_id_for(std::size_t chunk) const;

 private:
  Model& model_;
  KvStorage& kv_;
  std::int64_t vocab_;
  std::vector<std::int32_t> tokens_, positions_, logit_rows_, chunk_logit_index_;
  std::vector<SequenceChunk> chunks_;
  Output output_ = Output::Logits;
  std::vector<float> logits_;  // [logit_rows, vocab]
  std::vector<std::int32_t> greedy_ids_;  // [logit_rows]
};

}  // namespace akv
