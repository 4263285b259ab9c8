// Agent memory on hybrid models (Qwen3.5 text and MoE, Qwen3-Next; scalar reference backend): a
// returning agent resumes at its last snapshot with the KV of the same prefix from the host tier
// after a device eviction and from the disk tier after a restart (the snapshot written there
// as a state block), a second agent resumes at the deepest snapshot of a shared prefix; each
// gives the cold run's greedy tokens and top logprobs, and usage reports the snapshot's
// position. A damaged state block is refused and recomputed; another tenant never resumes. The
// state block is read by the restorer's threads: the engine keeps stepping meanwhile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <fstream>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "kv/agent_index.h"
#include "kv/disk_format.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "kv/model_fingerprint.h"
#include "engine_test_util.h"
#include "served_engine.h"

namespace akv {
namespace {

namespace fs = std::filesystem;
using test::Collector;
using test::greedy_alone;
using test::Ids;
using test::ScratchDir;
using Result = Collector::Result;

constexpr std::int32_t kBlock = 8;
// The fixtures' fp32 logits agree with their fp64 references to ~7e-5 relative over 300 tokens
// (SOURCES.md); a resumed run and a cold one differ only in summation order within that.
constexpr double kLogprobTolerance = 1e-4;

std::string fixture(const std::string& name) {
  return std::string(AGENTKV_TESTDATA) + "/models/tiny-random-w2/" + name;
}

Ids random_ids(std::uint32_t seed, int n) {
  std::mt19937 rng(seed);
  Ids ids(n);
  for (auto& t : ids) t = std::uniform_int_distribution<int>(3, 511)(rng);
  return ids;
}

struct Options {
  std::int32_t n_blocks = 64;
  std::size_t host_blocks = 0;
  std::int32_t snapshot_interval = 1024;
  std::int64_t snapshot_bytes = 1ll << 30;
  std::function<void(bool state)> before_load{};  // DiskStoreOptions::before_load
  StateCodec state_codec = StateCodec::Exact;
};

// A hybrid model in test::ServedEngine, with snapshots; snapshot_bytes 0: the cold reference (no
// reuse). Requests ask for 5 top logprobs.
struct Served : test::ServedEngine {
  Served(const std::string& model_dir, const std::string& kv_dir, const Options& opt = {})
      : ServedEngine(model_dir, kv_dir,
                     {.block_size = kBlock,
                      .n_blocks = opt.n_blocks,
                      .host_blocks = opt.host_blocks,
                      .scheduler = {.max_batch_tokens = 32, .max_prefill_chunk = 16, .max_running = 4},
                      .snapshot_bytes = opt.snapshot_bytes,
                      .snapshot_interval = opt.snapshot_interval,
                      .state_codec = opt.state_codec,
                      .tune_disk = [before_load = opt.before_load](DiskStoreOptions& o) { o.before_load = before_load; }}) {}
  Result run(Ids prompt, int n, const std::string& agent, const std::string& ns = "") {
    return ServedEngine::run(std::move(prompt), n, agent, ns, 5);
  }
};

class HybridMemory : public ::testing::TestWithParam<std::string> {
 protected:
  std::string model() const { return fixture(GetParam()); }
  // The same prompt on an engine that reuses nothing: tokens and top logprobs to compare with.
  Result cold(const Ids& prompt, int n) {
    ScratchDir dir;
    Served s(model(), dir.path, {.snapshot_bytes = 0});
    return s.run(prompt, n, "");
  }
  void expect_like_cold(const Result& r, const Ids& prompt, int n) {
    EXPECT_EQ(r.tokens, greedy_alone(model(), prompt, n));
    const Result c = cold(prompt, n);
    ASSERT_EQ(r.top.size(), c.top.size());
    for (std::size_t i = 0; i < r.top.size(); ++i) {
      ASSERT_EQ(r.top[i].size(), c.top[i].size());
      for (std::size_t j = 0; j < r.top[i].size(); ++j) {
        EXPECT_EQ(r.top[i][j].id, c.top[i][j].id);
        EXPECT_NEAR(r.top[i][j].logprob, c.top[i][j].logprob, kLogprobTolerance);
      }
    }
  }
  // An agent's first turn: 45 prompt tokens and 12 generated leave 56 computed, its end
  // snapshot at 56 (7 blocks); the second turn is the first plus its answer plus new tokens.
  static constexpr std::int32_t kResumeAt = 56;
  Ids first_turn() const { return random_ids(11, 45); }
  Ids second_turn(const Result& r1) const {
    Ids p = first_turn();
    p.insert(p.end(), r1.tokens.begin(), r1.tokens.end());
    for (std::int32_t t : random_ids(12, 9)) p.push_back(t);
    return p;
  }
};

TEST_P(HybridMemory, ReturningAgentAfterDeviceEvictionResumesFromTheHostTier) {
  ScratchDir dir;
  // 20 device blocks: another agent's 140-token prompt pushes the first agent's blocks out of
  // device memory into the host tier.
  Served s(model(), dir.path, {.n_blocks = 20, .host_blocks = 64});
  const Result r1 = s.run(first_turn(), 12, "a");
  s.run(random_ids(13, 140), 4, "b");
  const Ids prompt = second_turn(r1);
  const Result r2 = s.run(prompt, 6, "a");
  EXPECT_EQ(r2.usage.cached_tokens, kResumeAt);
  const std::uint64_t n_counted = (45 - 1) / kBlock + (140 - 1) / kBlock + (prompt.size() - 1) / kBlock;
  EXPECT_GT(s.totals_after(n_counted).prefix_blocks_host, 0u) << "not from the host tier";
  expect_like_cold(r2, prompt, 6);
}

TEST_P(HybridMemory, AgentAfterRestartResumesFromDisk) {
  ScratchDir dir;
  Result r1;
  {
    Served s(model(), dir.path);
    r1 = s.run(first_turn(), 12, "a");
    s.stop_gracefully();
    EXPECT_GE(s.store->stats().n_states, 1);
  }
  Served s(model(), dir.path);
  const std::optional<AgentRecord> rec = s.agents.find("", "a");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->states.size(), 1u) << "the manifest names its snapshot";
  const Ids prompt = second_turn(r1);
  const Result r2 = s.run(prompt, 6, "a");
  EXPECT_EQ(r2.usage.cached_tokens, kResumeAt);
  EXPECT_EQ(s.totals_after((prompt.size() - 1) / kBlock).prefix_blocks_disk, kResumeAt / kBlock);
  expect_like_cold(r2, prompt, 6);
}

// Snapshots every 16 tokens: after a restart, a second agent sharing the first 40 tokens of the
// first agent's prompt resumes at 32, the deepest snapshot within them.
TEST_P(HybridMemory, SecondAgentSharingAPrefixResumesAtItsDeepestSnapshot) {
  ScratchDir dir;
  {
    Served s(model(), dir.path, {.snapshot_interval = 16});
    s.run(first_turn(), 12, "a");
    s.stop_gracefully();
  }
  Served s(model(), dir.path, {.snapshot_interval = 16});
  Ids prompt = first_turn();
  prompt.resize(40);
  for (std::int32_t t : random_ids(14, 10)) prompt.push_back(t);
  const Result r = s.run(prompt, 6, "b");
  EXPECT_EQ(r.usage.cached_tokens, 32);
  expect_like_cold(r, prompt, 6);
}

// A next turn that renders the first turn's generation prompt (its last 3 tokens) and reply
// into other tokens (templates drop an open <think>, re-tokenize), and the same prompt again
// (an agent returning with its last request, here after a restart): the prefix they share with
// the first turn ends inside its prompt, past the prompt's snapshot point (the last block
// boundary 16 tokens before its end: 24 of 45) but short of the end snapshot (56), and with
// no interval snapshot below 1024 they would start over.
TEST_P(HybridMemory, TurnSharingThePromptButItsEndResumesAtThePromptSnapshot) {
  constexpr std::int32_t kPromptSnapshot = 24;
  {
    ScratchDir dir;
    Ids rerendered = first_turn();
    rerendered.resize(42);
    for (std::int32_t t : random_ids(16, 14)) rerendered.push_back(t);
    Served s(model(), dir.path);
    s.run(first_turn(), 12, "a");
    const Result r = s.run(rerendered, 6, "a");
    EXPECT_EQ(r.usage.cached_tokens, kPromptSnapshot);
    expect_like_cold(r, rerendered, 6);
  }
  ScratchDir dir;
  {
    Served s(model(), dir.path);
    s.run(first_turn(), 12, "a");
    s.stop_gracefully();
  }
  Served s(model(), dir.path);
  const Result again = s.run(first_turn(), 6, "a");
  EXPECT_EQ(again.usage.cached_tokens, kPromptSnapshot) << "from its state block on disk";
  expect_like_cold(again, first_turn(), 6);
}

// After a restart the state block is read by the restorer with the KV, not by the engine
// thread: while its read is held, another request runs to its end; the held one then resumes at
// its snapshot.
TEST_P(HybridMemory, StateBlockLoadsInTheBackgroundWhileOthersRun) {
  ScratchDir dir;
  Result r1;
  {
    Served s(model(), dir.path);
    r1 = s.run(first_turn(), 12, "a");
    s.stop_gracefully();
  }
  std::mutex mu;
  std::condition_variable cv;
  bool held = false, other_done = false, done_when_released = false;
  Options opt;
  opt.before_load = [&](bool state) {
    if (!state) return;
    std::unique_lock lock(mu);
    held = true;
    cv.notify_all();
    // Until the other request ended (a read on the engine thread waits here in vain).
    cv.wait_for(lock, std::chrono::seconds(5), [&] { return other_done; });
    done_when_released = other_done;
  };
  Served s(model(), dir.path, opt);
  const Ids prompt = second_turn(r1);
  GenerateRequest r;
  r.n_logprobs = 5;
  r.prompt = prompt;
  r.max_tokens = 6;
  r.agent = "a";
  const RequestId id = s.engine->submit(std::move(r), s.out.callback());
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return held; }));
  }
  const Result other = s.run(random_ids(15, 20), 4, "b");
  {
    std::lock_guard lock(mu);
    other_done = true;
  }
  cv.notify_all();
  const Result r2 = s.out.wait(id);
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(done_when_released) << "the state block's read held the engine thread";
  }
  EXPECT_EQ(other.tokens.size(), 4u);
  EXPECT_EQ(r2.usage.cached_tokens, kResumeAt);
  expect_like_cold(r2, prompt, 6);
}

std::vector<fs::path> state_files(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir + "/blocks")) {
    std::ifstream in(e.path(), std::ios::binary);
    std::array<char, kBlockHeaderBytes> head{};
    if (!in.read(head.data(), head.size())) continue;
    std::uint32_t version = 0;
    std::memcpy(&version, head.data() + 8, 4);
    if (version == kStateFormatVersion) out.push_back(e.path());
  }
  return out;
}

TEST_P(HybridMemory, DamagedSnapshotIsRefusedAndRecomputed) {
  ScratchDir dir;
  Result r1;
  {
    Served s(model(), dir.path);
    r1 = s.run(first_turn(), 12, "a");
    s.stop_gracefully();
  }
  const std::vector<fs::path> files = state_files(dir.path);
  ASSERT_EQ(files.size(), 2u) << "at the prompt's snapshot point and at the end";
  for (const fs::path& file : files) {
    std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(kBlockHeaderBytes + 40);
    const char c = static_cast<char>(f.get());
    f.seekp(kBlockHeaderBytes + 40);
    f.put(static_cast<char>(c ^ 0x10));  // one bit of one float
  }
  Served s(model(), dir.path);
  const Ids prompt = second_turn(r1);
  const Result r2 = s.run(prompt, 6, "a");
  EXPECT_EQ(r2.usage.cached_tokens, 0) << "KV without its snapshot claims nothing";
  EXPECT_GE(s.store->stats().rejected_corrupt, 1);
  expect_like_cold(r2, prompt, 6);
}

// --kv-state-codec bf16: the snapshot is written in half the bytes (its header names the codec);
// after a restart under either flag the agent resumes from it, with the cold run's greedy
// tokens and top logprobs close to it (bf16 state rounding; hybrid_state_codec_test.cpp
// measures the logits).
TEST_P(HybridMemory, Bf16SnapshotResumesAfterARestartUnderEitherCodec) {
  constexpr double kBf16LogprobTolerance = 1e-2;  // measured <= 2.7e-3
  std::uintmax_t exact_bytes = 0;
  {
    ScratchDir exact_dir;
    Served s(model(), exact_dir.path);
    s.run(first_turn(), 12, "a");
    s.stop_gracefully();
    const std::vector<fs::path> files = state_files(exact_dir.path);
    ASSERT_EQ(files.size(), 2u);  // at the prompt's snapshot point and at the end
    exact_bytes = fs::file_size(files[0]) - kBlockHeaderBytes;
  }
  for (StateCodec restart_codec : {StateCodec::Exact, StateCodec::Bf16}) {
    ScratchDir dir;
    Result r1;
    {
      Served s(model(), dir.path, {.state_codec = StateCodec::Bf16});
      r1 = s.run(first_turn(), 12, "a");
      s.stop_gracefully();
    }
    const std::vector<fs::path> files = state_files(dir.path);
    ASSERT_EQ(files.size(), 2u);
    for (const fs::path& file : files)
      EXPECT_EQ((fs::file_size(file) - kBlockHeaderBytes) * 2, exact_bytes) << "bf16: half the bytes";
    Served s(model(), dir.path, {.state_codec = restart_codec});
    const Ids prompt = second_turn(r1);
    const Result r2 = s.run(prompt, 6, "a");
    EXPECT_EQ(r2.usage.cached_tokens, kResumeAt) << state_codec_name(restart_codec);
    EXPECT_EQ(s.store->stats().rejected_corrupt, 0);
    EXPECT_EQ(r2.tokens, greedy_alone(model(), prompt, 6));
    const Result c = cold(prompt, 6);
    ASSERT_EQ(r2.top.size(), c.top.size());
    double worst = 0;
    for (std::size_t i = 0; i < r2.top.size(); ++i)
      for (std::size_t j = 0; j < std::min(r2.top[i].size(), c.top[i].size()); ++j) {
        EXPECT_EQ(r2.top[i][j].id, c.top[i][j].id);
        worst = std::max(worst, std::abs(static_cast<double>(r2.top[i][j].logprob) - c.top[i][j].logprob));
      }
    EXPECT_LT(worst, kBf16LogprobTolerance);
    std::printf("[state codec] %s: bf16 snapshot, restart under %s: max |dlogprob| (top 5, 6 tokens) %.3g\n",
                GetParam().c_str(), std::string(state_codec_name(restart_codec)).c_str(), worst);
  }
}

TEST_P(HybridMemory, TenantNeverGetsAnotherTenantsSnapshot) {
  ScratchDir dir;
  Result r1;
  {
    Served s(model(), dir.path);
    r1 = s.run(first_turn(), 12, "a", "tenant-1");
    s.stop_gracefully();
  }
  Served s(model(), dir.path);
  const Ids prompt = second_turn(r1);
  const Result other = s.run(prompt, 6, "a", "tenant-2");
  EXPECT_EQ(other.usage.cached_tokens, 0);
  expect_like_cold(other, prompt, 6);
  const Result own = s.run(prompt, 6, "a", "tenant-1");
  EXPECT_EQ(own.usage.cached_tokens, kResumeAt);
  EXPECT_EQ(own.tokens, other.tokens);
}

INSTANTIATE_TEST_SUITE_P(Models, HybridMemory,
                         ::testing::Values("qwen3_5-text", "qwen3-next", "qwen3_5-moe-text"),
                         test::fixture_test_name);

}  // namespace
}  // namespace akv
