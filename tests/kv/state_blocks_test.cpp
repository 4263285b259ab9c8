// State blocks in the disk tier (hybrid models' recurrent-state snapshots): their own key domain
// and header version, exact bytes across a reopen, refusal of damage and of the wrong kind, the
// manifest that names them, and retention and erasing that treat them like their agent's blocks.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <algorithm>

#include "kv/disk_format.h"
#include "kv/disk_store.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using test::block_content;
using test::ScratchDir;

const BlockShape kShape{.n_rows = 2 * 2 * 4, .row_width = 16, .dtype = DType::F32};
constexpr std::size_t kStateFloats = 1000;
constexpr std::size_t kStateBytes = kStateFloats * sizeof(float);  // not a KV block's size

DiskStoreOptions options(const std::string& dir) {
  DiskStoreOptions o;
  o.dir = dir;
  o.fingerprint = {1, 2};
  o.shape = kShape;
  o.block_size = 4;
  return o;
}

std::vector<std::byte> state_content(int seed) {
  std::vector<std::byte> b(kStateBytes);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>((i * 31 + seed * 7) & 0xff);
  return b;
}

// One KV block of a two-block chain and the state block at its end.
struct Chain {
  explicit Chain(const BlockKeyer& keys, std::string_view ns = "")
      : root(keys.root(ns)),
        k1(keys.next(root, t1)),
        state(keys.state_key(k1)),
        prefix(keys.tokens_hash(t1)) {}
  std::vector<std::int32_t> t1{1, 2, 3, 4};
  Hash128 root, k1, state, prefix;
};

TEST(StateBlocks, KeysHaveTheirOwnDomainPerTenant) {
  const BlockKeyer keys(random_key_secret(), {1, 1});
  const Chain a(keys, "a"), b(keys, "b");
  EXPECT_NE(a.state, a.k1);
  EXPECT_NE(a.state, keys.next(a.k1, a.t1));
  EXPECT_NE(a.state, b.state) << "another tenant's prefix has another state key";
  EXPECT_EQ(a.state, keys.state_key(a.k1));
}

TEST(StateBlocks, SurviveReopenExactlyAndNeverLoadAsKv) {
  ScratchDir dir;
  Hash128 state, k1, prefix;
  {
    auto store = DiskStore::open_or_throw(options(dir.path));
    const Chain c(store->keyer());
    state = c.state;
    k1 = c.k1;
    prefix = c.prefix;
    EXPECT_TRUE(store->put(c.k1, c.root, store->keyer().tokens_hash(c.t1), block_content(kShape, 1)));
    EXPECT_TRUE(store->put_state(c.state, c.k1, c.prefix, state_content(3)));
    EXPECT_FALSE(store->put_state(c.state, c.k1, c.prefix, state_content(3))) << "once";
    store->flush();
  }
  auto store = DiskStore::open_or_throw(options(dir.path));
  const DiskStoreStats s = store->stats();
  EXPECT_EQ(s.n_blocks, 2);
  EXPECT_EQ(s.n_states, 1);
  EXPECT_EQ(s.rejected_corrupt, 0);
  std::vector<float> out(kStateFloats);
  ASSERT_TRUE(store->load_state(state, k1, prefix, out));
  EXPECT_TRUE(std::ranges::equal(std::as_bytes(std::span(out)), state_content(3)));
  // A file under a key whose check fails is damage (the key is derived from what the check
  // verifies): refused, counted and removed; each refusal below gets a fresh copy.
  const auto refused = [&](const std::function<bool()>& load) {
    store->put_state(state, k1, prefix, state_content(3));
    store->flush();
    EXPECT_TRUE(store->on_disk(state));
    const std::int64_t before = store->stats().rejected_corrupt;
    const bool loaded = load();
    EXPECT_EQ(store->stats().rejected_corrupt, before + 1);
    return !loaded;
  };
  EXPECT_TRUE(refused([&] { return store->load_state(state, k1, Hash128{9, 9}, out); }))
      << "the prefix hash must match";
  EXPECT_TRUE(refused([&] { return store->load_state(state, Hash128{9, 9}, prefix, out); }))
      << "the parent must match";
  std::vector<float> small(kStateFloats - 1);
  EXPECT_TRUE(refused([&] { return store->load_state(state, k1, prefix, small); })) << "the size must match";
  std::vector<std::byte> raw(kShape.raw_bytes());
  EXPECT_TRUE(refused([&] { return store->load(state, k1, prefix, raw); })) << "a state block is not a KV block";
  EXPECT_FALSE(store->load_state(k1, Hash128{}, prefix, out)) << "a KV block is not a state block";
}

TEST(StateBlocks, HeaderIsVersionTwoAndADamagedOneIsRemoved) {
  ScratchDir dir;
  auto store = DiskStore::open_or_throw(options(dir.path));
  const Chain c(store->keyer());
  ASSERT_TRUE(store->put_state(c.state, c.k1, c.prefix, state_content(5)));
  store->flush();
  const std::string path = dir.path + "/blocks/" + c.state.hex() + ".kvb";
  std::vector<char> file(kBlockHeaderBytes + kStateBytes);
  {
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in.read(file.data(), static_cast<std::streamsize>(file.size())));
  }
  BlockHeader h;
  ASSERT_EQ(parse_block_header(std::as_bytes(std::span(file)), {1, 2}, h), FileCheck::Ok);
  EXPECT_EQ(h.kind, BlockKind::State);
  std::uint32_t version = 0;
  std::memcpy(&version, file.data() + 8, 4);
  EXPECT_EQ(version, kStateFormatVersion) << "older readers must leave it alone";
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(kBlockHeaderBytes + 100);
    f.put('\x5a' ^ static_cast<char>(state_content(5)[100]));
  }
  std::vector<float> out(kStateFloats);
  EXPECT_FALSE(store->load_state(c.state, c.k1, c.prefix, out));
  EXPECT_EQ(store->stats().rejected_corrupt, 1);
  store->flush();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(store->stats().n_states, 0);
}

TEST(StateBlocks, ManifestsNameThemAndStayVersionOneWithout) {
  AgentRecord r{.tenant = "t", .agent = "a", .chain = {{1, 2}, {3, 4}}, .n_tokens = 8};
  const std::vector<std::byte> v1 = encode_manifest({7, 7}, r);
  std::uint32_t version = 0;
  std::memcpy(&version, v1.data() + 8, 4);
  EXPECT_EQ(version, kDiskFormatVersion);
  r.states = {{5, 6}};
  const std::vector<std::byte> v2 = encode_manifest({7, 7}, r);
  std::memcpy(&version, v2.data() + 8, 4);
  EXPECT_EQ(version, kStateFormatVersion);
  AgentRecord back;
  ASSERT_EQ(parse_manifest(v2, {7, 7}, back), FileCheck::Ok);
  EXPECT_EQ(back.chain, r.chain);
  EXPECT_EQ(back.states, r.states);
  ASSERT_EQ(parse_manifest(v1, {7, 7}, back), FileCheck::Ok);
  EXPECT_TRUE(back.states.empty());
}

// Leaf-first retention: a state block names its KV block as parent, so it goes before it; a
// pinned agent's manifest keeps its state; erasing the agent deletes it.
TEST(StateBlocks, RetentionAndEraseTreatThemLikeTheirAgentsBlocks) {
  ScratchDir dir;
  DiskStoreOptions o = options(dir.path);
  const std::int64_t block_file = static_cast<std::int64_t>(kBlockHeaderBytes + kShape.raw_bytes());
  const std::int64_t state_file = static_cast<std::int64_t>(kBlockHeaderBytes + kStateBytes);
  o.max_bytes = block_file + state_file + block_file / 2;  // a second KV block pushes one file out
  o.low_water = 1.0;
  auto store = DiskStore::open_or_throw(o);
  const BlockKeyer& keys = store->keyer();
  const Chain c(keys);
  ASSERT_TRUE(store->put(c.k1, c.root, keys.tokens_hash(c.t1), block_content(kShape, 1)));
  ASSERT_TRUE(store->put_state(c.state, c.k1, c.prefix, state_content(1)));
  store->flush();
  const std::vector<std::int32_t> other{9, 9, 9, 9};
  const Hash128 k_other = keys.next(c.root, other);
  ASSERT_TRUE(store->put(k_other, c.root, keys.tokens_hash(other), block_content(kShape, 2)));
  store->flush();
  EXPECT_FALSE(store->on_disk(c.state)) << "the leaf (the state) goes first";
  EXPECT_TRUE(store->on_disk(c.k1)) << "never before a block naming it as parent";

  // Pinned: the manifest names the state, so pressure takes the unnamed KV block instead.
  store->put_manifest({.tenant = "", .agent = "a", .chain = {c.k1}, .states = {c.state}, .pinned = true});
  ASSERT_TRUE(store->put_state(c.state, c.k1, c.prefix, state_content(1)));
  store->flush();
  EXPECT_FALSE(store->on_disk(k_other));
  EXPECT_TRUE(store->on_disk(c.state));
  EXPECT_TRUE(store->on_disk(c.k1));
  store->erase("", "a", {c.k1, c.state});
  store->flush();
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/blocks/" + c.state.hex() + ".kvb"));
}

}  // namespace
}  // namespace akv
