// The disk tier's write-behind: blocks queued together are written as one durable batch; a full
// queue drops (counted by reason, queue depth visible); put_or_wait waits for room until its
// deadline; a graceful stop's queue is written ahead of the backlog (blocks moved there in the
// order given, its manifests right behind them, its own blocks waiting only for room beside the
// backlog, until their deadline); a drain past its deadline drops the blocks still queued but
// writes the manifests; a failed manifest write is retried, and given up (counted) only after
// its bound.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kv/disk_store.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using test::block_content;
using test::Gate;
using test::ScratchDir;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const BlockShape kShape{.n_rows = 2 * 2 * 4, .row_width = 16, .dtype = DType::F32};

DiskStoreOptions options(const std::string& dir) {
  DiskStoreOptions o;
  o.dir = dir;
  o.fingerprint = {1, 2};
  o.shape = kShape;
  o.block_size = 4;
  return o;
}


bool put_block(DiskStore& s, std::uint64_t i) {
  return s.put({i, i}, {}, {}, block_content(kShape, i));
}

// `o` with the IO thread held at `gate` before each batch it writes.
DiskStoreOptions gated(DiskStoreOptions o, Gate& gate) {
  o.before_write = [&gate] { gate.wait(); };
  return o;
}

// Puts block 1 and returns once the IO thread holds its batch at the gate (false: the put failed).
bool hold_first_write(DiskStore& store, Gate& gate) {
  if (!put_block(store, 1)) return false;
  gate.wait_entered();
  return true;
}

TEST(DiskWrite, BlocksQueuedTogetherAreWrittenAsOneBatchAndLoadExactly) {
  ScratchDir dir;
  Gate gate;
  auto store = DiskStore::open_or_throw(gated(options(dir.path), gate));
  ASSERT_TRUE(hold_first_write(*store, gate));  // block 1 is the first batch; the next 40 wait behind it
  for (std::uint64_t i = 2; i <= 41; ++i) ASSERT_TRUE(put_block(*store, i));
  EXPECT_EQ(store->stats().queued_blocks, 41);
  gate.release();
  store->flush();
  const DiskStoreStats s = store->stats();
  EXPECT_EQ(s.n_written, 41);
  EXPECT_EQ(s.n_batches, 2) << "one directory fsync for the 40 blocks queued together";
  EXPECT_EQ(s.queued_blocks, 0);
  store.reset();
  auto again = DiskStore::open_or_throw(options(dir.path));
  std::vector<std::byte> raw(kShape.raw_bytes());
  for (std::uint64_t i = 1; i <= 41; ++i) {
    ASSERT_TRUE(again->load({i, i}, {}, {}, raw)) << i;
    EXPECT_EQ(raw, block_content(kShape, i)) << i;
  }
}

TEST(DiskWrite, AFullQueueDropsCountsAndShowsItsDepth) {
  ScratchDir dir;
  Gate gate;
  auto o = gated(options(dir.path), gate);
  o.max_queue_bytes = 2 * kShape.raw_bytes();
  auto store = DiskStore::open_or_throw(o);
  EXPECT_EQ(store->n_queue_room(), 2u);
  EXPECT_TRUE(put_block(*store, 1));
  gate.wait_entered();
  EXPECT_TRUE(put_block(*store, 2));
  EXPECT_EQ(store->n_queue_room(), 0u);
  for (std::uint64_t i = 3; i <= 5; ++i) EXPECT_FALSE(put_block(*store, i)) << "dropped";
  DiskStoreStats s = store->stats();
  EXPECT_EQ(s.n_dropped, 3);
  EXPECT_EQ(s.n_dropped_queue_full, 3);
  EXPECT_EQ(s.queued_blocks, 2);
  EXPECT_EQ(s.queued_bytes, static_cast<std::int64_t>(2 * kShape.raw_bytes()));
  gate.release();
  store->flush();
  s = store->stats();
  EXPECT_EQ(s.n_written, 2);
  EXPECT_EQ(s.queued_blocks, 0);
  EXPECT_TRUE(store->on_disk({2, 2}));
  EXPECT_FALSE(store->has({3, 3}));
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(DiskWrite, DropsAreReportedByTheIoThreadAtMostOncePerInterval) {
  ScratchDir dir;
  Gate gate;
  auto o = gated(options(dir.path), gate);
  o.max_queue_bytes = kShape.raw_bytes();
  o.drop_log_interval_ms = 300;
  auto store = DiskStore::open_or_throw(o);
  const std::string report = "blocks not written since the last report";
  testing::internal::CaptureStderr();
  ASSERT_TRUE(hold_first_write(*store, gate));
  EXPECT_FALSE(put_block(*store, 2));
  EXPECT_FALSE(put_block(*store, 3));
  gate.release();
  store->flush();  // the IO thread reports after the batch
  gate.close();
  ASSERT_TRUE(put_block(*store, 4));
  gate.wait_entered();
  EXPECT_FALSE(put_block(*store, 5));
  gate.release();
  store->flush();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err, report), 1) << err;
  EXPECT_EQ(count(err, "2 blocks not written"), 1) << err;
  testing::internal::CaptureStderr();
  std::this_thread::sleep_for(600ms);  // the interval passes: the waiting drop is reported
  err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err, "1 blocks not written"), 1) << err;
}

TEST(DiskWrite, PutOrWaitWaitsForRoomUntilItsDeadline) {
  ScratchDir dir;
  Gate gate;
  auto o = gated(options(dir.path), gate);
  o.max_queue_bytes = kShape.raw_bytes();
  auto store = DiskStore::open_or_throw(o);
  ASSERT_TRUE(hold_first_write(*store, gate));
  const auto t0 = Clock::now();
  EXPECT_FALSE(store->put_or_wait({2, 2}, {}, {}, block_content(kShape, 2), t0 + 50ms));
  EXPECT_GE(Clock::now() - t0, 50ms);
  EXPECT_EQ(store->stats().n_dropped_queue_full, 1);
  std::thread opener([&gate] {
    std::this_thread::sleep_for(30ms);
    gate.release();
  });
  EXPECT_TRUE(store->put_or_wait({3, 3}, {}, {}, block_content(kShape, 3), Clock::now() + 10s));
  opener.join();
  store->flush();
  EXPECT_TRUE(store->on_disk({3, 3}));
}

// The IO thread's writes in order: block keys' `lo`, and kManifest for each manifest write.
constexpr std::uint64_t kManifest = 1000;
struct WriteLog {
  void watch(DiskStoreOptions& o) {
    o.on_block_written = [this](const Hash128& key) { add(key.lo); };
    o.manifest_write_fault = [this] {
      add(kManifest);
      return 0;
    };
  }
  void add(std::uint64_t what) {
    std::lock_guard lock(mu);
    order.push_back(what);
  }
  std::vector<std::uint64_t> take() {
    std::lock_guard lock(mu);
    return order;
  }
  std::mutex mu;
  std::vector<std::uint64_t> order;
};

// Also in int8, whose blocks the encode workers encode ahead of the IO thread: the IO thread
// still writes them in the queue's order.
TEST(DiskWrite, AStopMovesAnAgentsQueuedBlocksAheadOfTheBacklogWithItsManifestBehindThem) {
  for (const SpillCodec codec : {SpillCodec::Native, SpillCodec::Int8}) {
    SCOPED_TRACE(spill_codec_name(codec));
    ScratchDir dir;
    Gate gate;
    WriteLog log;
    auto o = gated(options(dir.path), gate);
    o.codec = codec;
    o.encode_threads = 2;
    log.watch(o);
    auto store = DiskStore::open_or_throw(o);
    ASSERT_TRUE(hold_first_write(*store, gate));  // block 1 is being written; the backlog waits behind it
    ASSERT_TRUE(put_block(*store, 2));
    ASSERT_TRUE(put_block(*store, 3));
    AgentRecord older;
    older.agent = "older";
    older.chain = {{2, 2}, {3, 3}};
    store->put_manifest(older);
    for (std::uint64_t i = 4; i <= 6; ++i) ASSERT_TRUE(put_block(*store, i));
    AgentRecord recent;
    recent.agent = "recent";
    recent.chain = {{5, 5}, {4, 4}};
    const std::vector<Hash128> keys = {{5, 5}, {4, 4}, {9, 9}, {1, 1}};
    EXPECT_EQ(store->write_first(keys), 2) << "9 was never queued, 1 is being written";
    store->put_manifest_first(recent);
    EXPECT_EQ(store->write_first(keys), 0) << "moved already";
    EXPECT_EQ(store->stats().queued_blocks, 6);
    gate.release();
    store->flush();
    EXPECT_EQ(log.take(), (std::vector<std::uint64_t>{1, 5, 4, kManifest, 2, 3, kManifest, 6}));
    const DiskStoreStats s = store->stats();
    EXPECT_EQ(s.n_written, 6);
    EXPECT_EQ(s.n_encoded, codec == SpillCodec::Native ? 0 : 6);
    // Encoded blocks are batched as they are ready; native ones as queued.
    if (codec == SpillCodec::Native) {
      EXPECT_EQ(s.n_batches, 4) << "the moved blocks are one batch, the backlog's two runs two more";
    }
  }
}

TEST(DiskWrite, AStopsOwnBlocksGoAheadOfAFullBacklogAndWaitOnlyForTheirOwnRoom) {
  ScratchDir dir;
  Gate gate;
  WriteLog log;
  auto o = gated(options(dir.path), gate);
  o.max_queue_bytes = 2 * kShape.raw_bytes();
  log.watch(o);
  auto store = DiskStore::open_or_throw(o);
  ASSERT_TRUE(hold_first_write(*store, gate));
  ASSERT_TRUE(put_block(*store, 2));
  EXPECT_FALSE(put_block(*store, 3)) << "the backlog is full";
  const auto t0 = Clock::now();
  EXPECT_TRUE(store->put_first_or_wait({10, 10}, {}, {}, block_content(kShape, 10), t0 + 10s));
  EXPECT_TRUE(store->put_first_or_wait({11, 11}, {}, {}, block_content(kShape, 11), t0 + 10s));
  EXPECT_LT(Clock::now() - t0, 5s) << "no wait beside a full backlog";
  EXPECT_FALSE(store->put_first_or_wait({2, 2}, {}, {}, block_content(kShape, 2), t0 + 10s))
      << "queued already";
  const auto t1 = Clock::now();
  EXPECT_FALSE(store->put_first_or_wait({12, 12}, {}, {}, block_content(kShape, 12), t1 + 50ms));
  EXPECT_GE(Clock::now() - t1, 50ms)
      << "twice the backlog's bound is queued: it waited, then dropped";
  EXPECT_EQ(store->stats().n_dropped_queue_full, 2);
  EXPECT_EQ(store->stats().queued_blocks, 4);
  std::thread opener([&gate] {
    std::this_thread::sleep_for(30ms);
    gate.release();
  });
  EXPECT_TRUE(
      store->put_first_or_wait({13, 13}, {}, {}, block_content(kShape, 13), Clock::now() + 10s))
      << "room once the stop's own blocks are written";
  opener.join();
  store->flush();
  const std::vector<std::uint64_t> order = log.take();
  ASSERT_EQ(order.size(), 5u);
  EXPECT_EQ(std::vector<std::uint64_t>(order.begin(), order.begin() + 3),
            (std::vector<std::uint64_t>{1, 10, 11}));
  EXPECT_TRUE(store->on_disk({13, 13}));
  EXPECT_TRUE(store->on_disk({2, 2}));
  std::vector<std::byte> raw(kShape.raw_bytes());
  ASSERT_TRUE(store->load({10, 10}, {}, {}, raw));
  EXPECT_EQ(raw, block_content(kShape, 10));
}

TEST(DiskWrite, DroppingLentBlocksReleasesThoseAStopMovedAhead) {
  ScratchDir dir;
  Gate gate;
  auto store = DiskStore::open_or_throw(gated(options(dir.path), gate));
  ASSERT_TRUE(hold_first_write(*store, gate));
  const std::vector<std::byte> bytes = block_content(kShape, 2);
  std::atomic<int> n_released = 0;
  for (std::uint64_t i = 2; i <= 3; ++i)
    ASSERT_TRUE(store->put_lent(
        {i, i}, {}, {}, LentBlock{.bytes = bytes, .release = [&n_released] { ++n_released; }}));
  const std::vector<Hash128> moved = {{3, 3}};
  ASSERT_EQ(store->write_first(moved), 1);
  std::thread opener([&gate] {
    std::this_thread::sleep_for(30ms);
    gate.release();
  });
  store->drop_lent();  // waits for the batch in flight
  opener.join();
  EXPECT_EQ(n_released.load(), 2);
  EXPECT_EQ(store->stats().n_dropped_at_stop, 2);
  EXPECT_EQ(store->stats().queued_blocks, 0);
  store->flush();
  EXPECT_FALSE(store->on_disk({3, 3}));
}

TEST(DiskWrite, ADrainPastItsDeadlineDropsQueuedBlocksButWritesTheManifests) {
  ScratchDir dir;
  Gate gate;
  auto store = DiskStore::open_or_throw(gated(options(dir.path), gate));
  ASSERT_TRUE(hold_first_write(*store, gate));
  ASSERT_TRUE(put_block(*store, 2));
  ASSERT_TRUE(put_block(*store, 3));
  AgentRecord rec;
  rec.agent = "a";
  rec.chain = {{1, 1}, {2, 2}, {3, 3}};
  store->put_manifest(rec);
  std::thread opener([&gate] {
    std::this_thread::sleep_for(200ms);
    gate.release();
  });
  const DiskDrain d = store->drain(Clock::now() + 50ms);
  opener.join();
  EXPECT_FALSE(d.in_time);
  EXPECT_EQ(d.n_written, 1) << "the batch being written when time ran out finishes";
  EXPECT_EQ(d.n_dropped, 2);
  EXPECT_EQ(store->stats().n_dropped_at_stop, 2);
  EXPECT_EQ(store->stats().queued_blocks, 0);
  store.reset();
  auto again = DiskStore::open_or_throw(options(dir.path));
  const std::vector<AgentRecord> agents = again->take_loaded_manifests();
  ASSERT_EQ(agents.size(), 1u);
  EXPECT_EQ(agents[0].chain, rec.chain);
  EXPECT_TRUE(again->on_disk({1, 1}));
  EXPECT_FALSE(again->on_disk({2, 2}));
}

TEST(DiskWrite, ADrainInTimeWritesEverything) {
  ScratchDir dir;
  auto store = DiskStore::open_or_throw(options(dir.path));
  for (std::uint64_t i = 1; i <= 20; ++i) ASSERT_TRUE(put_block(*store, i));
  const DiskDrain d = store->drain(Clock::now() + 60s);
  EXPECT_TRUE(d.in_time);
  EXPECT_EQ(d.n_written, 20);
  EXPECT_EQ(d.n_dropped, 0);
}

TEST(DiskWrite, AFailedManifestWriteIsRetriedNotLost) {
  ScratchDir dir;
  std::atomic<int> n_calls = 0;
  auto o = options(dir.path);
  o.manifest_retry_ms = 10;
  o.manifest_write_fault = [&n_calls] { return n_calls++ < 2 ? ENOSPC : 0; };  // two failures
  AgentRecord rec;
  rec.agent = "a";
  rec.chain = {{1, 1}};
  {
    auto store = DiskStore::open_or_throw(o);
    store->put_manifest(rec);
    store->flush();  // waits for the retries too
    const DiskStoreStats s = store->stats();
    EXPECT_EQ(n_calls.load(), 3);
    EXPECT_EQ(s.n_manifest_retries, 2);
    EXPECT_EQ(s.n_manifests_lost, 0);
    EXPECT_EQ(s.n_write_errors, 2);
  }
  auto again = DiskStore::open_or_throw(options(dir.path));
  EXPECT_EQ(again->take_loaded_manifests().size(), 1u);
}

TEST(DiskWrite, AManifestThatKeepsFailingIsGivenUpAfterItsBound) {
  ScratchDir dir;
  std::atomic<int> n_calls = 0;
  auto o = options(dir.path);
  o.manifest_retry_ms = 5;
  o.max_manifest_attempts = 3;
  o.manifest_write_fault = [&n_calls] {
    ++n_calls;
    return EIO;
  };
  auto store = DiskStore::open_or_throw(o);
  AgentRecord rec;
  rec.agent = "a";
  store->put_manifest(rec);
  store->flush();
  EXPECT_EQ(n_calls.load(), 3);
  EXPECT_EQ(store->stats().n_manifests_lost, 1);
}

}  // namespace
}  // namespace akv
