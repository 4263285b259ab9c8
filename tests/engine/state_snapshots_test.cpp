// StateSnapshots: content addressing by (namespace, token prefix), the deepest usable snapshot,
// and the byte budget (least recently used out).
#include "engine/state_snapshots.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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
  std::vector<float> scratch;
  ASSERT_TRUE(s.contains("", a, 6));
  EXPECT_TRUE(std::ranges::equal(s.find("", a, 6, scratch), state(6)));
  EXPECT_FALSE(s.contains("", b, 6));
  EXPECT_TRUE(s.find("", b, 6, scratch).empty());
}

TEST(StateSnapshots, ByteBudgetDropsLeastRecentlyUsed) {
  StateSnapshots s(48);  // three 16-byte snapshots
  const std::vector<std::int32_t> a{1, 2, 3, 4, 5, 6};
  for (std::int32_t pos = 1; pos <= 3; ++pos) s.put("", a, pos, state(static_cast<float>(pos)));
  EXPECT_EQ(s.deepest("", a, 1), 1);  // 1 is now the most recently used
  s.put("", a, 4, state(4));          // drops 2, the least recently used
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.bytes(), 48);
  EXPECT_TRUE(s.contains("", a, 1));
  EXPECT_FALSE(s.contains("", a, 2));
  s.put("", a, 5, std::vector<float>(100));  // larger than the budget: not kept
  EXPECT_FALSE(s.contains("", a, 5));
  EXPECT_EQ(s.size(), 3u);
}

// bf16: half the bytes in the budget, each value back within bf16's rounding (2^-8 relative).
TEST(StateSnapshots, Bf16KeepsHalfTheBytesWithinItsRounding) {
  StateSnapshots s(48, StateCodec::Bf16);  // six 8-byte snapshots of 4 floats
  const std::vector<std::int32_t> a{1, 2, 3, 4, 5, 6, 7};
  const std::vector<float> v{1.0f, -3.14159265f, 1e-3f, 12345.678f};
  for (std::int32_t pos = 1; pos <= 7; ++pos) s.put("", a, pos, v);
  EXPECT_EQ(s.size(), 6u);
  EXPECT_EQ(s.bytes(), 48);
  std::vector<float> scratch;
  const std::span<const float> back = s.find("", a, 7, scratch);
  ASSERT_EQ(back.size(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(back[i], v[i], std::abs(v[i]) / 256) << i;
  EXPECT_NE(back[1], v[1]) << "rounded";
  EXPECT_EQ(back[0], 1.0f);
}

}  // namespace
}  // namespace akv
