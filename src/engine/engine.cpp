#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>
#include <string>

#include "base/check.h"
#include "base/error.h"
#include "base/phase_clock.h"

namespace akv {

struct Engine::Active : Sequence {
  Active(RequestId rid, GenerateRequest r, EventCallback cb, std::int32_t vocab, std::uint64_t seed)
      : request(std::move(r)),
        on_event(std::move(cb)),
        sampler(request.sampling, vocab, seed, request.prompt) {
    id = arrival = rid;
    ns = request.ns;
    retention = request.retention;
    tokens = request.prompt;
    tokens.reserve(tokens.size() + static_cast<std::size_t>(request.max_tokens) + 1);
    n_prompt = n_tokens();
    sampler.set_constraint(request.constraint.get());
  }
  GenerateRequest request;
  EventCallback on_event;
  Sampler sampler;
  bool started_sent = false;  // the Started event went out
  bool agent_deleted = false;  // its agent was deleted while it ran: record no turn
  // Hybrid models with snapshots: the state at its last block boundary, kept as its end snapshot.
  std::vector<float> boundary_state;
  std::int32_t boundary_pos = 0;
  std::int32_t kept_pos = -1;  // the position of its last snapshot kept while it ran
};

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::int32_t model_context_of(const ModelConfig& c, const EngineConfig& e) {
  const std::int64_t kv_positions = std::int64_t{e.n_blocks} * e.block_size;
  const std::int64_t model = c.max_position_embeddings > 0 ? c.max_position_embeddings : kv_positions;
  return static_cast<std::int32_t>(std::min<std::int64_t>(model, std::numeric_limits<std::int32_t>::max()));
}

// Hybrid models' recurrent state is not in the KV: a cached prefix resumes them only up to a
// state snapshot, and without snapshots not at all.
EngineConfig adapted_to(EngineConfig e, const ModelConfig& c) {
  if (!is_hybrid(c.family)) return e;
  if (e.state_snapshot_bytes <= 0) e.scheduler.prefix_reuse = false;
  else  // whole blocks: the KV resumes only there
    e.scheduler.snapshot_interval =
        (std::max(0, e.state_snapshot_interval) + e.block_size - 1) / e.block_size * e.block_size;
  return e;
}

std::int32_t context_limit(const ModelConfig& c, const EngineConfig& e) {
  const std::int64_t kv_positions = std::int64_t{e.n_blocks} * e.block_size;
  return static_cast<std::int32_t>(std::min<std::int64_t>(kv_positions, model_context_of(c, e)));
}

}  // namespace

Engine::Engine(std::unique_ptr<Model> model, Backend& backend, EngineConfig config)
    : model_(std::move(model)),
      backend_(backend),
      config_(adapted_to(config, model_->config())),
      model_context_(model_context_of(model_->config(), config_)),
      max_context_(context_limit(model_->config(), config_)),
      kv_storage_(alloc_model_kv(backend, model_->config(), config_.n_blocks, config_.block_size, config_.kv_dtype,
                                 config_.scheduler.max_running)),
      kv_(config_.n_blocks, config_.block_size, KvManager::backend_copier(backend_, kv_storage_)),
      scheduler_(config_.scheduler, kv_),
      runner_(*model_, kv_storage_),
      stats_(config_.stats_ring),
      seed_base_(std::random_device{}()) {
  event_.top_logprobs.reserve(64);
  if (is_hybrid(model_->config().family) && config_.state_snapshot_bytes > 0) {
    snapshots_ = std::make_unique<StateSnapshots>(config_.state_snapshot_bytes, config_.state_codec);
    resume_ = std::make_unique<SnapshotResume>(*snapshots_, backend_, kv_storage_, &kv_);
    scheduler_.set_state_resume(resume_.get());
  }
  if (config_.disk != nullptr && config_.background_restore) {
    const auto wake = [this] {
      {
        std::lock_guard lock(mu_);
        restore_done_ = true;
      }
      wake_.notify_one();
    };
    // Woken as a load progresses too: its loaded blocks go to the device ahead of the match.
    restorer_ = std::make_unique<Restorer>(config_.disk, wake, config_.restore_max_bytes, Restorer::default_threads(),
                                           config_.host,
                                           /*device_decodes=*/backend_.device_memory().has_value(), wake);
  }
  if (config_.agents != nullptr || config_.host != nullptr || config_.disk != nullptr)
    kv_.attach_tiers({.agents = config_.agents,
                      .host = config_.host,
                      .disk = config_.disk,
                      .restorer = restorer_.get(),
                      .host_write_through = backend_.device_memory().has_value()},
                     KvBlockIo::for_backend(backend_, kv_storage_));
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  stop();
}

void Engine::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

AgentSpill Engine::spill_agents_to_disk(std::chrono::steady_clock::time_point deadline) {
  AKV_CHECK(!thread_.joinable(), "spill_agents_to_disk before stop");
  return kv_.spill_agents_to_disk(deadline);
}

std::string Engine::context_limit_note() const {
  if (max_context_ >= model_context_) return "";
  return " (the model's context is " + std::to_string(model_context_) + " tokens, but the KV cache pool holds " +
         std::to_string(kv_capacity_tokens()) + ": raise --gpu-memory-fraction or --kv-cache-mb)";
}

void Engine::validate(const GenerateRequest& r) const {
  auto bad = [](const std::string& what) { throw Error(ErrorKind::InvalidArgument, what); };
  const std::int64_t vocab = model_->config().vocab_size;
  if (r.prompt.empty()) bad("the prompt has no tokens");
  for (std::int32_t t : r.prompt)
    if (t < 0 || t >= vocab)
      bad("token id " + std::to_string(t) + " is outside the vocabulary (size " +
          std::to_string(vocab) + ")");
  if (static_cast<std::int64_t>(r.prompt.size()) >= max_context_)
    bad("the prompt has " + std::to_string(r.prompt.size()) + " tokens; the context holds " +
        std::to_string(max_context_) + " including at least one generated token" + context_limit_note());
  if (r.max_tokens < 1) bad("max_tokens must be at least 1");
  if (r.n_logprobs < 0 || r.n_logprobs > 20) bad("logprobs must be in [0, 20]");
  const SamplingParams& s = r.sampling;
  if (!(s.temperature >= 0.0f)) bad("temperature must be >= 0");
  if (s.top_k < 0) bad("top_k must be >= 0");
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f)) bad("top_p must be in (0, 1]");
  if (!(s.min_p >= 0.0f && s.min_p <= 1.0f)) bad("min_p must be in [0, 1]");
  if (!(s.repetition_penalty > 0.0f)) bad("repetition_penalty must be > 0");
}

RequestId Engine::submit(GenerateRequest request, EventCallback on_event) {
  validate(request);
  const auto vocab = static_cast<std::int32_t>(model_->config().vocab_size);
  std::unique_lock lock(mu_);
  const RequestId id = next_id_++;
  const std::uint64_t seed = splitmix64(seed_base_ ^ id);
  lock.unlock();
  auto active = std::make_unique<Active>(id, std::move(request), std::move(on_event), vocab, seed);
  lock.lock();
  inbox_.push_back(std::move(active));
  lock.unlock();
  wake_.notify_one();
  return id;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lock(mu_);
    cancel_inbox_.push_back(id);
  }
  wake_.notify_one();
}

void Engine::evict_blocks(std::vector<Hash128> keys) {
  {
    std::lock_guard lock(mu_);
    keys_inbox_.push_back({.keys = std::move(keys), .evict = true});
  }
  wake_.notify_one();
}

void Engine::set_retention(std::vector<Hash128> keys, Retention retention) {
  {
    std::lock_guard lock(mu_);
    keys_inbox_.push_back({.keys = std::move(keys), .evict = false, .retention = retention});
  }
  wake_.notify_one();
}

std::future<std::optional<AgentRecord>> Engine::change_agent(std::string ns, std::string agent,
                                                             AgentAction action) {
  AgentOp op{.ns = std::move(ns), .agent = std::move(agent), .action = action, .done = {}};
  std::future<std::optional<AgentRecord>> result = op.done.get_future();
  {
    std::lock_guard lock(mu_);
    agent_inbox_.push_back(std::move(op));
  }
  wake_.notify_one();
  return result;
}

void Engine::apply(AgentOp& op) {
  std::optional<AgentRecord> r;
  switch (op.action) {
    case AgentAction::Pin:
    case AgentAction::Unpin:
      r = kv_.set_agent_pinned(op.ns, op.agent, op.action == AgentAction::Pin);
      break;
    case AgentAction::Evict:
      r = kv_.evict_agent(op.ns, op.agent);
      break;
    case AgentAction::Delete:
      r = kv_.erase_agent(op.ns, op.agent);
      if (r)
        for (auto& [id, a] : active_)
          if (a->ns == op.ns && a->request.agent == op.agent) a->agent_deleted = true;
      break;
  }
  op.done.set_value(std::move(r));
}

EngineMetrics Engine::metrics() const {
  return {stats_.totals(), stats_.snapshot(), stats_.step_time.snapshot()};
}

void Engine::loop() {
  std::unique_lock lock(mu_);
  bool idle = false;  // the last step planned nothing: sleep until something changes
  while (true) {
    const auto ready = [&] {
      return stop_ || !inbox_.empty() || !cancel_inbox_.empty() || !keys_inbox_.empty() ||
             !agent_inbox_.empty() || restore_done_ ||
             (!idle && scheduler_.n_running() + scheduler_.n_waiting() > 0) || kv_.spills_ready();
    };
    // Spills waiting for room in the disk queue: look again soon (the IO thread does not wake
    // the engine).
    if (kv_.n_spills_queued() > 0)
      wake_.wait_for(lock, kSpillRoomPoll, ready);
    else
      wake_.wait(lock, ready);
    if (stop_) break;
    restore_done_ = false;
    admitted_.swap(inbox_);
    cancelled_.swap(cancel_inbox_);
    std::vector<KeysOp> key_ops;
    key_ops.swap(keys_inbox_);
    std::vector<AgentOp> agent_ops;
    agent_ops.swap(agent_inbox_);
    lock.unlock();
    for (const KeysOp& op : key_ops) {
      if (op.evict)
        kv_.evict_keys(op.keys);
      else
        kv_.set_retention(op.keys, op.retention);
    }
    for (std::unique_ptr<Active>& a : admitted_) {
      scheduler_.add(a.get());
      const RequestId id = a->id;
      active_.emplace(id, std::move(a));
    }
    admitted_.clear();
    // After the admissions: a Delete sees every request submitted before it was queued.
    for (AgentOp& op : agent_ops) apply(op);
    for (RequestId id : cancelled_)
      if (auto it = active_.find(id); it != active_.end())
        finish(*it->second, FinishReason::Cancelled);
    cancelled_.clear();
    const bool busy = scheduler_.n_running() + scheduler_.n_waiting() > 0;
    idle = busy ? !step() : false;
    drain_spills(busy && !idle);
    lock.lock();
  }
  // Shutting down: nothing is left half-open.
  for (std::unique_ptr<Active>& a : inbox_) active_.emplace(a->id, std::move(a));
  inbox_.clear();
  std::vector<AgentOp> agent_ops;
  agent_ops.swap(agent_inbox_);
  lock.unlock();
  for (AgentOp& op : agent_ops) apply(op);
  while (!active_.empty()) finish(*active_.begin()->second, FinishReason::Cancelled);
}

void Engine::drain_spills(bool busy) {
  // Busy: a slice per step small next to a decode step's own traffic; idle: larger slices,
  // with the inbox checked between them.
  const std::int64_t bytes = busy ? kSpillBytesPerStep : kSpillBytesIdle;
  const std::int64_t block = std::max<std::int64_t>(1, kv_storage_.layout.block_bytes());
  kv_.spill_queued(static_cast<std::int32_t>(std::max<std::int64_t>(1, bytes / block)));
  spills_pending_.store(kv_.n_spills_queued(), std::memory_order_release);
}

bool Engine::step() {
  PhaseClock clock;  // a lap per phase edge: st.phases adds up to st.step_ms
  const auto t0 = clock.last();
  const StepPlan& plan = scheduler_.schedule();
  StepStats st;
  StepPhases& ph = st.phases;
  ph.kv_ms = plan.kv_ms;
  ph.schedule_ms = clock.lap_ms() - plan.kv_ms;
  st.step = stats_.steps.load(std::memory_order_relaxed);
  st.batch_size = static_cast<std::int32_t>(plan.chunks.size());
  st.decode_tokens = plan.n_decode_tokens;
  st.prefill_tokens = plan.n_tokens - plan.n_decode_tokens;
  st.prefix_hit_tokens = plan.n_prefix_hit_tokens;
  st.preempted = static_cast<std::int32_t>(plan.preempted.size());

  // The plan's vectors stay valid until the next schedule(); finishing a request only removes
  // it from the scheduler's queues. Copy what we finish out first, since finish() destroys it.
  announce_started(plan);
  finishing_.clear();
  for (Sequence* s : plan.failed) finishing_.push_back(static_cast<Active*>(s));
  for (Active* a : finishing_)
    finish(*a, FinishReason::Error, "the request does not fit in the KV cache");

  if (!plan.chunks.empty()) {
    clock.lap_into(ph.other_ms);
    // Only ids come back when every token due this step is a plain greedy pick or a plain
    // temperature draw (issue #7: the logits rows are vocab floats each).
    bool ids = true;
    for (const ScheduledChunk& c : plan.chunks) {
      const Active& a = static_cast<const Active&>(*c.seq);
      if (c.n_tokens == a.remaining() && (a.request.n_logprobs > 0 ||
                                          !(a.sampler.picks_raw_argmax() || a.sampler.draws_plain())))
        ids = false;
    }
    // The draws' uniforms come from each request's RNG, as sample() would take them.
    picks_.clear();
    if (ids) {
      for (const ScheduledChunk& c : plan.chunks) {
        Active& a = static_cast<Active&>(*c.seq);
        StepRunner::IdPick p;  // temperature 0: argmax_row
        if (c.n_tokens == a.remaining() && !a.sampler.picks_raw_argmax())
          p = {a.sampler.temperature(), a.sampler.draw_uniform()};
        picks_.push_back(p);
      }
    }
    bool ran = false;
    try {
      runner_.run(plan, ids ? StepRunner::Output::Ids : StepRunner::Output::Logits, picks_);
      ran = true;
    } catch (const std::exception& e) {
      finishing_.clear();
      for (const ScheduledChunk& c : plan.chunks) finishing_.push_back(static_cast<Active*>(c.seq));
      for (Active* a : finishing_) finish(*a, FinishReason::Error, e.what());
    }
    ph.forward_ms = runner_.forward_ms();
    ph.build_ms = clock.lap_ms() - ph.forward_ms;
    if (ran) {
      for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
        Active& a = static_cast<Active&>(*plan.chunks[i].seq);
        a.n_computed += plan.chunks[i].n_tokens;
        kv_.commit(a.kv, a.tokens, a.n_computed);
        if (resume_ != nullptr && a.n_computed % config_.block_size == 0) {
          resume_->read(a, a.boundary_state);
          a.boundary_pos = a.n_computed;
          // Every interval, and at the prompt's snapshot point: the end snapshot lies past the
          // prefix a next turn (re-rendering the generation prompt and reply) or a repeat shares.
          const std::int32_t every = config_.scheduler.snapshot_interval;
          const bool prompt_point = a.n_computed == prompt_snapshot_point(a, config_.block_size, config_.scheduler);
          if ((every > 0 && a.n_computed % every == 0) || prompt_point) {
            resume_->keep(a, a.n_computed, a.boundary_state);
            a.kept_pos = a.n_computed;
          }
        }
        clock.lap_into(ph.commit_ms);
        if (a.remaining() == 0) {
          advance(a, runner_.logits_for(i), runner_.id_for(i));
          clock.lap_into(ph.sample_ms);
        }
      }
    }
  }

  st.running = scheduler_.n_running();
  st.waiting = scheduler_.n_waiting();
  st.restoring = scheduler_.n_restoring();
  st.kv = kv_.usage();
  clock.lap_into(ph.other_ms);
  st.step_ms = std::chrono::duration<double, std::milli>(clock.last() - t0).count();
  stats_.preemptions.fetch_add(plan.preempted.size(), std::memory_order_relaxed);
  stats_.steps.fetch_add(1, std::memory_order_relaxed);
  stats_.record(st);
  return !plan.chunks.empty() || !plan.failed.empty();
}

void Engine::announce_started(const StepPlan& plan) {
  finishing_.clear();
  for (const ScheduledChunk& c : plan.chunks) {
    Active& a = static_cast<Active&>(*c.seq);
    if (a.started_sent) continue;
    a.started_sent = true;
    EngineEvent e;
    e.kind = EventKind::Started;
    e.request = a.id;
    e.usage = {.prompt_tokens = a.n_prompt,
               .cached_tokens = std::max(0, a.n_cached_prompt),
               .generated_tokens = 0};
    if (!emit(a, e)) finishing_.push_back(&a);
  }
  // A callback that threw cancels its request; the plan still lists it, so it runs this step
  // and is finished (Cancelled) when its cancellation is taken from the inbox.
  for (Active* a : finishing_) cancel(a->id);
}

void Engine::advance(Active& a, std::span<const float> logits, std::int32_t picked_id) {
  SampleResult r;
  try {
    if (picked_id >= 0) {
      r = a.sampler.picks_raw_argmax() ? a.sampler.take_argmax(picked_id) : a.sampler.take_drawn(picked_id);
      event_.top_logprobs.clear();
    } else {
      r = a.sampler.sample(logits, a.request.n_logprobs, event_.top_logprobs);
    }
  } catch (const std::exception& e) {
    finish(a, FinishReason::Error, e.what());
    return;
  }
  a.tokens.push_back(r.token);
  event_.kind = EventKind::Token;
  event_.request = a.id;
  event_.token = r.token;
  event_.logprob = r.logprob;
  if (!emit(a, event_)) {
    finish(a, FinishReason::Cancelled);
    return;
  }
  const auto& stops = a.request.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), r.token) != stops.end())
    finish(a, FinishReason::Stop);
  else if (a.n_generated() >= a.request.max_tokens || a.n_tokens() >= max_context_)
    finish(a, FinishReason::Length);
}

bool Engine::emit(Active& a, const EngineEvent& e) {
  try {
    if (a.on_event) a.on_event(e);
    return true;
  } catch (...) {
    return false;
  }
}

void Engine::finish(Active& a, FinishReason reason, std::string_view error) {
  // Its state at its last block boundary: the next turn of the conversation resumes there.
  if (resume_ != nullptr && a.boundary_pos > 0 && a.boundary_pos != a.kept_pos && reason != FinishReason::Error)
    resume_->keep(a, a.boundary_pos, std::move(a.boundary_state));
  // Before Finished goes out, so a client that sees the end also sees the agent's new state.
  if (!a.request.agent.empty() && !a.agent_deleted)
    kv_.remember_agent(a.kv, a.ns, a.request.agent, a.n_computed, a.n_cached_prompt > 0);
  const Usage usage{.prompt_tokens = a.n_prompt,
                    .cached_tokens = std::max(0, a.n_cached_prompt),
                    .generated_tokens = a.n_generated()};
  EngineEvent e;
  e.request = a.id;
  e.usage = usage;
  if (!error.empty()) {
    e.kind = EventKind::Error;
    e.error = std::string(error);
    emit(a, e);
  }
  e.kind = EventKind::Finished;
  e.finish_reason = reason;
  spills_pending_.store(kv_.n_spills_queued(), std::memory_order_release);  // its blocks included
  emit(a, e);
  stats_.requests_finished.fetch_add(1, std::memory_order_relaxed);
  if (a.n_cached_prompt >= 0)  // it was admitted (matched against the tiers)
    stats_.count_prefix_blocks(usage.prompt_tokens, usage.cached_tokens, a.kv.n_host_restored_blocks(),
                               a.kv.n_restored_blocks(), config_.block_size);
  stats_.prompt_tokens.fetch_add(static_cast<std::uint64_t>(usage.prompt_tokens),
                                 std::memory_order_relaxed);
  stats_.cached_prompt_tokens.fetch_add(static_cast<std::uint64_t>(usage.cached_tokens),
                                        std::memory_order_relaxed);
  stats_.generated_tokens.fetch_add(static_cast<std::uint64_t>(usage.generated_tokens),
                                    std::memory_order_relaxed);
  scheduler_.finish(&a);
  active_.erase(a.id);  // destroys `a`
}

}  // namespace akv
