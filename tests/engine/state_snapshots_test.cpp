// StateSnapshots: content addressing by (namespace, token prefix), the deepest usable snapshot,
// and the byte budget (least recently used out).
#include "engine/state_snapshots.h"

#include <gtest/gtest.h>

namespace akv {
namespace {

std::vector<float> state(float v) {
  return std::vector<float>(4, v);
}  // 16 bytes

TEST(StateSnapshots, DeepestMatchingPrefixInItsNamespace) {
  StateSnapshots s(1 << 20);
  const std::vector<std::int32_t> a{1, 2, 3, 4, 5, 6, 7, 8};
  s.put("", a, 2, state(2));
  s.put("", a, 6, state(6));
  s.put("other", a, 7, state(7));
  EXPECT_EQ(s.deepest("", a, 8), 6);
  EXPECT_EQ(s.deepest("", a, 5), 2);
  EXPECT_EQ(s.deepest("", a, 1), 0);
  EXPECT_EQ(s.deepest("other", a, 8), 7);
  std::vector<std::int32_t> b = a;
  b[4] = 99;  // differs inside the 6-token prefix, not the 2-token one
  EXPECT_EQ(s.deepest("", b, 8), 2);
  ASSERT_NE(s.find("", a, 6), nullptr);
  EXPECT_EQ(*s.find("", a, 6), state(6));
  EXPECT_EQ(s.find("", b, 6), nullptr);
}

TEST(StateSnapshots, ByteBudgetDropsLeastRecentlyUsed) {
  StateSnapshots s(48);  // three 16-byte snapshots
  const std::vector<std::int32_t> a{1, 2, 3, 4, 5, 6};
  for (std::int32_t pos = 1; pos <= 3; ++pos) s.put("", a, pos, state(static_cast<float>(pos)));
  EXPECT_EQ(s.deepest("", a, 1), 1);  // 1 is now the most recently used
  s.put("", a, 4, state(4));          // drops 2, the least recently used
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.bytes(), 48);
  EXPECT_NE(s.find("", a, 1), nullptr);
  EXPECT_EQ(s.find("", a, 2), nullptr);
  s.put("", a, 5, std::vector<float>(100));  // larger than the budget: not kept
  EXPECT_EQ(s.find("", a, 5), nullptr);
  EXPECT_EQ(s.size(), 3u);
}

}  // namespace
}  // namespace akv
