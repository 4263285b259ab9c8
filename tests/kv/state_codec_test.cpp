// State codecs (kv/state_codec.h) and state blocks on disk under them: exact is bit-exact, bf16
// rounds each value to nearest even in half the bytes; a block's header names its codec, so a
// store holding both is read whatever codec the writer uses now (a restart under another
// --kv-state-codec), and a block of a codec this build does not know is refused with a message
// naming its file, counted and left in place.
#include "kv/state_codec.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "kv/disk_format.h"
#include "kv/disk_store.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using test::ScratchDir;

std::vector<float> random_state(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(StateCodec, NamesIdsAndSizes) {
  EXPECT_EQ(find_state_codec("exact"), StateCodec::Exact);
  EXPECT_EQ(find_state_codec("bf16"), StateCodec::Bf16);
  EXPECT_FALSE(find_state_codec("native").has_value());
  EXPECT_FALSE(find_state_codec("int8").has_value());
  for (StateCodec c : {StateCodec::Exact, StateCodec::Bf16}) {
    EXPECT_EQ(find_state_codec(state_codec_name(c)), c);
    EXPECT_EQ(state_codec_from_id(state_codec_id(c)), c);
  }
  EXPECT_EQ(state_codec_id(StateCodec::Exact), 0x54415453u) << "\"STAT\": state blocks written before codecs";
  EXPECT_NE(state_codec_id(StateCodec::Exact), state_codec_id(StateCodec::Bf16));
  EXPECT_FALSE(state_codec_from_id(0).has_value());
  EXPECT_EQ(encoded_state_bytes(StateCodec::Exact, 1000), 4000u);
  EXPECT_EQ(encoded_state_bytes(StateCodec::Bf16, 1000), 2000u);
}

TEST(StateCodec, ExactIsBitExactAndBf16RoundsToNearestEven) {
  std::vector<float> v = random_state(4096, 1);
  v[0] = std::numeric_limits<float>::infinity();
  v[1] = -0.0f;
  v[2] = std::numeric_limits<float>::quiet_NaN();
  v[3] = 1.0f + 0x1.0p-8f;            // halfway between two bf16 values: to the even one, 1.0
  v[4] = 1.0f + 3 * 0x1.0p-8f;        // halfway: to the even one, 1 + 2^-6
  v[5] = 1e-40f;                       // subnormal
  std::vector<float> back(v.size());
  decode_state(StateCodec::Exact, encode_state(StateCodec::Exact, v), back);
  EXPECT_EQ(std::memcmp(back.data(), v.data(), v.size() * sizeof(float)), 0);

  const std::vector<std::byte> half = encode_state(StateCodec::Bf16, v);
  ASSERT_EQ(half.size(), v.size() * 2);
  decode_state(StateCodec::Bf16, half, back);
  EXPECT_EQ(back[0], v[0]);
  EXPECT_TRUE(std::signbit(back[1]) && back[1] == 0.0f);
  EXPECT_TRUE(std::isnan(back[2]));
  EXPECT_EQ(back[3], 1.0f);
  EXPECT_EQ(back[4], 1.0f + 0x1.0p-6f);
  double worst = 0;
  for (std::size_t i = 6; i < v.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(back[i]) - v[i]) / std::abs(static_cast<double>(v[i])));
    std::uint32_t bits = 0;
    std::memcpy(&bits, &back[i], 4);
    ASSERT_EQ(bits & 0xffffu, 0u) << "a bf16 value";
  }
  EXPECT_LE(worst, 0x1.0p-8) << "half a unit in the last of 8 significant bits";
  EXPECT_GT(worst, 0x1.0p-9) << "the rounding is there";
}

// What a state block file needs: a store, a KV block and the prefix hash of its tokens.
struct StateStore {
  static constexpr std::size_t kFloats = 2000;
  explicit StateStore(const std::string& dir) : store(DiskStore::open_or_throw(options(dir))) {}
  static DiskStoreOptions options(const std::string& dir) {
    DiskStoreOptions o;
    o.dir = dir;
    o.fingerprint = {7, 8};
    o.shape = {.n_rows = 8, .row_width = 16, .dtype = DType::F32};
    o.block_size = 4;
    return o;
  }
  struct Block {
    Hash128 kv, state, prefix;
  };
  Block block(std::int32_t first_token) const {
    const BlockKeyer& keys = store->keyer();
    const std::vector<std::int32_t> t{first_token, 2, 3, 4};
    const Hash128 kv = keys.next(keys.root(""), t);
    return {.kv = kv, .state = keys.state_key(kv), .prefix = keys.tokens_hash(t)};
  }
  std::string path(const Block& b, const std::string& dir) const { return dir + "/blocks/" + b.state.hex() + ".kvb"; }
  std::unique_ptr<DiskStore> store;
};

// A store written with bf16 and exact state blocks, reopened (as after a restart under either
// flag): each loads from the codec its header names.
TEST(StateCodec, AStoreHoldsBlocksOfEitherCodecAndReadsBothAfterAReopen) {
  ScratchDir dir;
  const std::vector<float> a = random_state(StateStore::kFloats, 2), b = random_state(StateStore::kFloats, 3);
  StateStore::Block ba, bb;
  {
    StateStore s(dir.path);
    ba = s.block(1);
    bb = s.block(9);
    ASSERT_TRUE(s.store->put_state(ba.state, ba.kv, ba.prefix, encode_state(StateCodec::Bf16, a), StateCodec::Bf16));
    ASSERT_TRUE(s.store->put_state(bb.state, bb.kv, bb.prefix, encode_state(StateCodec::Exact, b), StateCodec::Exact));
    s.store->flush();
  }
  StateStore s(dir.path);
  EXPECT_EQ(s.store->stats().n_states, 2);
  EXPECT_EQ(std::filesystem::file_size(s.path(ba, dir.path)), kBlockHeaderBytes + 2 * StateStore::kFloats);
  EXPECT_EQ(std::filesystem::file_size(s.path(bb, dir.path)), kBlockHeaderBytes + 4 * StateStore::kFloats);
  std::vector<float> out(StateStore::kFloats);
  ASSERT_TRUE(s.store->load_state(ba.state, ba.kv, ba.prefix, out));
  std::vector<float> want(a.size());
  decode_state(StateCodec::Bf16, encode_state(StateCodec::Bf16, a), want);
  EXPECT_EQ(out, want) << "the bf16 values, decoded";
  ASSERT_TRUE(s.store->load_state(bb.state, bb.kv, bb.prefix, out));
  EXPECT_EQ(out, b) << "bit-exact";
  // A state of another size is refused whatever the codec (damage: removed).
  std::vector<float> other(StateStore::kFloats / 2);
  EXPECT_FALSE(s.store->load_state(ba.state, ba.kv, ba.prefix, other));
  EXPECT_EQ(s.store->stats().rejected_corrupt, 1);
}

// The codec field patched to an id nobody knows (the header checksum made good, as a newer
// writer would): at start-up and on load, not used, counted with the other format versions,
// logged naming the file, left on disk.
TEST(StateCodec, AnUnknownCodecIdIsRefusedAndLeftInPlace) {
  ScratchDir dir;
  StateStore::Block blk;
  std::string path;
  {
    StateStore s(dir.path);
    blk = s.block(1);
    path = s.path(blk, dir.path);
    ASSERT_TRUE(s.store->put_state(blk.state, blk.kv, blk.prefix, encode_state(StateCodec::Bf16, random_state(StateStore::kFloats, 4)),
                                   StateCodec::Bf16));
    s.store->flush();
  }
  std::vector<char> file(std::filesystem::file_size(path));
  {
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in.read(file.data(), static_cast<std::streamsize>(file.size())));
  }
  BlockHeader h;
  ASSERT_EQ(parse_block_header(std::as_bytes(std::span(file)), {7, 8}, h), FileCheck::Ok);
  EXPECT_EQ(h.state_codec, StateCodec::Bf16);
  const std::uint32_t unknown = 0x39425453;  // "STB9"
  std::memcpy(file.data() + 80, &unknown, 4);  // the codec field
  const std::uint64_t sum = XXH3_64bits(file.data(), 104);
  std::memcpy(file.data() + 104, &sum, 8);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
  }
  ASSERT_EQ(parse_block_header(std::as_bytes(std::span(file)), {7, 8}, h), FileCheck::UnknownCodec);
  EXPECT_EQ(h.codec_id, unknown);

  testing::internal::CaptureStderr();
  StateStore s(dir.path);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find(blk.state.hex() + ".kvb"), std::string::npos) << "names the file: " << log;
  EXPECT_NE(log.find("state codec"), std::string::npos) << log;
  EXPECT_EQ(s.store->stats().rejected_version, 1);
  EXPECT_EQ(s.store->stats().rejected_corrupt, 0) << "not damage";
  EXPECT_EQ(s.store->stats().n_states, 0);
  std::vector<float> out(StateStore::kFloats);
  EXPECT_FALSE(s.store->load_state(blk.state, blk.kv, blk.prefix, out));
  s.store->flush();
  EXPECT_TRUE(std::filesystem::exists(path)) << "a newer writer's file is left alone";
}

}  // namespace
}  // namespace akv
