// The vectorised int8/int4 spill codec against its reference: byte-equal encodes and decodes for
// every live dtype, shapes the kernels take and shapes they leave to the reference, KV-like
// values, zeros of both signs, constant and tiny groups, and slabs with infinities and NaNs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kv/block_codec.h"
#include "tier_test_util.h"

namespace akv {
namespace {

enum class Fill { KvLike, SignedZeros, Constant, Tiny, Wide, NotFinite };

// [n_rows, row_width] values of one kind.
std::vector<float> values(const BlockShape& s, Fill fill, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(s.n_rows * s.row_width));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto c = static_cast<std::int64_t>(i) % s.row_width;
    switch (fill) {
      case Fill::KvLike:
        x[i] = 0.3f * static_cast<float>(c % 5) + (c % 7 == 3 ? 25.0f : 1.0f) * noise(rng);
        break;
      case Fill::SignedZeros:  // zeros of both signs, often a group's minimum or maximum
        x[i] = rng() % 3 == 0   ? 0.0f
               : rng() % 2 == 0 ? -0.0f
                                : (rng() % 2 == 0 ? 1.0f : -1.0f) * noise(rng);
        break;
      case Fill::Constant:
        x[i] = c % 3 == 0 ? 1.5f : -2.0f;
        break;
      case Fill::Tiny:  // subnormal steps in f32, zero ranges in f16
        x[i] = 1e-39f * noise(rng);
        break;
      case Fill::Wide:
        x[i] = 1e4f * noise(rng);
        break;
      case Fill::NotFinite:
        x[i] = noise(rng);
        if (i % 97 == 5) x[i] = std::numeric_limits<float>::infinity();
        if (i % 131 == 7) x[i] = -std::numeric_limits<float>::infinity();
        if (i % 211 == 9) x[i] = std::numeric_limits<float>::quiet_NaN();
        break;
    }
  }
  return x;
}

void expect_same_bytes(std::span<const std::byte> a, std::span<const std::byte> b,
                       const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(a[i], b[i]) << what << ": first difference at byte " << i << " of " << a.size();
}

const BlockShape kShapes[] = {
    {.n_rows = 2 * 2 * 16, .row_width = 1024, .dtype = DType::BF16, .block_size = 16},  // 8B-like
    {.n_rows = 2 * 3 * 16, .row_width = 128, .dtype = DType::F32, .block_size = 16},
    {.n_rows = 2 * 2 * 8, .row_width = 64, .dtype = DType::F16, .block_size = 8},
    {.n_rows = 2 * 2 * 5, .row_width = 96, .dtype = DType::BF16, .block_size = 5},  // 3 int4 runs
    {.n_rows = 2 * 1 * 1, .row_width = 32, .dtype = DType::F32, .block_size = 1},
    {.n_rows = 2 * 2 * 4,
     .row_width = 40,
     .dtype = DType::BF16,
     .block_size = 4},                                                             // reference only
    {.n_rows = 2 * 2 * 3, .row_width = 33, .dtype = DType::F16, .block_size = 3},  // reference only
};

TEST(KvCodecParity, TheVectorisedKernelsRunOnThisCpu) {
  // The parity below compares the kernels with the reference only where they run.
  if (codec_kernels_name() == "scalar")
    GTEST_SKIP() << "this CPU lacks AVX2/F16C: the reference runs alone";
  EXPECT_EQ(codec_kernels_name(), "avx2");
}

TEST(KvCodecParity, EncodeAndDecodeAreByteEqualToTheReference) {
  std::uint32_t seed = 1;
  for (const BlockShape& s : kShapes)
    for (SpillCodec codec : {SpillCodec::Int8, SpillCodec::Int4})
      for (Fill fill : {Fill::KvLike, Fill::SignedZeros, Fill::Constant, Fill::Tiny, Fill::Wide,
                        Fill::NotFinite}) {
        SCOPED_TRACE(testing::Message() << spill_codec_name(codec) << " " << dtype_name(s.dtype)
                                        << " width " << s.row_width << " block " << s.block_size
                                        << " fill " << static_cast<int>(fill));
        const std::vector<std::byte> raw = test::raw_from_floats(values(s, fill, ++seed), s.dtype);
        std::vector<std::byte> fast(encoded_bytes(codec, s)), ref(fast.size());
        encode_block(codec, s, raw, fast);
        encode_block_reference(codec, s, raw, ref);
        expect_same_bytes(fast, ref, "encode");
        std::vector<std::byte> dec_fast(s.raw_bytes()), dec_ref(s.raw_bytes());
        decode_block(codec, s, ref, dec_fast);
        decode_block_reference(codec, s, ref, dec_ref);
        expect_same_bytes(dec_fast, dec_ref, "decode");
      }
}

TEST(KvCodecParity, DecodingArbitraryBytesIsByteEqualToTheReference) {
  // Parameters of any value (extreme scales, infinities and NaNs take the reference) and codes.
  std::mt19937 rng(7);
  for (const BlockShape& s : kShapes)
    for (SpillCodec codec : {SpillCodec::Int8, SpillCodec::Int4})
      for (int round = 0; round < 3; ++round) {
        std::vector<std::byte> in(encoded_bytes(codec, s));
        for (std::byte& b : in) b = static_cast<std::byte>(rng() & 0xFF);
        if (round > 0)  // finite parameters: clear a random exponent bit of every 16-bit half
          for (std::size_t i = 1; i < in.size(); i += 2)
            in[i] &= static_cast<std::byte>(round == 1 ? 0xBF : 0x3F);
        std::vector<std::byte> fast(s.raw_bytes()), ref(s.raw_bytes());
        decode_block(codec, s, in, fast);
        decode_block_reference(codec, s, in, ref);
        expect_same_bytes(fast, ref, "decode");
      }
}

}  // namespace
}  // namespace akv
