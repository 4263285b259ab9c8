// One request's token stream as the scheduler and runner see it: prompt plus generated tokens,
// how many of them have KV in the cache, and the blocks that hold it. Request-level state
// (sampler, callback, stop rules) lives with the engine, not here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/kv_manager.h"

namespace akv {

enum class SeqState { Waiting, Running, Finished };

struct Sequence {
  std::uint64_t id = 0;
  std::uint64_t arrival = 0;  // priority: older runs first and is preempted last; kept on preemption
  std::string ns;             // prefix-cache namespace (tenant)
  Retention retention = Retention::Normal;
  std::vector<std::int32_t> tokens;  // prompt, then every sampled token
  std::int32_t n_prompt = 0;
  std::int32_t n_computed = 0;        // leading tokens whose KV is in `kv` (0 while waiting)
  std::int32_t n_cached_prompt = -1;  // prefix hit at first admission; -1 before it
  std::int32_t n_preemptions = 0;
  SeqState state = SeqState::Waiting;
  KvSequence kv;
  // Hybrid models: its linear-attention state slot (backend/batch.h) while Running, else -1.
  // Like its blocks it is released on preemption; readmission recomputes the state from token 0.
  std::int32_t state_slot = -1;

  std::int32_t n_tokens() const { return static_cast<std::int32_t>(tokens.size()); }
  // Tokens still to run through the model; 1 means the next step is a decode.
  std::int32_t remaining() const { return n_tokens() - n_computed; }
  std::int32_t n_generated() const { return n_tokens() - n_prompt; }
};

}  // namespace akv
