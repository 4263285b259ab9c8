// KvManager's encoded demotions (a host tier with a quantizing codec, a backend that encodes on
// the device): the blocks one allocation evicts, or one drain of the spill queue writes through,
// go to the backend in one batched encoded read, and each is read as it was at its eviction
// although the block is rewritten in the same call (a restore's write_blocks, a partial match's
// copy).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "kv/host_store.h"
#include "kv/kv_manager.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using Tokens = std::vector<std::int32_t>;
constexpr std::int32_t kBs = 4;
constexpr BlockShape kShape{
    .n_rows = 2 * 2 * kBs, .row_width = 64, .dtype = DType::F32, .block_size = kBs};
constexpr SpillCodec kCodec = SpillCodec::Int8;

Tokens iota_tokens(std::int32_t n, std::int32_t first) {
  Tokens t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// What "the model" writes into block b of a prompt starting with `first`: finite floats.
std::vector<std::byte> content(std::int32_t first, std::int32_t b) {
  std::vector<std::byte> raw(kShape.raw_bytes());
  for (std::size_t i = 0; i < raw.size() / 4; ++i) {
    const float x =
        std::sin(0.1f * static_cast<float>(i + 977 * b + first)) * (i % 64 == 7 ? 30.0f : 2.0f);
    std::memcpy(raw.data() + 4 * i, &x, 4);
  }
  return raw;
}

// The block a host-tier restore gives back for `raw`: the codec's round trip.
std::vector<std::byte> round_trip(const std::vector<std::byte>& raw) {
  std::vector<std::byte> enc(encoded_bytes(kCodec, kShape)), out(kShape.raw_bytes());
  encode_block(kCodec, kShape, raw, enc);
  decode_block(kCodec, kShape, enc, out);
  return out;
}

HostStoreOptions host_options() {
  HostStoreOptions o;
  o.max_bytes = 16 * encoded_bytes(kCodec, kShape);
  o.codec = kCodec;
  o.shape = kShape;
  o.block_size = kBs;
  return o;
}

// An in-memory "device" whose encoded reads are deferred as a device backend's are: a started
// read encodes the block as it is at the call and fills its slot (garbage until then) only at
// finish_reads. Records the size of every batched call.
struct EncodingDevice {
  explicit EncodingDevice(std::int32_t n_blocks, bool host_write_through = false)
      : mem(static_cast<std::size_t>(n_blocks), std::vector<std::byte>(kShape.raw_bytes())),
        kv(n_blocks, kBs, [this](BlockId s, BlockId d) { mem[d] = mem[s]; }),
        host(host_options()) {
    KvBlockIo io = test::memory_block_io(mem, kShape.raw_bytes());
    io.finish_reads = [this] {
      for (const auto& [out, bytes] : started) std::memcpy(out.data(), bytes.data(), out.size());
      started.clear();
    };
    io.start_read_encoded = [this](BlockId b, SpillCodec c, std::span<std::byte> out) {
      ++n_single_reads;
      start(b, c, out);
    };
    io.start_reads_encoded = [this](std::span<const BlockId> blocks, SpillCodec c,
                                    std::span<const std::span<std::byte>> out) {
      batch_sizes.push_back(blocks.size());
      for (std::size_t i = 0; i < blocks.size(); ++i) start(blocks[i], c, out[i]);
    };
    kv.attach_tiers({.host = &host, .host_write_through = host_write_through}, io);
  }
  void start(BlockId b, SpillCodec c, std::span<std::byte> out) {
    std::vector<std::byte> enc(out.size());
    encode_block(c, kShape, mem[b], enc);
    std::fill(out.begin(), out.end(), std::byte{0xEE});
    started.emplace_back(out, std::move(enc));
  }
  // Match, compute the blocks not matched (content(tokens[0], b)), commit, release. Returns the
  // tokens matched.
  std::int32_t run(const Tokens& tokens) {
    KvSequence seq;
    const std::int32_t hit = kv.match(seq, tokens, "");
    const auto n = static_cast<std::int32_t>(tokens.size());
    EXPECT_TRUE(kv.allocate(seq, n));
    for (std::int32_t b = hit / kBs; b * kBs < n; ++b)
      mem[seq.block_table()[b]] = content(tokens[0], b);
    kv.commit(seq, tokens, n);
    kv.spill_queued(1 << 20);  // the engine drains its spill queue between steps
    kv.release(seq);
    return hit;
  }

  std::vector<std::vector<std::byte>> mem;
  KvManager kv;
  HostStore host;
  std::vector<std::pair<std::span<std::byte>, std::vector<std::byte>>> started;
  std::vector<std::size_t> batch_sizes;
  std::int32_t n_single_reads = 0;
};

TEST(KvDemoteBatch, OneAllocationDemotesItsEvictedBlocksInOneBatchedRead) {
  EncodingDevice d(6);
  const Tokens a = iota_tokens(13, 100);
  d.run(a);                      // 3 full blocks indexed
  d.run(iota_tokens(24, 5000));  // takes the whole device: a's 3 blocks are evicted together
  EXPECT_EQ(d.batch_sizes, std::vector<std::size_t>{3});
  EXPECT_EQ(d.n_single_reads, 0);
  EXPECT_EQ(d.host.stats().n_blocks, 3);
  KvSequence seq;
  ASSERT_EQ(d.kv.match(seq, a, ""), 12);
  EXPECT_EQ(seq.n_host_restored_blocks(), 3);
  for (std::int32_t b = 0; b < 3; ++b)
    EXPECT_EQ(d.mem[seq.block_table()[b]], round_trip(content(a[0], b))) << "block " << b;
  d.kv.release(seq);
}

// The host write-through (a host tier, no disk): the blocks one commit indexed are copied to the
// host tier in one batched read when the spill queue drains, and their eviction copies nothing.
TEST(KvDemoteBatch, TheHostWriteThroughEncodesADrainedSpillQueueInOneBatchedRead) {
  EncodingDevice d(6, /*host_write_through=*/true);
  const Tokens a = iota_tokens(13, 100);
  d.run(a);
  EXPECT_EQ(d.batch_sizes, std::vector<std::size_t>{3});
  EXPECT_EQ(d.host.stats().n_blocks, 3);
  d.run(iota_tokens(24, 5000));  // evicts a (already in the host tier) and writes b through
  EXPECT_EQ(d.batch_sizes, (std::vector<std::size_t>{3, 6}));
  EXPECT_EQ(d.n_single_reads, 0);
  KvSequence seq;
  ASSERT_EQ(d.kv.match(seq, a, ""), 12);
  for (std::int32_t b = 0; b < 3; ++b)
    EXPECT_EQ(d.mem[seq.block_table()[b]], round_trip(content(a[0], b))) << "block " << b;
  d.kv.release(seq);
}

// A match that restores a into blocks it takes from b evicts b's blocks and writes a's bytes
// into them in the same call: b's host copies are still b's.
TEST(KvDemoteBatch, AnEvictedBlockIsReadBeforeARestoreOverwritesIt) {
  EncodingDevice d(6);
  const Tokens a = iota_tokens(13, 100), b = iota_tokens(24, 5000);
  d.run(a);
  d.run(b);                 // a to the host tier
  EXPECT_EQ(d.run(a), 12);  // a restored over b's tail blocks, which go to the host tier
  KvSequence seq;
  ASSERT_EQ(d.kv.match(seq, b, ""), 20);
  ASSERT_GE(seq.n_host_restored_blocks(), 1);
  for (std::int32_t i = 0; i < 5; ++i) {
    const bool from_host = i >= 5 - seq.n_host_restored_blocks();
    const std::vector<std::byte> want = from_host ? round_trip(content(b[0], i)) : content(b[0], i);
    EXPECT_EQ(d.mem[seq.block_table()[i]], want)
        << "block " << i << (from_host ? " (host tier)" : "");
  }
  d.kv.release(seq);
}

// A partial match copies its source's tokens into a block it takes by evicting e's tail block:
// e's host copy is e's block, not the copy.
TEST(KvDemoteBatch, AnEvictedBlockIsReadBeforeAPartialMatchCopiesIntoIt) {
  EncodingDevice d(4);
  const Tokens e = iota_tokens(8, 700), c = iota_tokens(8, 300);
  d.run(e);  // 2 blocks each: the device is full of cached blocks
  d.run(c);
  const Tokens partial = {300, 301, 302, 303, 304, 305, 999, 998, 997};
  KvSequence p;
  EXPECT_EQ(d.kv.match(p, partial, ""), 6);  // c's first block, then 2 tokens of its second copied
  d.kv.release(p);
  EXPECT_EQ(d.host.stats().n_blocks, 1);  // e's tail block
  Tokens e_longer = e;
  e_longer.push_back(708);
  KvSequence seq;
  ASSERT_EQ(d.kv.match(seq, e_longer, ""), 8);
  ASSERT_EQ(seq.n_host_restored_blocks(), 1);
  EXPECT_EQ(d.mem[seq.block_table()[0]], content(e[0], 0));
  EXPECT_EQ(d.mem[seq.block_table()[1]], round_trip(content(e[0], 1)));
  d.kv.release(seq);
}

}  // namespace
}  // namespace akv
