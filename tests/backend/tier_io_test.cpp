// The host-side defaults of the tier ops every CPU backend uses: write_kv_blocks decodes each
// block as decode_block does and writes it (done at once: its fence has passed on return),
// start_read_kv_block_encoded gives encode_block of the block as it was at the call, and
// alloc_host gives aligned memory of the size asked.
#include <gtest/gtest.h>

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

TEST(TierIo, DefaultAllocHostIsAlignedAndSized) {
  ReferenceBackend backend;
  const std::unique_ptr<HostMemory> m = backend.alloc_host(10000);
  ASSERT_EQ(m->bytes().size(), 10000u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(m->bytes().data()) % 4096, 0u);
  std::memset(m->bytes().data(), 0x7f, m->bytes().size());  // writable throughout
}

}  // namespace
}  // namespace akv
