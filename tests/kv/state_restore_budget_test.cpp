// A restore job's state block counts in the restore budget (--kv-restore-bytes) with its KV
// blocks: a job whose blocks and state together do not fit beside the others waits, a job alone
// past the budget keeps its state and loads the leading blocks that fit beside it, and the bytes
// go back when the job is destroyed (finished or cancelled). restorer_test.cpp covers the rest.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "kv/disk_store.h"
#include "kv/restorer.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using test::block_content;
using test::ScratchDir;

const BlockShape kShape{.n_rows = 2, .row_width = 1024, .dtype = DType::F32};  // 8 KiB
constexpr std::int64_t kStateFloats = 4096;                                     // 16 KiB: two blocks
const std::size_t kBlock = kShape.raw_bytes();
constexpr std::size_t kState = kStateFloats * sizeof(float);

std::vector<float> state_of(std::int32_t seed) {
  std::vector<float> v(kStateFloats);
  for (std::int64_t i = 0; i < kStateFloats; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(seed * 10000 + i);
  return v;
}

// A chain of n one-token blocks on disk, with a state block at the end of each.
struct StoredChain {
  StoredChain(DiskStore& disk, std::int32_t n, std::int32_t seed) {
    const BlockKeyer& keys = disk.keyer();
    Hash128 parent = keys.root("t");
    for (std::int32_t i = 0; i < n; ++i) {
      tokens.push_back(seed + i);
      const std::vector<std::int32_t> t{seed + i};
      const Hash128 key = keys.next(parent, t);
      EXPECT_TRUE(disk.put(key, parent, keys.tokens_hash(t), block_content(kShape, static_cast<std::uint64_t>(seed + i))));
      blocks.push_back({.key = key, .parent = parent, .tokens_hash = keys.tokens_hash(t), .depth = i});
      const std::vector<float> s = state_of(seed + i + 1);
      std::vector<std::byte> bytes(kState);
      std::memcpy(bytes.data(), s.data(), kState);
      EXPECT_TRUE(disk.put_state(keys.state_key(key), key, keys.tokens_hash(std::span(tokens)), std::move(bytes)));
      states.push_back({.key = keys.state_key(key), .parent = key, .pos = i + 1});
      parent = key;
    }
    disk.flush();
  }
  std::shared_ptr<RestoreJob> job() const {
    auto j = std::make_shared<RestoreJob>(blocks, kBlock);
    j->want_state(states, tokens, static_cast<std::int32_t>(blocks.size()), /*block_size=*/1, kStateFloats);
    return j;
  }
  std::vector<std::int32_t> tokens;
  std::vector<RestoreJob::Block> blocks;
  std::vector<RestoreJob::StateCandidate> states;
};

struct Fixture {
  explicit Fixture(std::size_t max_bytes)
      : disk(open(dir.path, n_loads)),
        restorer(disk.get(), [this] {
          std::lock_guard lock(mu);
          ++n_done;
          cv.notify_all();
        }, max_bytes, /*n_threads=*/3) {}
  static std::unique_ptr<DiskStore> open(const std::string& dir, std::atomic<int>& n_loads) {
    DiskStoreOptions o;
    o.dir = dir;
    o.fingerprint = {5, 6};
    o.shape = kShape;
    o.block_size = 1;
    o.before_load = [&n_loads](bool) { n_loads.fetch_add(1); };
    return DiskStore::open_or_throw(o);
  }
  bool wait_done(const RestoreJob& job) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return job.done(); });
  }
  ScratchDir dir;
  std::atomic<int> n_loads{0};
  std::unique_ptr<DiskStore> disk;
  std::mutex mu;
  std::condition_variable cv;
  int n_done = 0;
  Restorer restorer;
};

// Budget 6 blocks; each job 3 blocks + a 2-block state: their KV (6 blocks) fits together,
// KV + state (10) does not, so the second waits until the first is destroyed.
TEST(StateRestoreBudget, JobsWhoseKvFitsButNotWithTheirStatesRunOneAfterTheOther) {
  Fixture f(6 * kBlock);
  const StoredChain a(*f.disk, 3, 100), b(*f.disk, 3, 200);
  const std::size_t job_bytes = 3 * kBlock + kState;

  auto job_a = a.job();
  f.restorer.submit(job_a);
  ASSERT_TRUE(f.wait_done(*job_a));
  ASSERT_EQ(job_a->n_loaded(), 3);
  ASSERT_EQ(job_a->state_pos(), 3);
  EXPECT_EQ(job_a->take_state(), state_of(103));
  EXPECT_EQ(f.restorer.used_bytes(), job_bytes) << "the state is counted with the blocks";

  const int loads_before = f.n_loads.load();
  auto job_b = b.job();
  f.restorer.submit(job_b);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(job_b->done()) << "KV + state does not fit beside the first job";
  EXPECT_EQ(f.n_loads.load(), loads_before) << "not one of its blocks loaded meanwhile";
  EXPECT_EQ(f.restorer.used_bytes(), job_bytes);

  job_a.reset();  // the match is over: its memory goes back, the second job starts
  ASSERT_TRUE(f.wait_done(*job_b));
  EXPECT_EQ(job_b->n_loaded(), 3);
  ASSERT_EQ(job_b->state_pos(), 3);
  EXPECT_EQ(job_b->take_state(), state_of(203));
  EXPECT_EQ(f.restorer.used_bytes(), job_bytes);
  EXPECT_LE(f.restorer.used_bytes() + f.restorer.kept_bytes(), 6 * kBlock);
  job_b.reset();
  EXPECT_EQ(f.restorer.used_bytes(), 0u) << "the accounting returns to zero";
  EXPECT_LE(f.restorer.kept_bytes(), 6 * kBlock);
}

// A waiting job that is cancelled and dropped holds nothing and holds nobody up; a state-only job
// (its KV in memory already) counts its state and waits like the others.
TEST(StateRestoreBudget, ACancelledWaitingJobAndAStateOnlyJobKeepTheAccounting) {
  Fixture f(6 * kBlock);
  const StoredChain a(*f.disk, 3, 300), b(*f.disk, 3, 400);
  auto job_a = a.job();
  f.restorer.submit(job_a);
  ASSERT_TRUE(f.wait_done(*job_a));

  auto waiting = b.job();
  f.restorer.submit(waiting);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(waiting->done());
  waiting->cancel();
  waiting.reset();

  auto state_only = std::make_shared<RestoreJob>(std::vector<RestoreJob::Block>{}, kBlock);
  state_only->want_state(b.states, b.tokens, 3, 1, kStateFloats);
  // 3 blocks + state held, 2 blocks' state wanted: 7 > 6, so it waits too.
  f.restorer.submit(state_only);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(state_only->done()) << "its state does not fit beside the first job";
  job_a.reset();
  ASSERT_TRUE(f.wait_done(*state_only));
  ASSERT_EQ(state_only->state_pos(), 3);
  EXPECT_EQ(f.restorer.used_bytes(), kState);
  state_only.reset();
  EXPECT_EQ(f.restorer.used_bytes(), 0u);
}

// Alone past the budget: the state and the leading blocks that fit beside it; the state loaded
// is then the deepest those blocks cover.
TEST(StateRestoreBudget, AJobAlonePastTheBudgetKeepsItsStateAndTheBlocksThatFitBesideIt) {
  Fixture f(6 * kBlock);
  const StoredChain c(*f.disk, 6, 500);
  auto job = c.job();
  f.restorer.submit(job);
  ASSERT_TRUE(f.wait_done(*job));
  EXPECT_EQ(job->n_loaded(), 4) << "6 blocks' budget less a 2-block state";
  ASSERT_EQ(job->state_pos(), 4);
  EXPECT_EQ(job->take_state(), state_of(504));
  EXPECT_EQ(f.restorer.used_bytes(), 6 * kBlock);
  job.reset();
  EXPECT_EQ(f.restorer.used_bytes(), 0u);
}

}  // namespace
}  // namespace akv
