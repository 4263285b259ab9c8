// An engine over a real model with the agent memory's tiers, as `agentkv serve` wires them: an
// agent index, a disk tier on a directory (its manifests loaded), an optional host tier, and the
// engine on the scalar reference backend. Shared by the agent-memory tests of plain and hybrid
// models; destroyed engine first, then the tiers.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "backend/cpu/reference_backend.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "kv/agent_index.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "kv/model_fingerprint.h"
#include "models/model.h"

namespace akv::test {

struct ServedOptions {
  std::int32_t block_size = 8;
  std::int32_t n_blocks = 64;
  std::size_t host_blocks = 0;  // 0: no host tier
  SpillCodec host_codec = SpillCodec::Native;
  SpillCodec codec = SpillCodec::Native;
  SchedulerConfig scheduler{.max_batch_tokens = 32, .max_prefill_chunk = 16, .max_running = 8};
  std::int64_t snapshot_bytes = EngineConfig{}.state_snapshot_bytes;  // hybrid models
  std::int32_t snapshot_interval = EngineConfig{}.state_snapshot_interval;
  StateCodec state_codec = StateCodec::Exact;
  std::function<void(DiskStoreOptions&)> tune_disk{};  // last word on the disk tier's options
};

struct ServedEngine {
  ServedEngine(const std::string& model_dir, const std::string& kv_dir, const ServedOptions& opt = {}) {
    auto model = load_model(model_dir, backend);
    const KvLayout layout = kv_layout_for(model->config(), opt.n_blocks, opt.block_size, DType::F32);
    DiskStoreOptions o;
    o.dir = kv_dir;
    o.fingerprint = model_fingerprint({.model_dir = model_dir, .chat_template = "", .kv = layout, .codec = opt.codec});
    o.codec = opt.codec;
    o.shape = block_shape_of(layout);
    o.block_size = opt.block_size;
    if (opt.tune_disk) opt.tune_disk(o);
    store = DiskStore::open_or_throw(o);
    for (AgentRecord& r : store->take_loaded_manifests()) agents.load(std::move(r));
    EngineConfig cfg{.block_size = opt.block_size,
                     .n_blocks = opt.n_blocks,
                     .scheduler = opt.scheduler,
                     .state_snapshot_bytes = opt.snapshot_bytes,
                     .state_snapshot_interval = opt.snapshot_interval,
                     .state_codec = opt.state_codec};
    if (opt.host_blocks > 0) {
      HostStoreOptions h;
      h.max_bytes = opt.host_blocks * o.shape.raw_bytes();
      h.codec = opt.host_codec;
      h.shape = o.shape;
      h.block_size = opt.block_size;
      h.on_disk = [this](const Hash128& key) { return store->has(key); };
      host = std::make_unique<HostStore>(std::move(h));
    }
    cfg.agents = &agents;
    cfg.host = host.get();
    cfg.disk = store.get();
    engine = std::make_unique<Engine>(std::move(model), backend, cfg);
  }

  Collector::Result run(Ids prompt, int n, const std::string& agent, const std::string& ns = "",
                        std::int32_t n_logprobs = 0) {
    GenerateRequest r;
    r.n_logprobs = n_logprobs;
    r.prompt = std::move(prompt);
    r.max_tokens = n;
    r.ns = ns;
    r.agent = agent;
    return out.wait(engine->submit(std::move(r), out.callback()));
  }
  // The engine copies committed blocks into the disk queue between steps, and the IO thread
  // writes them: waits for both (and the manifests).
  void settle() {
    for (int i = 0; i < 10000 && engine->spills_pending() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(engine->spills_pending(), 0u) << "spills still waiting for the disk queue";
    store->flush();
  }
  // The engine counts a request's prefix blocks by tier just after its Finished event: waits
  // until the counts reach `n_blocks` (each request adds (prompt - 1) / block of them).
  EngineTotals totals_after(std::uint64_t n_blocks) {
    for (int i = 0; i < 2000; ++i) {
      const EngineTotals t = engine->metrics().totals;
      if (t.prefix_blocks_device + t.prefix_blocks_host + t.prefix_blocks_disk + t.prefix_blocks_missed >= n_blocks)
        return t;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ADD_FAILURE() << "prefix block counts never arrived";
    return engine->metrics().totals;
  }
  // What `agentkv serve` does on SIGTERM: stop the engine, queue the agents' blocks the disk
  // lacks, write the queue (bounded by the deadline).
  AgentSpill stop_gracefully(std::chrono::seconds timeout = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    engine->stop();
    const AgentSpill spill = engine->spill_agents_to_disk(deadline);
    EXPECT_TRUE(store->drain(deadline).in_time);
    return spill;
  }

  ReferenceBackend backend;
  AgentIndex agents;
  std::unique_ptr<DiskStore> store;
  std::unique_ptr<HostStore> host;
  std::unique_ptr<Engine> engine;
  Collector out;
};

}  // namespace akv::test
