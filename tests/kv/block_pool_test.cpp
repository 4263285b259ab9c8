// BlockPool: ref counts, free list, misuse caught.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <set>

namespace akv {
namespace {

TEST(BlockPool, HandsOutEveryBlockOnceThenRunsOut) {
  BlockPool pool(4, 16);
  std::set<BlockId> got;
  for (int i = 0; i < 4; ++i) {
    std::optional<BlockId> b = pool.take_free();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(pool.ref_count(*b), 1);
    got.insert(*b);
  }
  EXPECT_EQ(got.size(), 4u);
  EXPECT_EQ(pool.n_free(), 0);
  EXPECT_FALSE(pool.take_free().has_value());
}

TEST(BlockPool, RefCountsGateFreeing) {
  BlockPool pool(2, 8);
  const BlockId b = *pool.take_free();
  pool.add_ref(b);
  EXPECT_EQ(pool.drop_ref(b), 1);
  EXPECT_EQ(pool.drop_ref(b), 0);
  EXPECT_FALSE(pool.is_free(b));  // unreferenced is not free until put back
  pool.put_free(b);
  EXPECT_TRUE(pool.is_free(b));
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_EQ(pool.location(b), BlockLocation::Device);
}

TEST(BlockPoolDeathTest, DoubleFreeAndStrayRefsAbort) {
  BlockPool pool(2, 8);
  const BlockId b = *pool.take_free();
  EXPECT_DEATH(pool.put_free(b), "still referenced");
  pool.drop_ref(b);
  pool.put_free(b);
  EXPECT_DEATH(pool.put_free(b), "freed twice");
  EXPECT_DEATH(pool.add_ref(b), "free block");
  EXPECT_DEATH(pool.drop_ref(b), "not held");
  EXPECT_DEATH(pool.ref_count(7), "out of range");
}

}  // namespace
}  // namespace akv
