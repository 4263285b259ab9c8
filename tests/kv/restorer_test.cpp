// The restorer's own contracts, without a KV manager: a job's blocks land verified in buffers
// the restorer keeps for the next jobs (within the restore budget, no fresh pages), from local
// files and from the remote tier (read straight into the job's buffers; a damaged value ends
// the job there); a hybrid model's state block, loaded after the blocks as the deepest the
// loaded KV covers. kv_tiers_test.cpp covers restores through KvManager.
#include "kv/restorer.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>

#include "kv/disk_store.h"
#include "kv/remote_store.h"
#include "redis_test_server.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using test::block_content;
using test::ScratchDir;

// 128 KiB blocks: 32 pages each, so fresh memory shows in the page-fault count.
const BlockShape kShape{.n_rows = 2, .row_width = 16384, .dtype = DType::F32};

DiskStoreOptions disk_options(const std::string& dir, RemoteStore* remote = nullptr) {
  DiskStoreOptions o;
  o.dir = dir;
  o.fingerprint = {3, 4};
  o.shape = kShape;
  o.block_size = 1;
  o.remote = remote;
  return o;
}

// A chain of n blocks written to `disk` (block i's content: block_content(kShape, seed + i)).
std::vector<RestoreJob::Block> write_chain(DiskStore& disk, std::int32_t n, std::int32_t seed) {
  const BlockKeyer& keys = disk.keyer();
  std::vector<RestoreJob::Block> chain;
  Hash128 parent = keys.root("t");
  for (std::int32_t i = 0; i < n; ++i) {
    const std::vector<std::int32_t> tokens{seed + i};
    const Hash128 key = keys.next(parent, tokens);
    EXPECT_TRUE(disk.put(key, parent, keys.tokens_hash(tokens), block_content(kShape, static_cast<std::uint64_t>(seed + i))));
    chain.push_back({.key = key, .parent = parent, .tokens_hash = keys.tokens_hash(tokens), .depth = i});
    parent = key;
  }
  disk.flush();
  return chain;
}

// Submits a job of `blocks` and waits until it is done.
class Runner {
 public:
  Runner(DiskStore* disk, std::size_t max_bytes)
      : restorer(disk, [this] {
          std::lock_guard lock(mu_);
          ++n_done_;
          cv_.notify_all();
        }, max_bytes, /*n_threads=*/3) {}
  std::shared_ptr<RestoreJob> run(std::vector<RestoreJob::Block> blocks) {
    return run(std::make_shared<RestoreJob>(std::move(blocks), kShape.raw_bytes()));
  }
  std::shared_ptr<RestoreJob> run(std::shared_ptr<RestoreJob> job) {
    std::unique_lock lock(mu_);
    const int before = n_done_;
    lock.unlock();
    restorer.submit(job);
    lock.lock();
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(10), [&] { return n_done_ > before; }));
    return job;
  }
  Restorer restorer;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_done_ = 0;
};

std::set<const std::byte*> buffers_of(const RestoreJob& job) {
  std::set<const std::byte*> out;
  for (std::int32_t i = 0; i < job.n_loaded(); ++i) out.insert(job.raw(i).data());
  return out;
}

bool holds_chain(const RestoreJob& job, std::int32_t seed) {
  for (std::int32_t i = 0; i < job.n_loaded(); ++i) {
    const std::vector<std::byte> want = block_content(kShape, static_cast<std::uint64_t>(seed + i));
    if (!std::ranges::equal(job.raw(i), want)) return false;
  }
  return true;
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

TEST(Restorer, ADestroyedJobsBuffersServeTheNextJobsWithinTheBudget) {
  ScratchDir dir;
  auto disk = DiskStore::open_or_throw(disk_options(dir.path));
  const auto a = write_chain(*disk, 6, 100), b = write_chain(*disk, 6, 200);
  const std::size_t block = kShape.raw_bytes();
  Runner r(disk.get(), 6 * block);

  auto job1 = r.run({a.begin(), a.begin() + 4});
  ASSERT_EQ(job1->n_loaded(), 4);
  EXPECT_TRUE(holds_chain(*job1, 100));
  const std::set<const std::byte*> first = buffers_of(*job1);
  EXPECT_EQ(r.restorer.used_bytes(), 4 * block);
  EXPECT_EQ(r.restorer.kept_bytes(), 0u);
  job1.reset();
  EXPECT_EQ(r.restorer.used_bytes(), 0u);
  EXPECT_EQ(r.restorer.kept_bytes(), 4 * block) << "kept for the next job";

  auto job2 = r.run({b.begin(), b.begin() + 4});
  ASSERT_EQ(job2->n_loaded(), 4);
  EXPECT_TRUE(holds_chain(*job2, 200));
  EXPECT_EQ(buffers_of(*job2), first) << "the same buffers, no new memory";
  EXPECT_EQ(r.restorer.kept_bytes(), 0u);
  auto job3 = r.run({a.begin(), a.begin() + 2});  // beside job2: new buffers, within the budget
  ASSERT_EQ(job3->n_loaded(), 2);
  EXPECT_EQ(r.restorer.used_bytes(), 6 * block);
  job2.reset();
  job3.reset();
  EXPECT_EQ(r.restorer.kept_bytes(), 6 * block) << "at most the budget is kept";

  // A job as large as everything kept loads into kept buffers only: no fresh pages (a new
  // 768 KiB allocation would fault in its 192 pages as the blocks are read into it).
  const long faults0 = minor_faults();
  auto job4 = r.run(a);
  const long faults = minor_faults() - faults0;
  ASSERT_EQ(job4->n_loaded(), 6);
  EXPECT_TRUE(holds_chain(*job4, 100));
  EXPECT_LT(faults, 48) << "the job's blocks went to memory already in use";
  EXPECT_EQ(r.restorer.used_bytes() + r.restorer.kept_bytes(), 6 * block);
}

// Blocks another replica wrote reach the job from Redis, verified (read straight into the job's
// buffers); a value damaged in Redis ends the job at that block, counted and never used.
TEST(Restorer, RemoteBlocksLandVerifiedInTheJobAndADamagedOneEndsIt) {
  test::RedisTestServer redis;
  RemoteStoreOptions o;
  o.url = redis.url();
  o.fingerprint = {3, 4};
  o.value_bytes = kBlockHeaderBytes + kShape.raw_bytes();
  o.timeout_ms = 2000;
  auto r1 = RemoteStore::open_or_throw(o);
  auto r2 = RemoteStore::open_or_throw(o);
  ScratchDir d1, d2;
  auto writer = DiskStore::open_or_throw(disk_options(d1.path, r1.get()));
  const auto chain = write_chain(*writer, 5, 300);
  ASSERT_TRUE(r1->flush(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  auto reader = DiskStore::open_or_throw(disk_options(d2.path, r2.get()));
  Runner r(reader.get(), 16 * kShape.raw_bytes());

  auto job = r.run(chain);
  ASSERT_EQ(job->n_loaded(), 5);
  EXPECT_TRUE(holds_chain(*job, 300));
  EXPECT_EQ(reader->stats().n_loaded_remote, 5);
  job.reset();

  // One payload byte of block 3 flipped in Redis.
  std::string error;
  auto conn = RedisConnection::connect_or_null(redis.url(), 1000, error);
  ASSERT_NE(conn, nullptr) << error;
  const std::string name = "akv:" + Hash128{3, 4}.hex() + ":block:" + chain[3].key.hex();
  conn->append({"SETRANGE", name, std::to_string(kBlockHeaderBytes + 1000), "!"});
  ASSERT_EQ(reply_integer(conn->next().get()), static_cast<long long>(o.value_bytes));
  job = r.run(chain);
  EXPECT_EQ(job->n_loaded(), 3) << "the chain ends at the damaged block";
  EXPECT_TRUE(holds_chain(*job, 300));
  EXPECT_EQ(reader->stats().rejected_corrupt, 1);
}

// State blocks at the ends of blocks 1 and 3 (positions 2 and 4) of a 4-block chain: a job
// loads the deepest its loaded blocks cover, and only once they are in; a job may carry a state
// block alone.
TEST(Restorer, AJobsStateBlockIsTheDeepestItsLoadedKvCovers) {
  ScratchDir dir;
  auto disk = DiskStore::open_or_throw(disk_options(dir.path));
  const BlockKeyer& keys = disk->keyer();
  const std::vector<RestoreJob::Block> chain = write_chain(*disk, 4, 500);
  const std::vector<std::int32_t> tokens{500, 501, 502, 503};  // write_chain's, one a block
  constexpr std::int64_t kFloats = 256;
  const auto state_of = [](std::int32_t pos) {
    std::vector<float> v(kFloats);
    for (std::int64_t i = 0; i < kFloats; ++i) v[i] = static_cast<float>(pos * 1000 + i);
    return v;
  };
  for (std::int32_t pos : {2, 4}) {
    const std::vector<float> v = state_of(pos);
    std::vector<std::byte> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    ASSERT_TRUE(disk->put_state(keys.state_key(chain[pos - 1].key), chain[pos - 1].key,
                                keys.tokens_hash(std::span(tokens).first(static_cast<std::size_t>(pos))), std::move(bytes)));
  }
  disk->flush();
  std::vector<RestoreJob::StateCandidate> candidates;
  for (std::int32_t pos = 1; pos <= 4; ++pos)
    candidates.push_back({.key = keys.state_key(chain[pos - 1].key), .parent = chain[pos - 1].key, .pos = pos});
  Runner r(disk.get(), 16 * kShape.raw_bytes());
  const auto job_of = [&](std::vector<RestoreJob::Block> blocks) {
    auto job = std::make_shared<RestoreJob>(std::move(blocks), kShape.raw_bytes());
    job->want_state(candidates, tokens, /*walk_end=*/4, /*block_size=*/1, kFloats);
    return job;
  };

  auto job = r.run(job_of(chain));
  EXPECT_EQ(job->n_loaded(), 4);
  ASSERT_EQ(job->state_pos(), 4);
  EXPECT_EQ(job->take_state(), state_of(4));
  // Block 2 missing: the KV ends at position 2, so does the state.
  std::vector<RestoreJob::Block> broken = chain;
  broken[2].key = Hash128{9, 9};
  job = r.run(job_of(broken));
  EXPECT_EQ(job->n_loaded(), 2);
  ASSERT_EQ(job->state_pos(), 2);
  EXPECT_EQ(job->take_state(), state_of(2));
  // No blocks to load (the KV is in memory): the state block alone.
  job = r.run(job_of({}));
  ASSERT_EQ(job->state_pos(), 4);
  EXPECT_EQ(job->take_state(), state_of(4));
}

}  // namespace
}  // namespace akv
