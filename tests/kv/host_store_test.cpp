// HostStore: the byte budget, verified gets, and the cost-aware (GreedyDual) choice of what to
// drop: disk-backed before disk-less, shallow before deep, Low before High retention, and age.
#include "kv/host_store.h"

#include <gtest/gtest.h>

#include <unordered_set>
#include <vector>

#include "tier_test_util.h"

namespace akv {
namespace {

constexpr BlockShape kShape{.n_rows = 8, .row_width = 16, .dtype = DType::F32};  // 512 bytes

Hash128 key(std::uint64_t i) {
  return {.hi = 7, .lo = i};
}
HostBlockMeta meta(std::uint64_t i, std::int32_t depth = 0, Retention r = Retention::Normal) {
  return {.parent = key(1000 + i), .tokens_hash = key(2000 + i), .depth = depth, .retention = r};
}

HostStoreOptions options(std::size_t n_blocks, std::function<bool(const Hash128&)> on_disk = {}) {
  return {.max_bytes = n_blocks * kShape.raw_bytes(),
          .codec = SpillCodec::Native,
          .shape = kShape,
          .block_size = 16,
          .attention_equal_tokens = 64.0,
          .on_disk = std::move(on_disk)};
}

std::vector<std::uint64_t> held(const HostStore& store, std::uint64_t n) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t i = 0; i < n; ++i)
    if (store.contains(key(i))) out.push_back(i);
  return out;
}

TEST(HostStore, GetReturnsTheBytesOnlyWithTheRightParentAndTokens) {
  HostStore store(options(4));
  const auto raw = test::block_content(kShape, 5);
  ASSERT_TRUE(store.put(key(1), meta(1), raw));
  std::vector<std::byte> out(kShape.raw_bytes());
  EXPECT_FALSE(store.get(key(1), key(999), meta(1).tokens_hash, out));  // another parent
  EXPECT_FALSE(store.get(key(1), meta(1).parent, key(999), out));       // other tokens
  EXPECT_FALSE(store.get(key(2), meta(1).parent, meta(1).tokens_hash, out));
  ASSERT_TRUE(store.get(key(1), meta(1).parent, meta(1).tokens_hash, out));
  EXPECT_EQ(out, raw);
  EXPECT_EQ(store.stats().n_hits, 1);
  EXPECT_EQ(store.stored_bytes(std::vector<Hash128>{key(1), key(2)}), 512);
}

TEST(HostStore, StaysWithinItsBudgetAndRecyclesSlots) {
  HostStore store(options(3));
  for (std::uint64_t i = 0; i < 10; ++i)
    ASSERT_TRUE(store.put(key(i), meta(i), test::block_content(kShape, i)));
  const HostStoreStats s = store.stats();
  EXPECT_EQ(s.n_blocks, 3);
  EXPECT_EQ(s.bytes, 3 * 512);
  EXPECT_EQ(s.n_evicted, 7);
  EXPECT_EQ(held(store, 10), (std::vector<std::uint64_t>{7, 8, 9}));  // equal cost: oldest go
  std::vector<std::byte> out(kShape.raw_bytes());
  ASSERT_TRUE(store.get(key(8), meta(8).parent, meta(8).tokens_hash, out));
  EXPECT_EQ(out, test::block_content(kShape, 8));  // a recycled slot holds the new block
}

TEST(HostStore, ABudgetBelowOneBlockHoldsNothing) {
  HostStoreOptions o = options(0);
  o.max_bytes = 100;
  HostStore store(o);
  EXPECT_FALSE(store.put(key(1), meta(1), test::block_content(kShape, 1)));
  EXPECT_FALSE(store.contains(key(1)));
}

TEST(HostStore, DropsWhatIsCheapestToGetBackFirst) {
  // Even keys are on disk (a reload); odd ones are not (a recompute).
  HostStore store(options(4, [](const Hash128& k) { return k.lo % 2 == 0; }));
  for (std::uint64_t i = 0; i < 4; ++i) store.put(key(i), meta(i), test::block_content(kShape, i));
  store.put(key(4), meta(4), test::block_content(kShape, 4));
  store.put(key(5), meta(5), test::block_content(kShape, 5));
  EXPECT_EQ(held(store, 6), (std::vector<std::uint64_t>{1, 3, 4, 5}));  // 0 and 2 had disk copies
}

TEST(HostStore, DeepBlocksAndHighRetentionOutlastShallowAndLowOnes) {
  HostStore store(options(2));
  store.put(key(0), meta(0, /*depth=*/0), test::block_content(kShape, 0));
  store.put(key(1), meta(1, /*depth=*/40), test::block_content(kShape, 1));
  store.put(key(2), meta(2, /*depth=*/0), test::block_content(kShape, 2));
  EXPECT_EQ(held(store, 3), (std::vector<std::uint64_t>{1, 2}));  // the shallow older one went

  HostStore r(options(2));
  r.put(key(0), meta(0, 0, Retention::High), test::block_content(kShape, 0));
  r.put(key(1), meta(1, 0, Retention::Low), test::block_content(kShape, 1));
  r.put(key(2), meta(2, 0, Retention::Normal), test::block_content(kShape, 2));
  EXPECT_EQ(held(r, 3), (std::vector<std::uint64_t>{0, 2}));
  r.set_retention(std::vector<Hash128>{key(0)}, Retention::Low);  // unpinned
  r.put(key(3), meta(3), test::block_content(kShape, 3));
  EXPECT_EQ(held(r, 4), (std::vector<std::uint64_t>{2, 3}));
}

TEST(HostStore, AgeWinsOverCostEventually) {
  // One expensive block (deep, not on disk) among a stream of cheap ones: the stream raises
  // the floor L until the expensive block is the cheapest left and goes too.
  HostStore store(options(2));
  store.put(key(0), meta(0, /*depth=*/8), test::block_content(kShape, 0));
  std::uint64_t i = 1;
  for (; i < 100 && store.contains(key(0)); ++i)
    store.put(key(i), meta(i), test::block_content(kShape, i));
  EXPECT_FALSE(store.contains(key(0)));
  EXPECT_GT(i, 3u);  // but it outlived several cheap ones
}

TEST(HostStore, TouchRefreshesAndGetDoesToo) {
  HostStore store(options(2));
  store.put(key(0), meta(0), test::block_content(kShape, 0));
  store.put(key(1), meta(1), test::block_content(kShape, 1));
  EXPECT_TRUE(store.touch(key(0), meta(0)));
  EXPECT_FALSE(store.touch(key(7), meta(7)));
  store.put(key(2), meta(2), test::block_content(kShape, 2));
  EXPECT_EQ(held(store, 3), (std::vector<std::uint64_t>{0, 2}));
  store.erase(key(0));
  EXPECT_EQ(held(store, 3), (std::vector<std::uint64_t>{2}));
  EXPECT_EQ(store.stats().n_blocks, 1);
}

}  // namespace
}  // namespace akv
