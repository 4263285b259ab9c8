// HostStore: the byte budget, verified gets, and the cost-aware (GreedyDual) choice of what to
// drop: disk-backed before disk-less, shallow before deep, Low before High retention, and age;
// slots carved from chunks of the given allocator; pinned and reserved slots never reused.
#include "kv/host_store.h"

#include <gtest/gtest.h>

#include <chrono>

#include <thread>

#include <mutex>

#include <cmath>
#include <cstring>
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
          .on_disk = std::move(on_disk),
          .alloc = {}};
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

// The slots come from the allocator the options name (the backend's page-locked memory in the
// server), a chunk at a time, not one allocation per block; each slot lies inside a chunk.
TEST(HostStore, CarvesSlotsFromChunksOfTheGivenAllocator) {
  HostStoreOptions o = options(300);
  std::vector<std::span<std::byte>> chunks;
  o.alloc = [&](std::size_t bytes) {
    std::unique_ptr<HostMemory> m = alloc_plain_host(bytes);
    chunks.push_back(m->bytes());
    return m;
  };
  HostStore store(o);
  for (std::uint64_t i = 0; i < 300; ++i)
    ASSERT_TRUE(store.put(key(i), meta(i), test::block_content(kShape, i)));
  EXPECT_EQ(chunks.size(), 1u);  // 300 slots of 512 bytes: one chunk
  for (std::uint64_t i = 0; i < 300; i += 37) {
    const std::span<const std::byte> slot = store.pin(key(i), meta(i).parent, meta(i).tokens_hash);
    ASSERT_EQ(slot.size(), kShape.raw_bytes());
    EXPECT_TRUE(slot.data() >= chunks[0].data() &&
                slot.data() + slot.size() <= chunks[0].data() + chunks[0].size());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(slot.data()) % 256, 0u);
    EXPECT_EQ(std::memcmp(slot.data(), test::block_content(kShape, i).data(), slot.size()), 0);
    store.unpin(key(i));
  }
}

// allocate_ahead: the budget's chunks are allocated by the store's own thread from the start
// (demotions then never wait for page-locking), and concurrent demotions still get slots.
TEST(HostStore, AllocatesTheBudgetAheadOnItsOwnThread) {
  const std::size_t per_chunk = (std::size_t{64} << 20) / kShape.raw_bytes();
  HostStoreOptions o = options(2 * per_chunk + per_chunk / 2);  // two and a half chunks
  std::mutex mu;
  std::vector<std::pair<std::size_t, std::thread::id>> calls;
  o.alloc = [&](std::size_t bytes) {
    std::lock_guard lock(mu);
    calls.emplace_back(bytes, std::this_thread::get_id());
    return alloc_plain_host(bytes);
  };
  o.allocate_ahead = true;
  HostStore store(o);
  for (std::uint64_t i = 0; i < 1000; ++i)  // while the thread allocates
    ASSERT_TRUE(store.put(key(i), meta(i), test::block_content(kShape, i)));
  const auto n_calls = [&] {
    std::lock_guard lock(mu);
    return calls.size();
  };
  for (int i = 0; i < 500 && n_calls() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(n_calls(), 3u);
  std::size_t total = 0, ahead = 0;
  for (const auto& [bytes, id] : calls) {
    total += bytes;
    ahead += id != std::this_thread::get_id() ? 1 : 0;
  }
  EXPECT_GE(ahead, 2u) << "at most the first chunk comes from a demotion that raced the thread";
  EXPECT_EQ(total, (2 * per_chunk + per_chunk / 2) * kShape.raw_bytes());
  for (std::uint64_t i = 1000; i < 3000; ++i)
    ASSERT_TRUE(store.put(key(i), meta(i), test::block_content(kShape, i)));
  EXPECT_EQ(n_calls(), 3u) << "nothing allocated once the budget's chunks exist";
  std::vector<std::byte> back(kShape.raw_bytes());
  for (std::uint64_t i = 0; i < 3000; i += 111) {
    ASSERT_TRUE(store.get(key(i), meta(i).parent, meta(i).tokens_hash, back));
    EXPECT_EQ(back, test::block_content(kShape, i));
  }
}

// A pinned block (a restore's copy reads its slot) is never evicted, and an erased one stays
// readable by its pinner until the last unpin frees its slot.
TEST(HostStore, PinnedBlocksOutliveEvictionAndErase) {
  HostStore store(options(3));
  for (std::uint64_t i = 0; i < 3; ++i) store.put(key(i), meta(i), test::block_content(kShape, i));
  const std::span<const std::byte> slot = store.pin(key(0), meta(0).parent, meta(0).tokens_hash);
  ASSERT_FALSE(slot.empty());
  EXPECT_TRUE(store.pin(key(0), key(999), meta(0).tokens_hash).empty());  // another parent
  for (std::uint64_t i = 3; i < 10; ++i) store.put(key(i), meta(i), test::block_content(kShape, i));
  EXPECT_EQ(held(store, 10), (std::vector<std::uint64_t>{0, 8, 9}));  // 0 is pinned: not evicted
  store.erase(key(0));
  EXPECT_FALSE(store.contains(key(0)));
  EXPECT_EQ(store.stats().n_blocks, 2);
  store.put(key(10), meta(10), test::block_content(kShape, 10));  // does not take 0's slot
  EXPECT_EQ(std::memcmp(slot.data(), test::block_content(kShape, 0).data(), slot.size()), 0);
  store.unpin(key(0));  // the slot is free now
  EXPECT_EQ(held(store, 11), (std::vector<std::uint64_t>{9, 10}));
  store.put(key(11), meta(11), test::block_content(kShape, 11));
  EXPECT_EQ(held(store, 12), (std::vector<std::uint64_t>{9, 10, 11}));
}

// When every slot is pinned, a put keeps nothing (and says so) rather than overwrite one.
TEST(HostStore, APutFailsWhenEverySlotIsPinned) {
  HostStore store(options(2));
  for (std::uint64_t i = 0; i < 2; ++i) {
    store.put(key(i), meta(i), test::block_content(kShape, i));
    ASSERT_FALSE(store.pin(key(i), meta(i).parent, meta(i).tokens_hash).empty());
  }
  EXPECT_FALSE(store.put(key(5), meta(5), test::block_content(kShape, 5)));
  EXPECT_TRUE(store.reserve(key(5), meta(5)).empty());
  store.unpin(key(1));
  EXPECT_TRUE(store.put(key(5), meta(5), test::block_content(kShape, 5)));
  EXPECT_EQ(held(store, 6), (std::vector<std::uint64_t>{0, 5}));
  store.unpin(key(0));
}

// A demotion copies straight into a reserved slot: invisible until published, freed if abandoned.
TEST(HostStore, ReservedSlotsArePublishedOrAbandoned) {
  HostStore store(options(2));
  const auto raw = test::block_content(kShape, 1);
  std::span<std::byte> slot = store.reserve(key(1), meta(1));
  ASSERT_EQ(slot.size(), kShape.raw_bytes());
  EXPECT_TRUE(store.reserve(key(1), meta(1)).empty());  // once
  EXPECT_FALSE(store.contains(key(1)));
  std::vector<std::byte> out(kShape.raw_bytes());
  EXPECT_FALSE(store.get(key(1), meta(1).parent, meta(1).tokens_hash, out));
  std::memcpy(slot.data(), raw.data(), raw.size());
  store.publish(key(1));
  ASSERT_TRUE(store.get(key(1), meta(1).parent, meta(1).tokens_hash, out));
  EXPECT_EQ(out, raw);
  EXPECT_EQ(store.stats().n_put, 1);

  ASSERT_FALSE(store.reserve(key(2), meta(2)).empty());
  store.abandon(key(2));
  EXPECT_FALSE(store.contains(key(2)));
  EXPECT_EQ(store.stats().n_blocks, 1);
  ASSERT_FALSE(store.reserve(key(3), meta(3)).empty());  // the abandoned slot is reused
  store.erase(key(3));                                    // erased while being filled
  store.publish(key(3));
  EXPECT_FALSE(store.contains(key(3)));
  EXPECT_EQ(store.stats().n_blocks, 1);
}

// With BF16 live KV the tier holds what its codec makes of the block (int8: within half a step).
TEST(HostStore, Bf16BlocksRoundTripThroughTheCodec) {
  const BlockShape shape{.n_rows = 8, .row_width = 64, .dtype = DType::BF16, .block_size = 2};
  for (SpillCodec codec : {SpillCodec::Native, SpillCodec::BF16, SpillCodec::Int8, SpillCodec::Int4}) {
    HostStoreOptions o = options(2);
    o.shape = shape;
    o.codec = codec;
    o.max_bytes = 2 * encoded_bytes(codec, shape);
    HostStore store(o);
    std::vector<std::byte> raw(shape.raw_bytes());
    for (std::size_t i = 0; i < raw.size() / 2; ++i) {
      const std::uint16_t h = f32_to_bf16(std::sin(0.37f * static_cast<float>(i)) * 3.0f);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    }
    ASSERT_TRUE(store.put(key(1), meta(1), raw));
    std::vector<std::byte> out(raw.size()), want(raw.size()), enc(encoded_bytes(codec, shape));
    encode_block(codec, shape, raw, enc);
    decode_block(codec, shape, enc, want);
    ASSERT_TRUE(store.get(key(1), meta(1).parent, meta(1).tokens_hash, out));
    EXPECT_EQ(out, want) << spill_codec_name(codec);
    if (codec_is_raw(codec, shape.dtype)) {
      EXPECT_EQ(out, raw) << spill_codec_name(codec);
    }
  }
}

}  // namespace
}  // namespace akv
