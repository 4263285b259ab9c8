// Spill codecs: exact round trips, per-element error bounds of int8/int4 derived from the
// documented groups (keys per channel, values per token), encoded sizes, odd shapes, codec ids,
// and a restore on stories260K that keeps the greedy tokens.
#include "kv/block_codec.h"
#include "tier_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "backend/cpu/reference_backend.h"
#include "codec_eval.h"
#include "kv/model_fingerprint.h"
#include "models/model.h"

namespace akv {
namespace {

const std::string kStories = std::string(AGENTKV_TESTDATA) + "/models/stories260K/hf";

std::vector<float> to_floats(std::span<const std::byte> raw, DType t) {
  std::vector<float> f(raw.size() / dtype_size(t));
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (t == DType::F32) {
      std::memcpy(&f[i], raw.data() + 4 * i, 4);
      continue;
    }
    std::uint16_t h;
    std::memcpy(&h, raw.data() + 2 * i, 2);
    f[i] = t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
  return f;
}

std::int64_t tokens_of(const BlockShape& s) {
  return s.block_size > 0 ? s.block_size : s.n_rows / 2;
}

// KV-like values: per-channel offsets, a few outlier channels in keys (x25), rounded to the
// live dtype. [n_rows, row_width] row-major.
std::vector<float> kv_like(const BlockShape& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> offset(s.row_width), gain(s.row_width);
  for (std::int64_t c = 0; c < s.row_width; ++c) {
    offset[c] = 2.0f * noise(rng);
    gain[c] = c % 7 == 3 ? 25.0f : 1.0f;
  }
  std::vector<float> x(s.n_rows * s.row_width);
  for (std::int64_t r = 0; r < s.n_rows; ++r) {
    const bool key = r / tokens_of(s) % 2 == 0;
    for (std::int64_t c = 0; c < s.row_width; ++c)
      x[r * s.row_width + c] = key ? offset[c] + gain[c] * noise(rng) : noise(rng);
  }
  return to_floats(test::raw_from_floats(x, s.dtype), s.dtype);
}

std::vector<float> round_trip(SpillCodec codec, const BlockShape& s, std::span<const float> x) {
  const std::vector<std::byte> raw = test::raw_from_floats(x, s.dtype);
  std::vector<std::byte> enc(encoded_bytes(codec, s)), dec(s.raw_bytes());
  encode_block(codec, s, raw, enc);
  decode_block(codec, s, enc, dec);
  return to_floats(dec, s.dtype);
}

// The documented groups: a key slab's channel over the slab's tokens; a value row's run of
// `value_channels` channels (0: the whole row).
struct Group {
  std::int64_t first_row, n_rows, first_col, n_cols;
};
std::vector<Group> documented_groups(const BlockShape& s, std::int64_t value_channels) {
  std::vector<Group> out;
  const std::int64_t t = tokens_of(s);
  const std::int64_t vw = value_channels > 0 ? value_channels : s.row_width;
  for (std::int64_t slab = 0; slab < s.n_rows / t; ++slab) {
    if (slab % 2 == 0) {
      for (std::int64_t c = 0; c < s.row_width; ++c) out.push_back({slab * t, t, c, 1});
      continue;
    }
    for (std::int64_t r = slab * t; r < (slab + 1) * t; ++r)
      for (std::int64_t c = 0; c < s.row_width; c += vw)
        out.push_back({r, 1, c, std::min(vw, s.row_width - c)});
  }
  return out;
}

// |decoded - x| <= half a step of each group, the step being its range / (2^bits - 1) widened
// by the bf16 rounding of the stored minimum and scale (2^-7 relative each), plus the rounding
// of the decoded value to the live dtype.
void expect_within_half_step(SpillCodec codec, const BlockShape& s, std::span<const float> x,
                             std::span<const float> y) {
  const int bits = codec == SpillCodec::Int8 ? 8 : 4;
  const double steps = (1 << bits) - 1;
  const double dtype_rel = s.dtype == DType::F32    ? 1e-6
                           : s.dtype == DType::BF16 ? 1.0 / 256
                                                    : 1.0 / 2048;
  for (const Group& g : documented_groups(s, codec == SpillCodec::Int8 ? 0 : 32)) {
    double lo = 1e30, hi = -1e30;
    for (std::int64_t r = g.first_row; r < g.first_row + g.n_rows; ++r)
      for (std::int64_t c = g.first_col; c < g.first_col + g.n_cols; ++c) {
        lo = std::min<double>(lo, x[r * s.row_width + c]);
        hi = std::max<double>(hi, x[r * s.row_width + c]);
      }
    const double step = (hi - lo + std::fabs(lo) / 128) / steps * (1 + 1.0 / 128);
    for (std::int64_t r = g.first_row; r < g.first_row + g.n_rows; ++r)
      for (std::int64_t c = g.first_col; c < g.first_col + g.n_cols; ++c) {
        const double a = x[r * s.row_width + c], b = y[r * s.row_width + c];
        ASSERT_LE(std::fabs(a - b), step / 2 * 1.0001 + std::fabs(a) * dtype_rel + 1e-7)
            << spill_codec_name(codec) << " row " << r << " col " << c;
      }
  }
}

const BlockShape kShapes[] = {
    {.n_rows = 2 * 5 * 16, .row_width = 32, .dtype = DType::F32, .block_size = 16},  // stories
    {.n_rows = 2 * 2 * 8, .row_width = 128, .dtype = DType::F32, .block_size = 8},
    {.n_rows = 2 * 3 * 5, .row_width = 33, .dtype = DType::F32, .block_size = 5},  // odd
    {.n_rows = 2 * 1 * 1, .row_width = 7, .dtype = DType::F32, .block_size = 1},
    {.n_rows = 2 * 2 * 3, .row_width = 65, .dtype = DType::BF16, .block_size = 3},
    {.n_rows = 2 * 2 * 4, .row_width = 40, .dtype = DType::F16, .block_size = 4},
    {.n_rows = 2 * 4, .row_width = 16, .dtype = DType::F32},  // block_size 0: one layer
};

TEST(BlockCodec, NativeAndF32AreExactForEveryDtypeBf16ForBf16) {
  for (const BlockShape& s : kShapes) {
    const std::vector<float> x = kv_like(s, 1);
    EXPECT_EQ(round_trip(SpillCodec::Native, s, x), x);
    EXPECT_EQ(round_trip(SpillCodec::F32, s, x), x);
    if (s.dtype == DType::BF16) {
      EXPECT_EQ(round_trip(SpillCodec::BF16, s, x), x);
    }
  }
}

TEST(BlockCodec, QuantizedErrorIsWithinHalfAStepOfItsGroup) {
  for (const BlockShape& s : kShapes)
    for (SpillCodec codec : {SpillCodec::Int8, SpillCodec::Int4})
      for (std::uint32_t seed : {1u, 2u, 3u}) {
        const std::vector<float> x = kv_like(s, seed);
        expect_within_half_step(codec, s, x, round_trip(codec, s, x));
      }
}

TEST(BlockCodec, ConstantAndZeroBlocksAreExact) {
  const BlockShape s = kShapes[2];
  for (float v : {0.0f, 1.5f, -3.25f}) {
    const std::vector<float> x(s.n_rows * s.row_width, v);
    EXPECT_EQ(round_trip(SpillCodec::Int8, s, x), x);
    EXPECT_EQ(round_trip(SpillCodec::Int4, s, x), x);
  }
}

TEST(BlockCodec, EncodedBytesFollowTheLayout) {
  // Per layer: keys W channel groups, values B row groups (int8) or B * ceil(W / 32) (int4);
  // 4 parameter bytes a group, then the codes.
  const BlockShape s = kShapes[2];  // 3 layers, B = 5, W = 33
  EXPECT_EQ(encoded_bytes(SpillCodec::Native, s), s.raw_bytes());
  EXPECT_EQ(encoded_bytes(SpillCodec::BF16, s), s.raw_bytes() / 2);
  EXPECT_EQ(encoded_bytes(SpillCodec::Int8, s), 3u * ((33 * 4 + 5 * 33) + (5 * 4 + 5 * 33)));
  EXPECT_EQ(encoded_bytes(SpillCodec::Int4, s), 3u * ((33 * 4 + 83) + (5 * 2 * 4 + 83)));
  const BlockShape stories = kShapes[0];  // 16 tokens of 32 channels: 2048 F32 bytes a slab
  EXPECT_EQ(encoded_bytes(SpillCodec::Int8, stories), 5u * ((128 + 512) + (64 + 512)));
  EXPECT_EQ(encoded_bytes(SpillCodec::Int4, stories), 5u * ((128 + 256) + (64 + 256)));
}

TEST(BlockCodec, OutlierKeyChannelsDoNotCoarsenTheOthers) {
  // Per-row key scales would spread an outlier channel's range over every channel of its row;
  // per-channel scales keep the ordinary channels' error near their own step.
  const BlockShape s = kShapes[1];
  const std::vector<float> x = kv_like(s, 5);
  const std::vector<float> y = round_trip(SpillCodec::Int8, s, x);
  double max_err = 0;
  for (std::int64_t r = 0; r < 8; ++r)  // layer 0 keys
    for (std::int64_t c = 0; c < s.row_width; ++c)
      if (c % 7 != 3)
        max_err = std::max<double>(max_err, std::fabs(x[r * 128 + c] - y[r * 128 + c]));
  EXPECT_LT(max_err, 6.0 / 255);  // ordinary channels span about 6; outliers about 150
}

TEST(SpillCodecIds, NamesAndIdsAreStableAndTheRetiredIdIsUnknown) {
  for (std::string_view name : {"native", "f32", "bf16", "int8", "int4"}) {
    const std::optional<SpillCodec> c = find_spill_codec(name);
    ASSERT_TRUE(c) << name;
    EXPECT_EQ(spill_codec_name(*c), name);
    EXPECT_EQ(spill_codec_from_id(static_cast<std::uint32_t>(*c)), c);
  }
  EXPECT_FALSE(find_spill_codec("int2"));
  EXPECT_EQ(static_cast<int>(SpillCodec::Native), 0);
  EXPECT_EQ(static_cast<int>(SpillCodec::F32), 1);
  EXPECT_EQ(static_cast<int>(SpillCodec::BF16), 2);
  EXPECT_FALSE(spill_codec_from_id(3)) << "the per-row int8 layout is retired";
  EXPECT_FALSE(spill_codec_from_id(6));
}

TEST(SpillCodecIds, EveryCodecHasItsOwnFingerprint) {
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
  for (std::string_view name : {"native", "f32", "bf16", "int8", "int4"}) {
    const KvLayout kv{
        .n_layers = 5, .n_blocks = 1, .block_size = 16, .n_kv_heads = 4, .head_dim = 8};
    const Hash128 h = model_fingerprint(
        {.model_dir = kStories, .chat_template = "", .kv = kv, .codec = *find_spill_codec(name)});
    EXPECT_TRUE(seen.insert({h.hi, h.lo}).second) << name;
  }
}

// stories260K over its own greedy text: the first `split` tokens' blocks round-trip through a
// codec as a restore does, then the next tokens are teacher-forced. Returns log-probabilities
// [n - split, vocab] of those rows.
std::vector<std::vector<double>> restored_logprobs(Model& model, Backend& backend,
                                                   std::span<const std::int32_t> ids,
                                                   std::int32_t split, SpillCodec codec) {
  constexpr std::int32_t kBlock = 16;
  const std::int64_t vocab = model.config().vocab_size;
  const std::vector<float> logits = continuation_logits(model, backend, ids, split, kBlock, codec);
  std::vector<std::vector<double>> out;
  for (std::size_t r = 0; r < ids.size() - split; ++r)
    out.push_back(log_probs(std::span(logits).subspan(r * vocab, vocab)));
  return out;
}

TEST(BlockCodecOnStories260K, Int8AndInt4RestoresKeepTheGreedyTokens) {
  std::ifstream in(kStories + "/reference.json");
  const auto ref = nlohmann::json::parse(in);
  std::vector<std::int32_t> ids{1};
  for (std::int32_t t :
       ref["greedy_from_bos"]["generated_ids_200_steps"].get<std::vector<std::int32_t>>())
    if (ids.size() < 97) ids.push_back(t);
  ReferenceBackend backend;
  auto model = load_model(kStories, backend);
  constexpr std::int32_t kSplit = 64;  // 4 blocks restored, 33 tokens teacher-forced
  const auto exact = restored_logprobs(*model, backend, ids, kSplit, SpillCodec::Native);
  // Max KL per position in kv_quality_bench (4 passages, 4 splits, 2,488 positions): int8
  // 1.0e-4, int4 2.9e-2; 5x headroom. The mean is far below (2e-6, 4e-4).
  for (const auto& [codec, max_kl] :
       {std::pair{SpillCodec::Int8, 5e-4}, std::pair{SpillCodec::Int4, 0.15}}) {
    const auto got = restored_logprobs(*model, backend, ids, kSplit, codec);
    for (std::size_t r = 0; r + 1 < got.size(); ++r) {
      const auto argmax = [](const std::vector<double>& v) {
        return std::max_element(v.begin(), v.end()) - v.begin();
      };
      ASSERT_EQ(argmax(exact[r]), ids[kSplit + r + 1]) << "the text is the model's greedy output";
      EXPECT_EQ(argmax(got[r]), ids[kSplit + r + 1]) << spill_codec_name(codec) << " row " << r;
      EXPECT_LT(kl_divergence(exact[r], got[r]), max_kl) << spill_codec_name(codec) << " row " << r;
    }
  }
}

}  // namespace
}  // namespace akv
