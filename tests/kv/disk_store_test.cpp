// The disk tier without a model: containers, the store's write/scan/load cycle and its
// refusals (another model, damage, version), manifests, erasing. Codecs: block_codec_test.
#include "kv/disk_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>

#include "base/error.h"
#include "kv/disk_format.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using test::block_content;
using test::ScratchDir;

const BlockShape kShape{.n_rows = 2 * 2 * 4, .row_width = 16, .dtype = DType::F32};

DiskStoreOptions options(const std::string& dir, Hash128 fp = {1, 2},
                         SpillCodec codec = SpillCodec::Native) {
  DiskStoreOptions o;
  o.dir = dir;
  o.fingerprint = fp;
  o.codec = codec;
  o.shape = kShape;
  o.block_size = 4;
  return o;
}

TEST(BlockKeyer, ChainsDependOnSecretNamespaceFingerprintAndTokens) {
  const KeySecret s1 = random_key_secret(), s2 = random_key_secret();
  const BlockKeyer a(s1, {1, 1}), b(s2, {1, 1}), c(s1, {1, 2});
  const std::vector<std::int32_t> t{1, 2, 3, 4}, u{1, 2, 3, 5};
  EXPECT_EQ(a.next(a.root("x"), t), a.next(a.root("x"), t));
  EXPECT_NE(a.next(a.root("x"), t), a.next(a.root("y"), t));
  EXPECT_NE(a.next(a.root("x"), t), a.next(a.root("x"), u));
  EXPECT_NE(a.next(a.root("x"), t), b.next(b.root("x"), t));
  EXPECT_NE(a.next(a.root("x"), t), c.next(c.root("x"), t));
  EXPECT_EQ(Hash128::from_hex(a.root("x").hex()), a.root("x"));
}

TEST(DiskStore, BlocksSurviveReopenAndLoadExactly) {
  ScratchDir dir;
  Hash128 k1, k2, root;
  std::vector<std::int32_t> t1{1, 2, 3, 4}, t2{5, 6, 7, 8};
  {
    auto store = DiskStore::open_or_throw(options(dir.path));
    const BlockKeyer& keys = store->keyer();
    root = keys.root("");
    k1 = keys.next(root, t1);
    k2 = keys.next(k1, t2);
    EXPECT_TRUE(store->put(k1, root, keys.tokens_hash(t1), block_content(kShape, 1)));
    EXPECT_TRUE(store->put(k2, k1, keys.tokens_hash(t2), block_content(kShape, 2)));
    EXPECT_FALSE(store->put(k1, root, keys.tokens_hash(t1), block_content(kShape, 1)));  // once
    store->flush();
    EXPECT_EQ(store->stats().n_written, 2);
  }
  auto store = DiskStore::open_or_throw(options(dir.path));
  const BlockKeyer& keys = store->keyer();
  EXPECT_EQ(keys.next(keys.root(""), t1), k1) << "the secret persists";
  EXPECT_EQ(store->stats().n_blocks, 2);
  std::vector<std::byte> raw(kShape.raw_bytes());
  ASSERT_TRUE(store->load(k2, k1, keys.tokens_hash(t2), raw));
  EXPECT_EQ(raw, block_content(kShape, 2));
  EXPECT_FALSE(store->load(k2, k1, keys.tokens_hash(t1), raw)) << "tokens hash must match";
  EXPECT_FALSE(store->load(k2, root, keys.tokens_hash(t2), raw)) << "parent must match";
}

// A lent block (a host-tier slot) is written from its bytes as they are, in the store's codec
// or encoded from the raw form, and released exactly once: written, a duplicate, or dropped.
TEST(DiskStore, LentBlocksAreWrittenFromTheLendersBytesAndReleasedOnce) {
  for (const SpillCodec codec : {SpillCodec::Native, SpillCodec::Int8}) {
    ScratchDir dir;
    auto store = DiskStore::open_or_throw(options(dir.path, {1, 2}, codec));
    const BlockKeyer& keys = store->keyer();
    const std::vector<std::int32_t> t{1, 2, 3, 4};
    const Hash128 root = keys.root(""), k = keys.next(root, t);
    const std::vector<std::byte> raw = block_content(kShape, 3);
    // Released on the IO thread once written, or on an encode worker once encoded (int8).
    std::atomic<int> released{0}, released_duplicate{0};
    const auto lent = [&](std::atomic<int>& counter) {
      return LentBlock{.bytes = raw, .codec = SpillCodec::Native, .release = [&counter] { ++counter; }};
    };
    EXPECT_TRUE(store->put_lent(k, root, keys.tokens_hash(t), lent(released)));
    EXPECT_FALSE(store->put_lent(k, root, keys.tokens_hash(t), lent(released_duplicate))) << "queued already";
    EXPECT_EQ(released_duplicate, 1) << "the duplicate is released at once";
    store->flush();
    EXPECT_EQ(released, 1);
    std::vector<std::byte> back(kShape.raw_bytes());
    ASSERT_TRUE(store->load(k, root, keys.tokens_hash(t), back));
    std::vector<std::byte> want = raw;  // what the codec keeps of it
    if (codec != SpillCodec::Native) {
      std::vector<std::byte> enc(encoded_bytes(codec, kShape));
      encode_block(codec, kShape, raw, enc);
      decode_block(codec, kShape, enc, want);
    }
    EXPECT_EQ(back, want);
    store->limit_lent_blocks(0);
    const Hash128 k2 = keys.next(k, t);
    EXPECT_EQ(store->n_lent_room(), 0u);
    EXPECT_FALSE(store->put_lent(k2, k, keys.tokens_hash(t), lent(released))) << "no room: dropped";
    EXPECT_EQ(released, 2);
    EXPECT_EQ(store->stats().n_dropped_queue_full, 1);
  }
}

TEST(DiskStore, SpillBuffersAreRecycledOnceWritten) {
  ScratchDir dir;
  auto store = DiskStore::open_or_throw(options(dir.path));
  std::vector<std::byte> raw = store->take_raw_buffer();  // none spare yet: a new one
  ASSERT_EQ(raw.size(), kShape.raw_bytes());
  const std::vector<std::byte> content = block_content(kShape, 3);
  std::copy(content.begin(), content.end(), raw.begin());
  const std::byte* memory = raw.data();
  ASSERT_TRUE(store->put({9, 9}, {0, 1}, {0, 2}, std::move(raw)));
  store->flush();
  const std::vector<std::byte> again = store->take_raw_buffer();
  EXPECT_EQ(again.data(), memory);  // the written block's buffer, handed out again
  EXPECT_EQ(again.size(), kShape.raw_bytes());
  std::vector<std::byte> out(kShape.raw_bytes());
  ASSERT_TRUE(store->load({9, 9}, {0, 1}, {0, 2}, out));
  EXPECT_EQ(out, content);
}

TEST(DiskStore, AnotherModelsBlocksAreCountedAndNeverUsed) {
  ScratchDir dir;
  Hash128 key;
  {
    auto store = DiskStore::open_or_throw(options(dir.path, {9, 9}));
    key = store->keyer().next(store->keyer().root(""), std::vector<std::int32_t>{1, 2, 3, 4});
    store->put(key, {}, {}, block_content(kShape, 3));
    store->flush();
  }
  auto store = DiskStore::open_or_throw(options(dir.path, {9, 10}));
  EXPECT_EQ(store->stats().n_blocks, 0);
  EXPECT_EQ(store->stats().rejected_foreign, 1);
  EXPECT_FALSE(store->on_disk(key));
  store.reset();
  auto codec = DiskStore::open_or_throw(options(dir.path, {9, 9}, SpillCodec::Int8));
  EXPECT_EQ(codec->stats().n_blocks, 0) << "a codec change is a layout change";
}

class Damage : public ::testing::TestWithParam<int> {};

TEST_P(Damage, DamagedBlockIsRejectedAndRemoved) {
  ScratchDir dir;
  Hash128 key, th;
  std::vector<std::int32_t> t{1, 2, 3, 4};
  {
    auto store = DiskStore::open_or_throw(options(dir.path));
    key = store->keyer().next(store->keyer().root(""), t);
    th = store->keyer().tokens_hash(t);
    store->put(key, store->keyer().root(""), th, block_content(kShape, 4));
    store->flush();
  }
  const std::string path = dir.path + "/blocks/" + key.hex() + ".kvb";
  const auto size = std::filesystem::file_size(path);
  if (GetParam() == 0) {  // flip a payload byte: caught on load
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 5));
    char c;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(size - 5));
    c = static_cast<char>(c ^ 0x40);
    f.write(&c, 1);
  } else if (GetParam() == 1) {  // truncate: caught at start-up
    std::filesystem::resize_file(path, size - 100);
  } else {  // flip a header byte
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.write("x", 1);
  }
  auto store = DiskStore::open_or_throw(options(dir.path));
  std::vector<std::byte> raw(kShape.raw_bytes());
  EXPECT_FALSE(store->load(key, store->keyer().root(""), th, raw));
  store->flush();
  EXPECT_EQ(store->stats().rejected_corrupt, 1);
  EXPECT_FALSE(std::filesystem::exists(path));
}

INSTANTIATE_TEST_SUITE_P(Kinds, Damage, ::testing::Values(0, 1, 2));

TEST(DiskStore, ManifestsRoundTripAndEraseKeepsSharedBlocks) {
  ScratchDir dir;
  AgentRecord a;
  a.tenant = "t1";
  a.agent = "alice";
  a.n_tokens = 9;
  a.hits = 2;
  a.restores = 1;
  a.last_use_ms = 5;
  a.pinned = true;
  std::vector<std::int32_t> t{1, 2, 3, 4}, u{5, 6, 7, 8};
  {
    auto store = DiskStore::open_or_throw(options(dir.path));
    const BlockKeyer& k = store->keyer();
    const Hash128 shared = k.next(k.root("t1"), t), own = k.next(shared, u);
    store->put(shared, {}, {}, block_content(kShape, 1));
    store->put(own, {}, {}, block_content(kShape, 2));
    a.chain = {shared, own};
    store->put_manifest(a);
    AgentRecord b;
    b.tenant = "t1";
    b.agent = "bob";
    b.chain = {shared};
    store->put_manifest(b);
    store->flush();
  }
  auto store = DiskStore::open_or_throw(options(dir.path));
  const auto loaded = store->take_loaded_manifests();
  ASSERT_EQ(loaded.size(), 2u);
  const AgentRecord& got = loaded[0].agent == "alice" ? loaded[0] : loaded[1];
  EXPECT_EQ(got.chain, a.chain);
  EXPECT_TRUE(got.pinned);
  EXPECT_EQ(got.hits, 2u);
  AgentIndex index;
  for (const AgentRecord& r : loaded) index.load(r);
  const auto unique = index.erase("t1", "alice");
  ASSERT_TRUE(unique);
  ASSERT_EQ(unique->size(), 1u);
  EXPECT_EQ((*unique)[0], a.chain[1]);
  store->erase("t1", "alice", *unique);
  store->flush();
  EXPECT_TRUE(store->on_disk(a.chain[0]));
  EXPECT_FALSE(store->on_disk(a.chain[1]));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path + "/agents"), {}), 1);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path + "/blocks"), {}), 1);
}

TEST(DiskStore, SecondOpenOfALockedDirectoryFails) {
  ScratchDir dir;
  auto store = DiskStore::open_or_throw(options(dir.path));
  EXPECT_THROW(DiskStore::open_or_throw(options(dir.path)), Error);
}

TEST(DiskStore, WriteErrorPausesSpillingAndServingContinues) {
  ScratchDir dir;
  auto o = options(dir.path);
  o.pause_after_error_ms = 60000;
  auto store = DiskStore::open_or_throw(o);
  // The store writes through a handle on its folder: with the folder gone, every write fails
  // (as on a full or broken disk).
  std::filesystem::remove_all(dir.path + "/blocks");
  store->put({1, 1}, {}, {}, block_content(kShape, 1));
  store->flush();
  EXPECT_EQ(store->stats().n_write_errors, 1);
  EXPECT_TRUE(store->stats().paused);
  EXPECT_FALSE(store->put({2, 2}, {}, {}, block_content(kShape, 2))) << "dropped while paused";
  EXPECT_FALSE(store->on_disk({1, 1}));
}

}  // namespace
}  // namespace akv
