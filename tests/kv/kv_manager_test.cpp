// KvManager: prefix matches (whole blocks shared, partial block copied), commits that index
// generated tokens, shared prefixes held once, eviction under pressure, no leaks.
#include "kv/kv_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace akv {
namespace {

using Tokens = std::vector<std::int32_t>;
constexpr std::int32_t kBs = 4;

Tokens iota_tokens(std::int32_t n, std::int32_t first = 100) {
  Tokens t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

struct Fixture {
  explicit Fixture(std::int32_t n_blocks)
      : kv(n_blocks, kBs, [this](BlockId s, BlockId d) { copies.push_back({s, d}); }) {}
  // Runs a sequence's whole token list through "the model": match, allocate, commit.
  std::int32_t run(KvSequence& seq, const Tokens& tokens, std::string_view ns = "") {
    const std::int32_t hit = kv.match(seq, tokens, ns);
    EXPECT_TRUE(kv.allocate(seq, static_cast<std::int32_t>(tokens.size())));
    kv.commit(seq, tokens, static_cast<std::int32_t>(tokens.size()));
    return hit;
  }
  std::vector<std::pair<BlockId, BlockId>> copies;
  KvManager kv;
};

TEST(KvManager, ColdMatchIsEmptyThenAllocateCovers) {
  Fixture f(8);
  KvSequence s;
  const Tokens t = iota_tokens(10);
  EXPECT_EQ(f.kv.match(s, t, ""), 0);
  EXPECT_TRUE(f.kv.allocate(s, 10));
  EXPECT_EQ(s.n_blocks(), 3);
  EXPECT_TRUE(f.kv.allocate(s, 12));  // still 3 blocks
  EXPECT_EQ(s.n_blocks(), 3);
  f.kv.release(s);
  EXPECT_EQ(f.kv.usage().n_free, 8);
}

TEST(KvManager, SharedSystemPromptIsHeldOnce) {
  Fixture f(16);
  const Tokens system = iota_tokens(8);  // two full blocks
  Tokens a = system, b = system;
  for (int i = 0; i < 5; ++i) a.push_back(1 + i), b.push_back(50 + i);
  KvSequence sa, sb;
  EXPECT_EQ(f.run(sa, a), 0);
  EXPECT_EQ(f.run(sb, b), 8);
  EXPECT_EQ(sa.block_table()[0], sb.block_table()[0]);
  EXPECT_EQ(sa.block_table()[1], sb.block_table()[1]);
  EXPECT_NE(sa.block_table()[2], sb.block_table()[2]);
  EXPECT_EQ(f.kv.pool().ref_count(sa.block_table()[0]), 2);
  EXPECT_EQ(f.kv.usage().n_used, 2 + 2 + 2);
  EXPECT_TRUE(f.copies.empty());
}

TEST(KvManager, PartialLastBlockIsCopiedOnWrite) {
  Fixture f(16);
  const Tokens first = iota_tokens(8);
  KvSequence s1;
  f.run(s1, first);
  f.kv.release(s1);
  Tokens second = iota_tokens(6);  // one full block + 2 tokens of the next
  second.push_back(7);
  second.push_back(8);
  KvSequence s2;
  EXPECT_EQ(f.kv.match(s2, second, ""), 6);
  ASSERT_EQ(f.copies.size(), 1u);
  EXPECT_EQ(s2.n_blocks(), 2);
  EXPECT_EQ(f.copies[0].second, s2.block_table()[1]);
  EXPECT_NE(f.copies[0].first, s2.block_table()[1]);
}

TEST(KvManager, FullyCachedPromptStillLeavesTheLastTokenToCompute) {
  Fixture f(16);
  const Tokens t = iota_tokens(8);
  KvSequence s1, s2;
  f.run(s1, t);
  EXPECT_EQ(f.kv.match(s2, t, ""), 7);  // block 1 copied with 3 tokens; never written shared
  EXPECT_EQ(f.copies.size(), 1u);
  EXPECT_EQ(s2.block_table()[0], s1.block_table()[0]);
  EXPECT_NE(s2.block_table()[1], s1.block_table()[1]);
}

TEST(KvManager, SecondTurnReusesGeneratedTokensBlocks) {
  Fixture f(32);
  Tokens turn1 = iota_tokens(6);
  KvSequence s;
  f.kv.match(s, turn1, "");
  // prefill 6, then decode 7 tokens one by one (the last sampled token has no KV yet)
  ASSERT_TRUE(f.kv.allocate(s, 6));
  f.kv.commit(s, turn1, 6);
  for (int i = 0; i < 7; ++i) {
    turn1.push_back(200 + i);
    const auto n = static_cast<std::int32_t>(turn1.size()) - 1;
    ASSERT_TRUE(f.kv.allocate(s, n + 1));
    f.kv.commit(s, turn1, n);
  }
  f.kv.release(s);  // 12 computed tokens -> 3 full blocks cached
  Tokens turn2 = turn1;
  turn2.push_back(300);
  turn2.push_back(301);
  KvSequence s2;
  EXPECT_EQ(f.kv.match(s2, turn2, ""), 12);  // every full block, generated tokens included
  EXPECT_EQ(f.kv.usage().n_used, 3);
}

TEST(KvManager, EqualBlocksComputedTwiceAreMergedAtCommit) {
  Fixture f(16);
  const Tokens t = iota_tokens(9);
  KvSequence a, b;
  f.kv.match(a, t, "");
  f.kv.match(b, t, "");  // nothing cached yet: both compute the same prefix
  ASSERT_TRUE(f.kv.allocate(a, 9));
  ASSERT_TRUE(f.kv.allocate(b, 9));
  EXPECT_EQ(f.kv.usage().n_used, 6);
  f.kv.commit(a, t, 9);
  f.kv.commit(b, t, 9);
  EXPECT_EQ(a.block_table()[0], b.block_table()[0]);
  EXPECT_EQ(a.block_table()[1], b.block_table()[1]);
  EXPECT_EQ(f.kv.usage().n_used, 4);
  EXPECT_EQ(f.kv.usage().n_free, 12);
}

TEST(KvManager, AllocateIsAllOrNothingAndEvictsCachedBlocks) {
  Fixture f(4);
  KvSequence a;
  f.run(a, iota_tokens(8));
  f.kv.release(a);
  EXPECT_EQ(f.kv.usage().n_cached, 2);
  KvSequence b;
  EXPECT_EQ(f.kv.match(b, iota_tokens(8, 500), ""), 0);
  EXPECT_FALSE(f.kv.allocate(b, 20));  // needs 5 of 4
  EXPECT_EQ(b.n_blocks(), 0);
  EXPECT_TRUE(f.kv.allocate(b, 16));   // takes the 2 free and evicts the 2 cached
  EXPECT_EQ(f.kv.usage().n_cached, 0);
  KvSequence c;
  EXPECT_EQ(f.kv.match(c, iota_tokens(8), ""), 0);  // evicted: a miss, not a wrong hit
  f.kv.release(b);
  f.kv.release(c);
  EXPECT_EQ(f.kv.usage().n_free + f.kv.usage().n_cached, 4);
}

TEST(KvManager, NamespacesDoNotShareBlocks) {
  Fixture f(8);
  KvSequence a, b;
  f.run(a, iota_tokens(8), "tenant-a");
  EXPECT_EQ(f.kv.match(b, iota_tokens(8), "tenant-b"), 0);
  EXPECT_TRUE(f.copies.empty());
}

}  // namespace
}  // namespace akv
