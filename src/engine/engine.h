// The engine: one thread that owns the model and the KV cache and runs the step loop
// (architecture.md §2): admit submissions and cancellations -> schedule -> run the batch ->
// sample -> emit events. Any thread may submit, cancel and read metrics. The loop never throws:
// a failing step ends the requests in it with an error; the others keep going.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/state_snapshots.h"
#include "engine/step_stats.h"
#include "kv/kv_manager.h"
#include "kv/restorer.h"
#include "models/model.h"

namespace akv {

struct EngineConfig {
  std::int32_t block_size = 16;   // token positions per KV block
  std::int32_t n_blocks = 1024;   // KV blocks (device memory = n_blocks * block bytes)
  DType kv_dtype = DType::F32;    // of the KV cache (serve: the backend's preferred_kv_dtype())
  SchedulerConfig scheduler;
  std::size_t stats_ring = 1024;  // steps kept for metrics
  // Optional agent memory (kv/agent_index.h, host_store.h, disk_store.h); each must outlive
  // the engine.
  AgentIndex* agents = nullptr;
  HostStore* host = nullptr;
  DiskStore* disk = nullptr;
  // Hybrid models (Qwen3-Next, Qwen3.5): host memory for snapshots of sequences' recurrent state
  // (engine/state_snapshots.h), taken every `state_snapshot_interval` tokens of a prefill and at
  // each request's end; a prompt then resumes at its deepest snapshot whose KV prefix is cached.
  // 0 bytes: no snapshots, every hybrid prompt is computed from token 0.
  std::int64_t state_snapshot_bytes = 1ll << 30;
  std::int32_t state_snapshot_interval = 1024;
  // How snapshots are kept in memory and written as state blocks (kv/state_codec.h; exact by
  // default). State blocks of any codec are read.
  StateCodec state_codec = StateCodec::Exact;
  // Load a prefix found on disk on restore threads while other sequences decode (else at
  // admission, on the engine thread: tests only). Host-tier blocks need no load.
  bool background_restore = true;
  // Loaded disk blocks held by background loads at most, across requests.
  std::size_t restore_max_bytes = Restorer::kDefaultMaxBytes;
};

// The agents API's changes (kv/agent_index.h); see Engine::change_agent.
enum class AgentAction { Pin, Unpin, Evict, Delete };

class Engine {
 public:
  // Allocates the KV cache on `backend` and starts the engine thread. The backend must outlive
  // the engine; the engine owns the model.
  Engine(std::unique_ptr<Model> model, Backend& backend, EngineConfig config);
  // Stops the thread (stop()).
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; events go to on_event on the engine thread. Thread-safe.
  // Throws Error{InvalidArgument} for an empty prompt, a token outside the vocabulary, a prompt
  // that leaves no room for one token in the context, max_tokens < 1 or bad sampling values.
  RequestId submit(GenerateRequest request, EventCallback on_event);
  // Ends a request with Finished{Cancelled} at the next step and frees its KV. Thread-safe;
  // a no-op for unknown or finished ids.
  void cancel(RequestId id);

  // Drops the blocks with these keys (an agent's chain) from device memory and the host tier
  // at the next step, where no running request holds them. Thread-safe.
  void evict_blocks(std::vector<Hash128> keys);
  // Sets the retention of the blocks with these keys at the next step. Thread-safe.
  void set_retention(std::vector<Hash128> keys, Retention retention);
  // Pins, unpins, evicts or deletes an agent (KvManager's agent hooks) on the engine thread
  // before the next step, in the order queued, so the agent index, the manifests and the
  // blocks' retention have one writer. The future holds the agent's record after the change
  // (Delete: as it was); nullopt for an unknown agent or without agent memory.
  // Delete wins over the agent's requests in flight: one submitted before the Delete was queued
  // runs to its end but records no turn, so the agent stays deleted and no manifest names the
  // erased files; one submitted after the future is ready starts the agent afresh (one racing
  // with the call may do either).
  // Thread-safe; the future is ready within one step.
  std::future<std::optional<AgentRecord>> change_agent(std::string ns, std::string agent,
                                                       AgentAction action);

  // Stops the engine thread; requests still open get Finished{Cancelled} (their agents are
  // recorded). Returns once the thread has exited. Idempotent; call from one thread. Afterwards
  // only metrics(), model_config(), max_context() and spill_agents_to_disk() may be called.
  void stop();
  // After stop() (graceful shutdown): queues the agents' chain blocks the disk tier lacks
  // (KvManager::spill_agents_to_disk), waiting for its queue until `deadline`.
  AgentSpill spill_agents_to_disk(std::chrono::steady_clock::time_point deadline);

  EngineMetrics metrics() const;
  // Committed blocks not yet copied into the disk tier's queue, as of the engine's last request
  // end or spill slice: 0 after a request's Finished means its blocks are in DiskStore's queue
  // (DiskStore::flush then waits for their writes). Thread-safe.
  std::size_t spills_pending() const { return spills_pending_.load(std::memory_order_acquire); }
  const ModelConfig& model_config() const { return model_->config(); }
  // Most tokens (prompt + generated) one sequence may hold: the smaller of the model's context
  // and the KV pool's capacity.
  std::int32_t max_context() const { return max_context_; }
  // The model's context (max_position_embeddings; the pool's capacity when the config has none).
  std::int32_t model_context() const { return model_context_; }
  // Why max_context() is what it is, for a too-long-prompt error: "" when it is the model's
  // context, else a sentence naming the KV pool's capacity and the flags that size it.
  std::string context_limit_note() const;
  // The KV cache as allocated (dtype, blocks, bytes).
  const KvLayout& kv_layout() const { return kv_storage_.layout; }
  // Token positions the device KV pool holds (n_blocks * block_size).
  std::int64_t kv_capacity_tokens() const { return std::int64_t{config_.n_blocks} * config_.block_size; }

 private:
  struct Active;  // a request inside the engine (a Sequence plus its sampler and callback)

  void validate(const GenerateRequest& r) const;
  void loop();
  bool take_inbox(std::unique_lock<std::mutex>& lock);
  // Runs one step; false when it planned nothing (every waiting sequence is restoring).
  bool step();
  // Copies queued disk spills out of device memory (KvManager::spill_queued): a few per step
  // while requests run, more per wake-up while idle.
  void drain_spills(bool busy);
  static constexpr std::int64_t kSpillBytesPerStep = 4ll << 20;
  static constexpr std::int64_t kSpillBytesIdle = 32ll << 20;
  // While spills wait for room in the disk queue, the idle engine looks again this often.
  static constexpr std::chrono::milliseconds kSpillRoomPoll{20};
  // Sends Started to requests whose first chunk is in `plan`.
  void announce_started(const StepPlan& plan);
  // Samples a's next token from `logits`, or takes `picked_id` (>= 0) when the runner picked it.
  void advance(Active& a, std::span<const float> logits, std::int32_t picked_id);
  bool emit(Active& a, const EngineEvent& e);
  struct AgentOp;
  void apply(AgentOp& op);
  void finish(Active& a, FinishReason reason, std::string_view error = {});

  std::unique_ptr<Model> model_;
  Backend& backend_;
  EngineConfig config_;
  std::int32_t model_context_;
  std::int32_t max_context_;
  KvStorage kv_storage_;
  KvManager kv_;
  Scheduler scheduler_;
  std::unique_ptr<StateSnapshots> snapshots_;  // hybrid models with snapshots on
  std::unique_ptr<SnapshotResume> resume_;
  StepRunner runner_;
  StepStatsRing stats_;

  // Engine thread only.
  std::unordered_map<RequestId, std::unique_ptr<Active>> active_;
  std::vector<std::unique_ptr<Active>> admitted_;
  std::vector<RequestId> cancelled_;
  std::vector<Active*> finishing_;
  std::vector<StepRunner::IdPick> picks_;  // [chunk] of a step that brings back only ids
  EngineEvent event_;

  std::atomic<std::size_t> spills_pending_{0};  // written by the engine thread (spills_pending)

  // Shared with submitters, under mu_.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Active>> inbox_;
  std::vector<RequestId> cancel_inbox_;
  struct KeysOp {
    std::vector<Hash128> keys;
    bool evict = false;  // else set retention
    Retention retention = Retention::Normal;
  };
  std::vector<KeysOp> keys_inbox_;
  struct AgentOp {
    std::string ns, agent;
    AgentAction action = AgentAction::Evict;
    std::promise<std::optional<AgentRecord>> done;
  };
  std::vector<AgentOp> agent_inbox_;
  bool restore_done_ = false;  // a background load finished since the loop last looked
  bool stop_ = false;
  RequestId next_id_ = 1;
  std::uint64_t seed_base_;

  std::unique_ptr<Restorer> restorer_;  // with a disk tier; wakes the loop through mu_
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace akv
