// The host-side defaults of the tier ops every CPU backend uses: write_kv_blocks decodes each
// block as decode_block does and writes it (done at once: its fence has passed on return),
// start_read_kv_block_encoded gives encode_block of the block as it was at the call (and the
// batched start_read_kv_blocks_encoded the same bytes as one such call per block), and
// alloc_host gives aligned memory of the size asked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/host_buffer.h"
#include "backend/cpu/reference_backend.h"

namespace akv {
namespace {

std::vector<std::byte> random_block(const KvLayout& l, std::mt19937& rng) {
  const BlockShape s = block_shape_of(l);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<std::byte> raw(s.raw_bytes());
  for (std::int64_t i = 0; i < s.n_rows * s.row_width; ++i) store_f32(raw.data(), l.dtype, i, d(rng));
  return raw;
}

TEST(TierIo, DefaultWriteKvBlocksAndEncodedReadsMatchTheCodecs) {
  ReferenceBackend backend;
  std::mt19937 rng(7);
  for (DType live : {DType::F32, DType::BF16, DType::F16}) {
    const KvLayout l{.n_layers = 2, .n_blocks = 4, .block_size = 4, .n_kv_heads = 2, .head_dim = 32, .dtype = live};
    const BlockShape shape = block_shape_of(l);
    KvStorage kv = backend.alloc_kv(l);
    for (SpillCodec codec :
         {SpillCodec::Native, SpillCodec::F32, SpillCodec::BF16, SpillCodec::Int8, SpillCodec::Int4}) {
      std::vector<std::vector<std::byte>> enc, want;
      std::vector<EncodedKvBlock> blocks;
      for (int i = 0; i < 2; ++i) {
        const std::vector<std::byte> raw = random_block(l, rng);
        enc.emplace_back(encoded_bytes(codec, shape));
        encode_block(codec, shape, raw, enc.back());
        want.emplace_back(shape.raw_bytes());
        decode_block(codec, shape, enc.back(), want.back());
      }
      blocks.push_back({.block = 3, .codec = codec, .bytes = enc[0]});
      blocks.push_back({.block = 0, .codec = codec, .bytes = enc[1]});
      const std::uint64_t fence = backend.write_kv_blocks(kv, blocks);
      EXPECT_TRUE(backend.kv_writes_done(fence));
      std::vector<std::byte> back(shape.raw_bytes()), got(encoded_bytes(codec, shape)),
          expected(encoded_bytes(codec, shape));
      backend.read_kv_block(kv, 3, back);
      EXPECT_EQ(back, want[0]) << spill_codec_name(codec) << " " << dtype_name(live);
      backend.read_kv_block(kv, 0, back);
      EXPECT_EQ(back, want[1]) << spill_codec_name(codec) << " " << dtype_name(live);
      backend.start_read_kv_block_encoded(kv, 3, codec, got);
      backend.write_kv_block(kv, 3, random_block(l, rng));  // later writes do not show
      backend.finish_reads();
      encode_block(codec, shape, want[0], expected);
      EXPECT_EQ(got, expected) << spill_codec_name(codec) << " " << dtype_name(live);
    }
  }
}

// The default start_read_kv_blocks_encoded equals one start_read_kv_block_encoded per block, in
// order, byte for byte: N = 1, 3 and 64 blocks of scattered ids, every codec and live dtype,
// each block as it was at the call (a write right after does not show).
TEST(TierIo, DefaultBatchedEncodedReadsEqualSingleCalls) {
  ReferenceBackend backend;
  std::mt19937 rng(11);
  for (DType live : {DType::F32, DType::BF16, DType::F16}) {
    const KvLayout l{.n_layers = 2, .n_blocks = 130, .block_size = 4, .n_kv_heads = 2, .head_dim = 32, .dtype = live};
    const BlockShape shape = block_shape_of(l);
    KvStorage kv = backend.alloc_kv(l);
    for (SpillCodec codec : {SpillCodec::Native, SpillCodec::BF16, SpillCodec::Int8, SpillCodec::Int4})
      for (std::size_t n : {1u, 3u, 64u}) {
        const std::size_t enc = encoded_bytes(codec, shape);
        std::vector<std::int32_t> ids;
        std::vector<std::vector<std::byte>> raws;
        for (std::size_t i = 0; i < n; ++i) {
          ids.push_back(static_cast<std::int32_t>((i * 37 + 5) % 130));
          raws.push_back(random_block(l, rng));
          backend.write_kv_block(kv, ids.back(), raws.back());
        }
        std::vector<std::byte> batched(n * enc, std::byte{0xEE}), single(n * enc, std::byte{0xDD});
        std::vector<std::span<std::byte>> spans;
        for (std::size_t i = 0; i < n; ++i) spans.push_back(std::span(batched).subspan(i * enc, enc));
        backend.start_read_kv_blocks_encoded(kv, ids, codec, spans);
        for (std::size_t i = 0; i < n; ++i)
          backend.start_read_kv_block_encoded(kv, ids[i], codec, std::span(single).subspan(i * enc, enc));
        for (std::int32_t id : ids) backend.write_kv_block(kv, id, random_block(l, rng));
        backend.finish_reads();
        EXPECT_EQ(batched, single) << spill_codec_name(codec) << " " << dtype_name(live) << " n " << n;
        std::vector<std::byte> want(enc);
        encode_block(codec, shape, raws[n - 1], want);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), batched.end() - static_cast<std::ptrdiff_t>(enc)))
            << spill_codec_name(codec) << " " << dtype_name(live) << " n " << n;
      }
  }
}

TEST(TierIo, DefaultAllocHostIsAlignedAndSized) {
  ReferenceBackend backend;
  const std::unique_ptr<HostMemory> m = backend.alloc_host(10000);
  ASSERT_EQ(m->bytes().size(), 10000u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(m->bytes().data()) % 4096, 0u);
  std::memset(m->bytes().data(), 0x7f, m->bytes().size());  // writable throughout
}

}  // namespace
}  // namespace akv
