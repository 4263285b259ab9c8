// PrefixIndex: chained lookups verified on token ids (also under forced hash collisions),
// namespaces isolated, partial matches, LRU eviction of unreferenced blocks, orphans.
#include "kv/prefix_index.h"

#include <gtest/gtest.h>

#include <vector>

namespace akv {
namespace {

using Tokens = std::vector<std::int32_t>;

std::uint64_t colliding_hash(std::uint64_t, std::span<const std::int32_t>) { return 42; }

TEST(PrefixIndex, FindsAChainBlockByBlock) {
  PrefixIndex index(8, 4);
  const ChainKey root = index.root("tenant-a");
  const Tokens a{1, 2, 3, 4}, b{5, 6, 7, 8};
  ASSERT_EQ(index.insert(root, a, 3), 3);
  ASSERT_EQ(index.insert(index.key_of(3), b, 5), 5);
  EXPECT_EQ(index.find(root, a), std::optional<BlockId>(3));
  EXPECT_EQ(index.find(index.key_of(3), b), std::optional<BlockId>(5));
  EXPECT_FALSE(index.find(root, b).has_value());  // right tokens, wrong parent
  EXPECT_EQ(index.n_indexed(), 2);
}

TEST(PrefixIndex, NamespacesNeverShare) {
  PrefixIndex index(8, 4);
  const Tokens a{1, 2, 3, 4};
  index.insert(index.root("a"), a, 0);
  EXPECT_FALSE(index.find(index.root("b"), a).has_value());
  EXPECT_EQ(index.find_partial(index.root("b"), a).block, -1);
  EXPECT_NE(index.root("a").hash, index.root("b").hash);
}

TEST(PrefixIndex, ForcedHashCollisionIsNotAHit) {
  PrefixIndex index(8, 4, colliding_hash);
  const ChainKey root = index.root("");
  const Tokens a{1, 2, 3, 4}, b{1, 2, 3, 5}, c{9, 9, 9, 9};
  index.insert(root, a, 0);
  EXPECT_FALSE(index.find(root, b).has_value());
  EXPECT_EQ(index.insert(root, b, 1), 1);  // distinct content, same hash: both indexed
  EXPECT_EQ(index.find(root, a), std::optional<BlockId>(0));
  EXPECT_EQ(index.find(root, b), std::optional<BlockId>(1));
  // Same hash and tokens under another parent or namespace are still misses.
  index.insert(index.key_of(0), c, 2);
  EXPECT_FALSE(index.find(index.key_of(1), c).has_value());
  EXPECT_FALSE(index.find(index.root("other"), a).has_value());
}

TEST(PrefixIndex, InsertingEqualContentReturnsTheFirstBlock) {
  PrefixIndex index(8, 4);
  const ChainKey root = index.root("");
  const Tokens a{1, 2, 3, 4};
  EXPECT_EQ(index.insert(root, a, 2), 2);
  EXPECT_EQ(index.insert(root, a, 6), 2);
  EXPECT_FALSE(index.contains(6));
}

TEST(PrefixIndex, PartialMatchPicksTheLongestCommonRun) {
  PrefixIndex index(8, 4);
  const ChainKey root = index.root("");
  index.insert(root, Tokens{1, 2, 9, 9}, 0);
  index.insert(root, Tokens{1, 2, 3, 9}, 1);
  const PartialMatch pm = index.find_partial(root, Tokens{1, 2, 3, 4});
  EXPECT_EQ(pm.block, 1);
  EXPECT_EQ(pm.n_tokens, 3);
  EXPECT_EQ(index.find_partial(root, Tokens{7}).block, -1);
  EXPECT_EQ(index.find_partial(root, Tokens{1, 2}).n_tokens, 2);  // a short query
}

TEST(PrefixIndex, EvictsLeastRecentlyReleasedAndTellsTheListener) {
  PrefixIndex index(8, 2);
  const ChainKey root = index.root("");
  index.insert(root, Tokens{1, 1}, 0);
  index.insert(root, Tokens{2, 2}, 1);
  index.insert(root, Tokens{3, 3}, 2);
  std::vector<BlockId> evicted;
  index.set_evict_listener([&](BlockId b, std::uint64_t) { evicted.push_back(b); });
  EXPECT_FALSE(index.evict_one().has_value());  // all held
  index.on_unreferenced(1);
  index.on_unreferenced(0);
  index.on_unreferenced(2);
  index.on_referenced(0);  // touched again: no longer evictable
  EXPECT_EQ(index.n_evictable(), 2);
  EXPECT_EQ(index.evict_one(), std::optional<BlockId>(1));
  EXPECT_EQ(index.evict_one(), std::optional<BlockId>(2));
  EXPECT_FALSE(index.evict_one().has_value());
  EXPECT_EQ(evicted, (std::vector<BlockId>{1, 2}));
  EXPECT_FALSE(index.find(root, Tokens{2, 2}).has_value());
  EXPECT_TRUE(index.find(root, Tokens{1, 1}).has_value());
}

TEST(PrefixIndex, EvictsLowRetentionBeforeNormalBeforeHighWhateverTheRecency) {
  PrefixIndex index(8, 2);
  const ChainKey root = index.root("");
  for (BlockId b = 0; b < 6; ++b) index.insert(root, Tokens{b, b}, b);
  index.set_retention(0, Retention::High);
  index.set_retention(1, Retention::Low, /*lower=*/true);
  index.set_retention(2, Retention::High);
  index.set_retention(2, Retention::Low);  // raising only: stays High
  index.set_retention(4, Retention::Low, /*lower=*/true);
  for (BlockId b = 0; b < 6; ++b) index.on_unreferenced(b);  // released in id order
  index.set_retention(3, Retention::High);  // while evictable: moves to the High list's tail
  index.set_retention(5, Retention::Low, /*lower=*/true);  // an unpin lowers
  EXPECT_EQ(index.retention_of(2), Retention::High);
  std::vector<BlockId> order;
  while (std::optional<BlockId> b = index.evict_one()) order.push_back(*b);
  // Low (1, 4, 5), then High in release order (0, 2), then 3 (raised last).
  EXPECT_EQ(order, (std::vector<BlockId>{1, 4, 5, 0, 2, 3}));
}

TEST(PrefixIndex, ChildrenOfAnEvictedBlockAreUnreachableAndEvictedFirst) {
  PrefixIndex index(8, 2);
  const ChainKey root = index.root("");
  index.insert(root, Tokens{1, 1}, 0);
  const ChainKey k0 = index.key_of(0);
  index.insert(k0, Tokens{2, 2}, 1);
  index.insert(root, Tokens{5, 5}, 4);
  index.on_unreferenced(0);
  index.on_unreferenced(4);
  index.on_unreferenced(1);  // released last, yet an orphan once 0 goes
  EXPECT_EQ(index.evict_one(), std::optional<BlockId>(0));
  EXPECT_FALSE(index.find(k0, Tokens{2, 2}).has_value());  // parent entry is gone
  EXPECT_EQ(index.evict_one(), std::optional<BlockId>(1));  // the orphan, before block 4
  // Block 0 reused for other content: the old child key cannot match under it.
  index.insert(root, Tokens{1, 1}, 0);
  EXPECT_FALSE(index.find(index.key_of(0), Tokens{2, 2}).has_value());
}

}  // namespace
}  // namespace akv
