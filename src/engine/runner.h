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

  // What a run hands back for each chunk whose next token is due: its logits row, or only an id
  // picked where the logits are (Backend::sample_rows: greedy or a plain temperature draw; the
  // rows never reach the host).
  enum class Output { Logits, Ids };
  // How Output::Ids picks the id of a chunk's due token: argmax_row when temperature <= 0, else
  // draw_row (backend.h) at `temperature` with the uniform `u` in [0, 1).
  struct IdPick {
    float temperature = 0.0f;
    double u = 0.0;
  };

  // Runs plan.chunks through the model (appending their KV). Logits are computed only for
  // chunks that reach the end of their sequence's tokens (the next token is due). For
  // Output::Ids, picks[i] says how chunk i's id is picked (one per chunk; read only for chunks
  // whose token is due). Does not change the sequences. Lets exceptions from the model through.
  void run(const StepPlan& plan, Output output = Output::Logits, std::span<const IdPick> picks = {});
  // [vocab] logits of chunk i of the last run, or empty if it had none or ran for Ids.
  std::span<const float> logits_for(std::size_t chunk) const;
  // The picked id of chunk i of the last run, or -1 if it had no logits or ran for Logits.
  std::int32_t id_for(std::size_t chunk) const;
  // Milliseconds the last run spent in the model's forward (the backend's synchronization
  // included); the rest of run() built the batch.
  double forward_ms() const { return forward_ms_; }

 private:
  Model& model_;
  KvStorage& kv_;
  std::int64_t vocab_;
  std::vector<std::int32_t> tokens_, positions_, logit_rows_, chunk_logit_index_;
  std::vector<SequenceChunk> chunks_;
  Output output_ = Output::Logits;
  std::vector<float> logits_;       // [logit_rows, vocab]
  std::vector<std::int32_t> ids_;   // [logit_rows]
  std::vector<float> temperature_;  // [logit_rows] of an Ids run
  std::vector<double> u_;           // [logit_rows] of an Ids run
  double forward_ms_ = 0;
};

}  // namespace akv
