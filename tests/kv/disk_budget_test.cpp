// The disk tier's retention: the byte budget (leaf-first LRU, unnamed before named, pinned never),
// the collection of old blocks no manifest names, and both across a restart. Time is injected.
#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "kv/disk_format.h"
#include "kv/disk_store.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using test::block_content;
using test::ScratchDir;

const BlockShape kShape{.n_rows = 2 * 2 * 4, .row_width = 16, .dtype = DType::F32};
constexpr std::int64_t kHourMs = 3600 * 1000;

// A store over a scratch directory with a clock the test moves.
struct Fixture {
  ScratchDir dir;
  std::atomic<std::int64_t> now_ms{1'700'000'000'000};

  DiskStoreOptions options(std::int64_t max_files, double low_water = 0.75) {
    DiskStoreOptions o;
    o.dir = dir.path;
    o.fingerprint = {1, 2};
    o.shape = kShape;
    o.block_size = 4;
    o.max_bytes = max_files * file_bytes();
    o.low_water = low_water;
    o.orphan_age_s = 3600;
    o.now_unix_ms = [this] { return now_ms.load(); };
    return o;
  }
  static std::int64_t file_bytes() {
    return static_cast<std::int64_t>(kBlockHeaderBytes + encoded_bytes(SpillCodec::Native, kShape));
  }
  // Writes one block (a second later than the last), waits until it is on disk or dropped.
  void write(DiskStore& store, const Hash128& key, const Hash128& parent = {}) {
    now_ms += 1000;
    store.put(key, parent, {}, block_content(kShape, key.lo));
    store.flush();
  }
  void load(DiskStore& store, const Hash128& key, const Hash128& parent = {}) {
    now_ms += 1000;
    std::vector<std::byte> raw(kShape.raw_bytes());
    ASSERT_TRUE(store.load(key, parent, {}, raw)) << key.hex();
  }
  std::int64_t n_files() const {
    return std::distance(std::filesystem::directory_iterator(dir.path + "/blocks"), {});
  }
};

Hash128 key(std::uint64_t i) {
  return {0xb10c, i};
}

AgentRecord agent(const std::string& id, std::vector<Hash128> chain, bool pinned) {
  AgentRecord r;
  r.agent = id;
  r.chain = std::move(chain);
  r.pinned = pinned;
  return r;
}

TEST(DiskBudget, WritesStayWithinTheBudgetAndTheNewestBlocksStay) {
  Fixture f;
  auto store = DiskStore::open_or_throw(f.options(10, 0.9));
  for (std::uint64_t i = 0; i < 40; ++i) {
    f.write(*store, key(i));
    ASSERT_LE(store->stats().bytes, 10 * Fixture::file_bytes()) << "after write " << i;
  }
  const DiskStoreStats s = store->stats();
  EXPECT_EQ(s.n_written, 40);
  EXPECT_EQ(s.n_evicted, 40 - s.n_blocks);
  EXPECT_EQ(s.bytes, s.n_blocks * Fixture::file_bytes());
  EXPECT_EQ(f.n_files(), s.n_blocks) << "evicted files are deleted";
  EXPECT_TRUE(store->on_disk(key(39)));
  EXPECT_FALSE(store->on_disk(key(0)));
  EXPECT_EQ(s.n_dropped, 0);
}

TEST(DiskBudget, LeastRecentlyUsedGoFirstAndALoadCountsAsUse) {
  Fixture f;
  auto store = DiskStore::open_or_throw(f.options(4));  // over 4 files: down to 3 with the new one
  for (std::uint64_t i = 0; i < 4; ++i) f.write(*store, key(i));
  f.load(*store, key(0));
  f.write(*store, key(4));
  EXPECT_EQ(store->stats().n_evicted, 2);
  EXPECT_TRUE(store->on_disk(key(0))) << "loaded after 1 and 2 were written";
  EXPECT_FALSE(store->on_disk(key(1)));
  EXPECT_FALSE(store->on_disk(key(2)));
  EXPECT_TRUE(store->on_disk(key(3)));
  EXPECT_TRUE(store->on_disk(key(4)));
}

TEST(DiskBudget, BlocksNoManifestNamesGoBeforeNamedOnes) {
  Fixture f;
  auto store = DiskStore::open_or_throw(f.options(4));
  f.write(*store, key(0));
  f.write(*store, key(1));
  store->put_manifest(agent("a", {key(0)}, false));
  store->put_manifest(agent("b", {key(1)}, false));
  f.write(*store, key(2));
  f.write(*store, key(3));
  f.write(*store, key(4));
  EXPECT_EQ(store->stats().n_evicted, 2);
  EXPECT_TRUE(store->on_disk(key(0)));
  EXPECT_TRUE(store->on_disk(key(1)));
  EXPECT_FALSE(store->on_disk(key(2))) << "unnamed, though newer than the named ones";
  EXPECT_FALSE(store->on_disk(key(3)));
}

TEST(DiskBudget, AChainLosesItsTailBeforeItsHead) {
  Fixture f;
  auto store = DiskStore::open_or_throw(f.options(4));
  Hash128 parent = {7, 7};  // a namespace root: never a file
  for (std::uint64_t i = 0; i < 4; ++i) {
    f.write(*store, key(i), parent);
    parent = key(i);
  }
  store->put_manifest(agent("a", {key(0), key(1), key(2), key(3)}, false));
  f.write(*store, key(9));
  EXPECT_EQ(store->stats().n_evicted, 2);
  EXPECT_TRUE(store->on_disk(key(0))) << "the head is the oldest, yet it stays";
  EXPECT_TRUE(store->on_disk(key(1)));
  EXPECT_FALSE(store->on_disk(key(2)));
  EXPECT_FALSE(store->on_disk(key(3)));
  EXPECT_TRUE(store->on_disk(key(9)));
  std::vector<std::byte> raw(kShape.raw_bytes());
  EXPECT_TRUE(store->load(key(1), key(0), {}, raw)) << "the kept prefix still restores";
}

TEST(DiskBudget, PinnedChainsAreNeverDeleted) {
  Fixture f;
  auto store = DiskStore::open_or_throw(f.options(6));
  Hash128 parent = {7, 7};
  for (std::uint64_t i = 0; i < 3; ++i) {
    f.write(*store, key(i), parent);
    parent = key(i);
  }
  store->put_manifest(agent("pinned", {key(0), key(1), key(2)}, true));
  for (std::uint64_t i = 100; i < 120; ++i) f.write(*store, key(i));
  for (std::uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(store->on_disk(key(i))) << i;
  EXPECT_GT(store->stats().n_evicted, 0);
  EXPECT_LE(store->stats().bytes, 6 * Fixture::file_bytes());

  // Unpinned, the chain may go (tail first) once the blocks no manifest names are gone.
  store->put_manifest(agent("pinned", {key(0), key(1), key(2)}, false));
  store.reset();
  store = DiskStore::open_or_throw(f.options(3));
  EXPECT_EQ(store->stats().n_blocks, 2);
  EXPECT_TRUE(store->on_disk(key(0)));
  EXPECT_TRUE(store->on_disk(key(1)));
  EXPECT_FALSE(store->on_disk(key(2)));
}

TEST(DiskBudget, AWriteThatCannotFitIsDroppedCountedAndPausesSpilling) {
  Fixture f;
  auto o = f.options(3);
  o.pause_after_error_ms = 60000;
  auto store = DiskStore::open_or_throw(o);
  store->put_manifest(agent("pinned", {key(0), key(1), key(2)}, true));
  for (std::uint64_t i = 0; i < 3; ++i) f.write(*store, key(i));
  f.write(*store, key(3));
  DiskStoreStats s = store->stats();
  EXPECT_EQ(s.n_over_budget, 1);
  EXPECT_EQ(s.n_dropped, 1);
  EXPECT_EQ(s.n_evicted, 0) << "nothing deleted for a write that still could not fit";
  EXPECT_TRUE(s.paused);
  EXPECT_FALSE(store->on_disk(key(3)));
  EXPECT_EQ(s.n_blocks, 3);
  EXPECT_FALSE(store->put(key(4), {}, {}, block_content(kShape, 4))) << "paused";
  EXPECT_EQ(store->stats().n_dropped, 2);
}

TEST(DiskBudget, OldBlocksNoManifestNamesAreCollected) {
  Fixture f;
  auto store = DiskStore::open_or_throw(f.options(0));  // no budget
  // Old: key(0) unnamed, key(1) named, key(2) unnamed with a young tail key(3). Young: key(4).
  f.write(*store, key(0));
  f.write(*store, key(1));
  f.write(*store, key(2));
  store->put_manifest(agent("a", {key(1)}, false));
  f.now_ms += kHourMs - 10'000;
  f.write(*store, key(3), key(2));
  f.write(*store, key(4));
  f.now_ms += 20'000;
  store->collect_garbage();
  store->flush();
  EXPECT_EQ(store->stats().n_gc, 1);
  EXPECT_FALSE(store->on_disk(key(0)));
  EXPECT_TRUE(store->on_disk(key(1))) << "a manifest names it";
  EXPECT_TRUE(store->on_disk(key(2))) << "its young tail needs it";
  EXPECT_TRUE(store->on_disk(key(3)));
  EXPECT_TRUE(store->on_disk(key(4)));
  EXPECT_EQ(f.n_files(), 4);

  store->erase("", "a", {});  // its manifest is gone: key(1) is unnamed and old
  f.now_ms += kHourMs;
  store->collect_garbage();
  store->flush();
  EXPECT_EQ(store->stats().n_gc, 5);
  EXPECT_EQ(f.n_files(), 0);
}

TEST(DiskBudget, CollectionRunsPeriodically) {
  Fixture f;
  auto o = f.options(0);
  o.gc_interval_s = 1;
  auto store = DiskStore::open_or_throw(o);
  f.write(*store, key(0));
  f.now_ms += 2 * kHourMs;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (store->on_disk(key(0)) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(store->on_disk(key(0)));
  EXPECT_EQ(store->stats().n_gc, 1);
}

TEST(DiskBudget, ARestartKeepsTheBudgetRecencyAndAges) {
  Fixture f;
  {
    auto store = DiskStore::open_or_throw(f.options(0));
    for (std::uint64_t i = 0; i < 10; ++i) f.write(*store, key(i));
    f.load(*store, key(0));  // recency lives in the mtime
    store->put_manifest(agent("a", {key(5)}, true));
    store->put_manifest(agent("b", {key(6)}, false));
  }
  // Reopened with a budget of 4 files: down to 3, the pinned one, the named one and the most
  // recently used of the rest.
  {
    auto store = DiskStore::open_or_throw(f.options(4));
    const DiskStoreStats s = store->stats();
    EXPECT_EQ(s.n_evicted, 7);
    EXPECT_EQ(s.n_blocks, 3);
    EXPECT_EQ(f.n_files(), 3);
    EXPECT_TRUE(store->on_disk(key(5))) << "pinned";
    EXPECT_TRUE(store->on_disk(key(6))) << "named";
    EXPECT_TRUE(store->on_disk(key(0))) << "loaded after key(9) was written";
    EXPECT_FALSE(store->on_disk(key(9)));
  }
  // A file's mtime is its last use at start-up: an old one no manifest names is collected.
  const std::string old_file = f.dir.path + "/blocks/" + key(0).hex() + ".kvb";
  const timespec times[2] = {{.tv_sec = 0, .tv_nsec = UTIME_OMIT},
                             {.tv_sec = f.now_ms / 1000 - 2 * 3600, .tv_nsec = 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, old_file.c_str(), times, 0), 0);
  auto store = DiskStore::open_or_throw(f.options(4));
  EXPECT_EQ(store->stats().n_gc, 1);
  EXPECT_EQ(store->stats().n_evicted, 0);
  EXPECT_FALSE(store->on_disk(key(0)));
  EXPECT_TRUE(store->on_disk(key(5)));
  EXPECT_TRUE(store->on_disk(key(6)));
}

}  // namespace
}  // namespace akv
