// The disk tier in int8 fed by a native host tier (lent blocks, as KvManager's write-through
// lends host slots): the encode workers take a burst while the disk is busy, encoding each
// block as it comes and releasing its host slot, so none is dropped; without them the same
// burst fills the lent blocks' bound and is dropped. After a restart the restorer's threads
// load and decode the blocks to the reference round trip, within half a step of each group.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "kv/disk_store.h"
#include "kv/restorer.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using test::Gate;
using test::ScratchDir;

// An 8B-shaped block, fewer layers and heads: 2 layers x [K, V] x 16 tokens x 256, bf16.
constexpr std::int64_t kTokens = 16;
const BlockShape kShape{
    .n_rows = 2 * 2 * kTokens, .row_width = 256, .dtype = DType::BF16, .block_size = kTokens};
constexpr std::int64_t kBurst = 48;
constexpr std::size_t kMaxLent = 4;

// KV-like values: keys with per-channel offsets and outlier channels, values per token.
std::vector<std::byte> kv_block(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<std::byte> raw(kShape.raw_bytes());
  for (std::int64_t r = 0; r < kShape.n_rows; ++r)
    for (std::int64_t c = 0; c < kShape.row_width; ++c) {
      const bool key = r / kTokens % 2 == 0;
      const float v =
          key ? 0.5f * static_cast<float>(c % 5) + (c % 9 == 4 ? 20.0f : 1.0f) * noise(rng)
              : noise(rng);
      const std::uint16_t h = f32_to_bf16(v);
      std::memcpy(raw.data() + 2 * (r * kShape.row_width + c), &h, 2);
    }
  return raw;
}

float element(std::span<const std::byte> raw, std::int64_t r, std::int64_t c) {
  std::uint16_t h;
  std::memcpy(&h, raw.data() + 2 * (r * kShape.row_width + c), 2);
  return bf16_to_f32(h);
}

// |back - x| <= half of its group's step (range / 255, widened by the bf16 parameters' rounding)
// plus the bf16 rounding of the decoded value; groups: key channels over the slab's tokens,
// value rows.
void expect_within_int8_error(std::span<const std::byte> x, std::span<const std::byte> back) {
  const std::int64_t n_slabs = kShape.n_rows / kTokens;
  for (std::int64_t slab = 0; slab < n_slabs; ++slab) {
    const bool keys = slab % 2 == 0;
    const std::int64_t n_groups = keys ? kShape.row_width : kTokens;
    for (std::int64_t g = 0; g < n_groups; ++g) {
      // Group g's elements (row, column): a key channel's tokens or a value row's channels.
      const auto at = [&](std::int64_t j) {
        return keys ? std::pair{slab * kTokens + j, g} : std::pair{slab * kTokens + g, j};
      };
      const std::int64_t n = keys ? kTokens : kShape.row_width;
      double lo = 1e30, hi = -1e30;
      for (std::int64_t j = 0; j < n; ++j) {
        const auto [r, c] = at(j);
        lo = std::min<double>(lo, element(x, r, c));
        hi = std::max<double>(hi, element(x, r, c));
      }
      const double step = (hi - lo + std::fabs(lo) / 128) / 255 * (1 + 1.0 / 128);
      for (std::int64_t j = 0; j < n; ++j) {
        const auto [r, c] = at(j);
        const double a = element(x, r, c), b = element(back, r, c);
        ASSERT_LE(std::fabs(a - b), step / 2 * 1.0001 + std::fabs(a) / 256 + 1e-7)
            << "row " << r << " col " << c;
      }
    }
  }
}

// The host tier's side: block i's slot bytes, and whether the disk released it.
struct Lender {
  Lender() {
    for (std::int64_t i = 0; i < kBurst; ++i)
      slots.push_back(kv_block(static_cast<std::uint32_t>(100 + i)));
  }
  LentBlock lend(std::int64_t i) {
    return {.bytes = slots[static_cast<std::size_t>(i)],
            .codec = SpillCodec::Native,
            .release = [this, i] {
              std::lock_guard lock(mu);
              ++n_released[static_cast<std::size_t>(i)];
              cv.notify_all();
            }};
  }
  bool wait_released(std::int64_t i) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30),
                       [&] { return n_released[static_cast<std::size_t>(i)] > 0; });
  }
  std::vector<std::vector<std::byte>> slots;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> n_released = std::vector<int>(kBurst, 0);
};


DiskStoreOptions int8_options(const std::string& dir, int encode_threads) {
  DiskStoreOptions o;
  o.dir = dir;
  o.fingerprint = {5, 8};
  o.codec = SpillCodec::Int8;
  o.shape = kShape;
  o.block_size = static_cast<std::int32_t>(kTokens);
  o.encode_threads = encode_threads;
  o.max_lent_blocks = kMaxLent;
  return o;
}

std::vector<RestoreJob::Block> chain_of(const BlockKeyer& keys) {
  std::vector<RestoreJob::Block> chain;
  Hash128 parent = keys.root("agent");
  for (std::int32_t i = 0; i < kBurst; ++i) {
    const std::vector<std::int32_t> tokens(kTokens, i);
    const Hash128 key = keys.next(parent, tokens);
    chain.push_back(
        {.key = key, .parent = parent, .tokens_hash = keys.tokens_hash(tokens), .depth = i});
    parent = key;
  }
  return chain;
}

// Block 0 goes first and the IO thread holds its batch (the disk is busy); then the others come
// one by one, each once the previous was released (the rate the encoders keep up with).
void put_burst_behind_a_busy_disk(DiskStore& store, Lender& lender, Gate& gate,
                                  const std::vector<RestoreJob::Block>& chain) {
  const auto put = [&](std::int64_t i) {
    const RestoreJob::Block& b = chain[static_cast<std::size_t>(i)];
    return store.put_lent(b.key, b.parent, b.tokens_hash, lender.lend(i));
  };
  ASSERT_TRUE(put(0));
  gate.wait_entered();
  for (std::int64_t i = 1; i < kBurst; ++i) {
    ASSERT_TRUE(put(i)) << "block " << i << " dropped: " << store.stats().n_dropped_queue_full
                        << " so far";
    ASSERT_TRUE(lender.wait_released(i))
        << "block " << i << " was not encoded while the disk was busy";
  }
}

TEST(DiskCodec, EncodeWorkersTakeABurstWithoutDroppingAndARestartRestoresItWithinTheCodecsError) {
  ScratchDir dir;
  Lender lender;
  std::vector<RestoreJob::Block> chain;
  {
    Gate gate;
    DiskStoreOptions o = int8_options(dir.path, /*encode_threads=*/2);
    o.before_write = [&gate] { gate.wait(); };
    auto store = DiskStore::open_or_throw(o);
    chain = chain_of(store->keyer());
    put_burst_behind_a_busy_disk(*store, lender, gate, chain);
    gate.release();
    store->flush();
    const DiskStoreStats s = store->stats();
    EXPECT_EQ(s.n_dropped, 0);
    EXPECT_EQ(s.n_written, kBurst);
    EXPECT_EQ(s.n_encoded, kBurst);
    EXPECT_LE(s.n_encoded_on_io, 1)
        << "only the first block can reach the IO thread before a worker";
    EXPECT_EQ(s.encode_threads, 2);
    for (std::int64_t i = 0; i < kBurst; ++i)
      EXPECT_EQ(lender.n_released[static_cast<std::size_t>(i)], 1) << i;
  }
  // A restart: the restorer's threads read and decode the chain.
  auto store = DiskStore::open_or_throw(int8_options(dir.path, 2));
  ASSERT_EQ(store->stats().n_blocks, kBurst);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Restorer restorer(
      store.get(),
      [&] {
        std::lock_guard lock(mu);
        done = true;
        cv.notify_all();
      },
      Restorer::kDefaultMaxBytes, /*n_threads=*/3);
  auto job = std::make_shared<RestoreJob>(chain, kShape.raw_bytes());
  restorer.submit(job);
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done; }));
  }
  ASSERT_EQ(job->n_loaded(), kBurst);
  std::vector<std::byte> enc(encoded_bytes(SpillCodec::Int8, kShape)), want(kShape.raw_bytes());
  for (std::int32_t i = 0; i < kBurst; ++i) {
    const std::vector<std::byte>& native = lender.slots[static_cast<std::size_t>(i)];
    encode_block_reference(SpillCodec::Int8, kShape, native, enc);
    decode_block_reference(SpillCodec::Int8, kShape, enc, want);
    const std::span<const std::byte> back = job->raw(i);
    EXPECT_TRUE(std::equal(back.begin(), back.end(), want.begin()))
        << "block " << i << ": not the reference round trip";
    expect_within_int8_error(native, back);
  }
}

TEST(DiskCodec, WithoutEncodeWorkersTheSameBurstIsDroppedBehindABusyDisk) {
  // The IO thread encodes each block it writes: the lent blocks wait for the disk and their
  // bound fills (what a slow encode on the IO thread did on the GPU machine).
  ScratchDir dir;
  Lender lender;
  Gate gate;
  DiskStoreOptions o = int8_options(dir.path, /*encode_threads=*/0);
  o.before_write = [&gate] { gate.wait(); };
  auto store = DiskStore::open_or_throw(o);
  const std::vector<RestoreJob::Block> chain = chain_of(store->keyer());
  ASSERT_TRUE(store->put_lent(chain[0].key, chain[0].parent, chain[0].tokens_hash, lender.lend(0)));
  gate.wait_entered();
  std::int64_t n_queued = 1;
  for (std::int64_t i = 1; i < kBurst; ++i) {
    const RestoreJob::Block& b = chain[static_cast<std::size_t>(i)];
    n_queued += store->put_lent(b.key, b.parent, b.tokens_hash, lender.lend(i)) ? 1 : 0;
  }
  EXPECT_EQ(n_queued, static_cast<std::int64_t>(kMaxLent));
  EXPECT_EQ(store->stats().n_dropped_queue_full, kBurst - static_cast<std::int64_t>(kMaxLent));
  gate.release();
  store->flush();
  EXPECT_EQ(store->stats().n_encoded_on_io, static_cast<std::int64_t>(kMaxLent));
  EXPECT_EQ(store->stats().encode_threads, 0);
}

TEST(DiskCodec, ALentBlocksRoomIsBackWhenItsLenderHearsOfIt) {
  // A lender that lends again from its release (a host tier's next spill) finds the room.
  for (const SpillCodec codec : {SpillCodec::Native, SpillCodec::Int8}) {
    SCOPED_TRACE(spill_codec_name(codec));
    ScratchDir dir;
    DiskStoreOptions o = int8_options(dir.path, /*encode_threads=*/2);
    o.codec = codec;
    o.max_lent_blocks = 1;
    auto store = DiskStore::open_or_throw(o);
    const std::vector<std::byte> bytes = kv_block(1);
    std::atomic<std::int64_t> room_at_release{-1};
    ASSERT_TRUE(store->put_lent({1, 1}, {}, {},
                                {.bytes = bytes, .codec = SpillCodec::Native, .release = [&] {
                                   room_at_release = static_cast<std::int64_t>(store->n_lent_room());
                                 }}));
    store->flush();
    EXPECT_EQ(room_at_release, 1);
  }
}

TEST(DiskCodec, DroppingLentBlocksWaitsForThoseBeingEncodedAndReadsNoLentByteAfter) {
  // The lender goes away (drop_lent) while the workers encode its blocks and the disk is busy:
  // every block is released by then, those not encoded are dropped, and the encoded ones are
  // written from the store's own copy (the lender's bytes are overwritten right after).
  ScratchDir dir;
  Lender lender;
  Gate gate;
  DiskStoreOptions o = int8_options(dir.path, /*encode_threads=*/2);
  o.max_lent_blocks = kBurst;
  o.before_write = [&gate] { gate.wait(); };
  auto store = DiskStore::open_or_throw(o);
  const std::vector<RestoreJob::Block> chain = chain_of(store->keyer());
  for (std::int64_t i = 0; i < kBurst; ++i) {
    const RestoreJob::Block& b = chain[static_cast<std::size_t>(i)];
    ASSERT_TRUE(store->put_lent(b.key, b.parent, b.tokens_hash, lender.lend(i)));
    if (i == 0) gate.wait_entered();
  }
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.release();
  });
  store->drop_lent();
  {
    std::lock_guard lock(lender.mu);
    for (std::int64_t i = 0; i < kBurst; ++i)
      EXPECT_EQ(lender.n_released[static_cast<std::size_t>(i)], 1) << i;
  }
  const std::vector<std::vector<std::byte>> originals = lender.slots;
  for (std::vector<std::byte>& slot : lender.slots)
    std::fill(slot.begin(), slot.end(), std::byte{0x7F});
  opener.join();
  store->flush();
  const DiskStoreStats s = store->stats();
  EXPECT_EQ(s.n_written + s.n_dropped_at_stop, kBurst);
  EXPECT_EQ(s.n_dropped, s.n_dropped_at_stop);
  std::vector<std::byte> enc(encoded_bytes(SpillCodec::Int8, kShape)), want(kShape.raw_bytes()),
      back(kShape.raw_bytes());
  for (std::int64_t i = 0; i < kBurst; ++i) {
    const RestoreJob::Block& b = chain[static_cast<std::size_t>(i)];
    if (!store->on_disk(b.key)) continue;
    encode_block_reference(SpillCodec::Int8, kShape, originals[static_cast<std::size_t>(i)], enc);
    decode_block_reference(SpillCodec::Int8, kShape, enc, want);
    ASSERT_TRUE(store->load(b.key, b.parent, b.tokens_hash, back));
    EXPECT_EQ(back, want) << "block " << i << " was written from bytes read after its release";
  }
}

}  // namespace
}  // namespace akv
