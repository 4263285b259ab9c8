// The remote tier against a real redis-server started by the test: the URL, the fleet's shared
// secret, write-behind through the disk tier and reads on another replica's miss, refusals
// (another model, damage, oversize), Redis going away and coming back, erasing, the budget;
// hybrid models' state blocks beside the KV blocks (their own names, tenants, damage, budget).
#include "kv/remote_store.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <thread>
#include <tuple>

#include "base/error.h"
#include "kv/disk_format.h"
#include "kv/disk_store.h"
#include "kv/store_dir.h"
#include "redis_test_server.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using test::block_content;
using test::RedisTestServer;
using test::ScratchDir;

const BlockShape kShape{.n_rows = 2 * 2 * 4, .row_width = 16, .dtype = DType::F32};
const std::size_t kValueBytes = kBlockHeaderBytes + kShape.raw_bytes();
constexpr std::size_t kStateBytes = 1000 * sizeof(float);  // not a KV block's size
const std::size_t kStateValueBytes = kBlockHeaderBytes + kStateBytes;

RemoteStoreOptions remote_options(const RedisTestServer& redis, Hash128 fp = {1, 2}) {
  RemoteStoreOptions o;
  o.url = redis.url();
  o.fingerprint = fp;
  o.value_bytes = kValueBytes;
  o.state_value_bytes = kStateValueBytes;
  o.timeout_ms = 500;
  o.reconnect_ms = 100;
  return o;
}

DiskStoreOptions disk_options(const std::string& dir, RemoteStore* remote, Hash128 fp = {1, 2}) {
  DiskStoreOptions o;
  o.dir = dir;
  o.fingerprint = fp;
  o.shape = kShape;
  o.block_size = 4;
  o.remote = remote;
  return o;
}

std::chrono::steady_clock::time_point in_s(int s) {
  return std::chrono::steady_clock::now() + std::chrono::seconds(s);
}

// Raw Redis access for the checks.
RedisReply command(const RedisTestServer& redis, std::initializer_list<std::string_view> args) {
  std::string error;
  auto conn = RedisConnection::connect_or_null(redis.url(), 1000, error);
  EXPECT_NE(conn, nullptr) << error;
  conn->append(args);
  return conn->next();
}

TEST(RedisUrl, Parses) {
  const RedisUrl a = parse_redis_url("redis://10.0.0.5:6380/3", "--kv-remote");
  EXPECT_EQ(a.host, "10.0.0.5");
  EXPECT_EQ(a.port, 6380);
  EXPECT_EQ(a.db, 3);
  EXPECT_TRUE(a.password.empty());
  const RedisUrl b = parse_redis_url("redis://app:s3cret@cache", "--kv-remote");
  EXPECT_EQ(b.user, "app");
  EXPECT_EQ(b.password, "s3cret");
  EXPECT_EQ(b.port, 6379);
  EXPECT_EQ(parse_redis_url("redis://:pw@[::1]:7000/", "f").host, "::1");
  EXPECT_EQ(parse_redis_url("redis://:pw@[::1]:7000/", "f").port, 7000);
  EXPECT_THROW(parse_redis_url("http://x:1", "f"), Error);
  EXPECT_THROW(parse_redis_url("redis://x:99999", "f"), Error);
  EXPECT_THROW(parse_redis_url("redis://x:1/db", "f"), Error);
  EXPECT_THROW(parse_redis_url("rediss://x:1", "f"), Error);
}

// rediss:// is refused with a message that says why and what to do (this hiredis has no TLS).
TEST(RedisUrl, TlsIsRefusedWithTheReason) {
  try {
    parse_redis_url("rediss://cache:6380", "--kv-remote");
    FAIL() << "rediss:// accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("--kv-remote: TLS (rediss://) is not supported"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("deploy/redis-tls-proxy.cfg"), std::string::npos) << e.what();
  }
}

// --kv-remote-password-file: the first line, without its line end; unreadable or empty: an
// error naming the flag and the file.
TEST(RedisUrl, PasswordFileGivesItsFirstLine) {
  ScratchDir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.path + "/" + name) << text;
    return dir.path + "/" + name;
  };
  EXPECT_EQ(load_redis_password(write("a", "s3cret\n"), "--pw"), "s3cret");
  EXPECT_EQ(load_redis_password(write("b", "s3 cret\r\nsecond line\n"), "--pw"), "s3 cret");
  EXPECT_EQ(load_redis_password(write("c", "no-newline"), "--pw"), "no-newline");
  EXPECT_THROW(load_redis_password(write("d", "\nlater\n"), "--pw"), Error);
  EXPECT_THROW(load_redis_password(write("e", ""), "--pw"), Error);
  try {
    load_redis_password(dir.path + "/missing", "--kv-remote-password-file");
    FAIL() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-remote-password-file: cannot read " + dir.path + "/missing"),
              std::string::npos)
        << e.what();
  }
}

std::string_view text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// A bulk reply of exactly the expected size is read from the socket straight into the caller's
// two spans (header, then payload); any other reply comes back whole, and the replies pipelined
// after either kind stay intact, also when they arrive with a small value's first line.
TEST(RedisConnection, NextBulkIntoFillsTheCallersSpans) {
  RedisTestServer redis;
  std::string error;
  auto conn = RedisConnection::connect_or_null(redis.url(), 1000, error);
  ASSERT_NE(conn, nullptr) << error;
  std::string big(300000, 'x');
  big[5] = 'h';
  big[123456] = 'y';
  conn->append({"SET", "big", big});
  conn->append({"SET", "small", "0123456789"});
  ASSERT_TRUE(reply_is_ok(conn->next().get()));
  ASSERT_TRUE(reply_is_ok(conn->next().get()));
  std::vector<std::byte> head(128), tail(big.size() - 128), small_head(4), small_tail(6);
  using BulkRead = RedisConnection::BulkRead;
  RedisReply other;

  conn->append({"GET", "big"});
  conn->append({"INCR", "counter"});
  ASSERT_EQ(conn->next_bulk_into(head, tail, other), BulkRead::Filled);
  EXPECT_EQ(other, nullptr);
  EXPECT_EQ(std::string(text(head)) + std::string(text(tail)), big);
  EXPECT_EQ(reply_integer(conn->next().get()), 1) << "the reply after it";

  // A value of another size, a missing one, an error, an array: whole in `other`.
  conn->append({"GET", "small"});
  conn->append({"GETRANGE", "nothing", "0", "10"});
  conn->append({"INCR", "big"});
  conn->append({"MGET", "big", "nothing"});
  EXPECT_EQ(conn->next_bulk_into(head, tail, other), BulkRead::Other);
  EXPECT_EQ(reply_string(other.get()), "0123456789");
  EXPECT_EQ(conn->next_bulk_into(head, tail, other), BulkRead::Other);
  EXPECT_EQ(other->type, REDIS_REPLY_STRING);
  EXPECT_TRUE(reply_string(other.get()).empty()) << "a missing key's range is empty";
  EXPECT_EQ(conn->next_bulk_into(head, tail, other), BulkRead::Other);
  EXPECT_TRUE(reply_is_error(other.get()));
  EXPECT_EQ(conn->next_bulk_into(head, tail, other), BulkRead::Other);
  ASSERT_EQ(other->type, REDIS_REPLY_ARRAY);
  EXPECT_EQ(reply_string(other->element[0]), big);

  // Small values: the first read takes this reply and the ones after it (fed to hiredis, which
  // then serves the next calls).
  conn->append({"GET", "small"});
  conn->append({"GET", "small"});
  conn->append({"INCR", "counter"});
  std::fill(small_head.begin(), small_head.end(), std::byte{0});
  ASSERT_EQ(conn->next_bulk_into(small_head, small_tail, other), BulkRead::Filled);
  EXPECT_EQ(std::string(text(small_head)) + std::string(text(small_tail)), "0123456789");
  std::fill(small_tail.begin(), small_tail.end(), std::byte{0});
  ASSERT_EQ(conn->next_bulk_into(small_head, small_tail, other), BulkRead::Filled);
  EXPECT_EQ(std::string(text(small_head)) + std::string(text(small_tail)), "0123456789");
  EXPECT_EQ(reply_integer(conn->next().get()), 2);

  // The server gone: Failed, and the connection is broken.
  redis.stop();
  conn->append({"GET", "big"});
  EXPECT_EQ(conn->next_bulk_into(head, tail, other), BulkRead::Failed);
  EXPECT_TRUE(conn->broken());
  EXPECT_FALSE(conn->error().empty());
}

TEST(RemoteStore, PasswordAndDatabaseAreUsed) {
  RedisTestServer redis;
  command(redis, {"CONFIG", "SET", "requirepass", "pw"});
  RemoteStoreOptions o = remote_options(redis);
  EXPECT_THROW(RemoteStore::open_or_throw(o), Error) << "no password: refused";
  o.url.password = "pw";
  o.url.db = 2;
  auto remote = RemoteStore::open_or_throw(o);
  std::string error;
  RedisUrl db2 = o.url;
  auto conn = RedisConnection::connect_or_null(db2, 1000, error);
  ASSERT_NE(conn, nullptr) << error;
  conn->append({"EXISTS", "akv:secret"});
  EXPECT_EQ(reply_integer(conn->next().get()), 1) << "the secret is in database 2";
  RedisUrl db0 = o.url;
  db0.db = 0;
  conn = RedisConnection::connect_or_null(db0, 1000, error);
  conn->append({"EXISTS", "akv:secret"});
  EXPECT_EQ(reply_integer(conn->next().get()), 0);
}

TEST(RemoteStore, ReplicasShareOneSecretAndTheDiskAdoptsIt) {
  RedisTestServer redis;
  ScratchDir dir;
  {  // A store that existed before the fleet: its own secret and a block.
    DiskStoreOptions o = disk_options(dir.path, nullptr);
    auto disk = DiskStore::open_or_throw(o);
    disk->put({5, 5}, {}, {}, block_content(kShape, 1));
    disk->flush();
  }
  auto a = RemoteStore::open_or_throw(remote_options(redis));
  auto b = RemoteStore::open_or_throw(remote_options(redis, {7, 7}));
  EXPECT_EQ(a->secret(), b->secret());
  auto disk = DiskStore::open_or_throw(disk_options(dir.path, a.get()));
  EXPECT_EQ(disk->stats().n_blocks, 0) << "blocks keyed by another secret are moved aside";
  const BlockKeyer fleet(a->secret(), {1, 2});
  EXPECT_EQ(disk->keyer().root("t"), fleet.root("t"));
  bool moved = false;
  for (const auto& e : std::filesystem::directory_iterator(dir.path))
    moved = moved || e.path().filename().string().starts_with("unusable-");
  EXPECT_TRUE(moved);
}

// Two replicas, each with its own disk tier, over one Redis.
struct TwoReplicas {
  RedisTestServer redis;
  ScratchDir d1, d2;
  std::unique_ptr<RemoteStore> r1 = RemoteStore::open_or_throw(remote_options(redis));
  std::unique_ptr<RemoteStore> r2 = RemoteStore::open_or_throw(remote_options(redis));
  std::unique_ptr<DiskStore> disk1 = DiskStore::open_or_throw(disk_options(d1.path, r1.get()));
  std::unique_ptr<DiskStore> disk2 = DiskStore::open_or_throw(disk_options(d2.path, r2.get()));
  auto parts() { return std::tie(redis, r1, r2, disk1, disk2); }
};

// One replica spills, another (its own disk) restores the same chain from Redis.
TEST(RemoteStore, BlocksWrittenByOneReplicaLoadOnAnother) {
  TwoReplicas two;
  auto [redis, r1, r2, disk1, disk2] = two.parts();
  const BlockKeyer& keys = disk1->keyer();
  const std::vector<std::int32_t> t1{1, 2, 3, 4}, t2{5, 6, 7, 8};
  const Hash128 root = keys.root("tenant"), k1 = keys.next(root, t1), k2 = keys.next(k1, t2);
  EXPECT_EQ(disk2->keyer().next(disk2->keyer().root("tenant"), t1), k1) << "one key space across replicas";
  ASSERT_TRUE(disk1->put(k1, root, keys.tokens_hash(t1), block_content(kShape, 1)));
  ASSERT_TRUE(disk1->put(k2, k1, keys.tokens_hash(t2), block_content(kShape, 2)));
  AgentRecord rec{.tenant = "tenant", .agent = "a1", .chain = {k1, k2}, .n_tokens = 8};
  disk1->put_manifest(rec);
  disk1->flush();
  ASSERT_TRUE(r1->flush(in_s(5)));
  EXPECT_EQ(r1->stats().n_written, 2);
  EXPECT_EQ(r1->stats().n_manifests, 1);

  EXPECT_FALSE(disk2->on_disk(k1));
  EXPECT_TRUE(disk2->may_load(k1));
  std::vector<std::byte> raw(kShape.raw_bytes());
  ASSERT_TRUE(disk2->load(k2, k1, keys.tokens_hash(t2), raw));
  EXPECT_EQ(raw, block_content(kShape, 2));
  EXPECT_FALSE(disk2->load(k2, k1, keys.tokens_hash(t1), raw)) << "tokens hash must match";
  EXPECT_EQ(disk2->stats().n_loaded_remote, 1);
  EXPECT_EQ(r2->stats().n_loaded, 2);
  EXPECT_FALSE(disk2->load(keys.next(k2, t1), k2, keys.tokens_hash(t1), raw)) << "never written";
  EXPECT_EQ(r2->stats().n_missing, 1);
  // The manifest is the disk tier's bytes.
  const auto bytes = r2->get_manifest(keys.agent_hash("tenant", "a1"));
  ASSERT_TRUE(bytes.has_value());
  AgentRecord back;
  ASSERT_EQ(parse_manifest(*bytes, {1, 2}, back), FileCheck::Ok);
  EXPECT_EQ(back.chain, rec.chain);
  // Stored once: a second replica spilling the same block adds nothing.
  ASSERT_TRUE(disk2->put(k1, root, keys.tokens_hash(t1), block_content(kShape, 1)));
  disk2->flush();
  ASSERT_TRUE(r2->flush(in_s(5)));
  EXPECT_EQ(reply_integer(command(redis, {"ZCARD", "akv:" + Hash128{1, 2}.hex() + ":blocks"}).get()), 2);
  // A block read from Redis and then written locally (a turn's end) is not sent back.
  ASSERT_TRUE(disk2->put(k2, k1, keys.tokens_hash(t2), block_content(kShape, 2)));
  disk2->flush();
  ASSERT_TRUE(r2->flush(in_s(5)));
  EXPECT_TRUE(disk2->on_disk(k2));
  EXPECT_EQ(r2->stats().n_written, 1) << "k1 only";
}

TEST(RemoteStore, AnotherModelDamageAndOversizeAreNeverUsed) {
  RedisTestServer redis;
  ScratchDir d1, d2;
  auto r1 = RemoteStore::open_or_throw(remote_options(redis));
  auto disk1 = DiskStore::open_or_throw(disk_options(d1.path, r1.get()));
  const BlockKeyer& keys = disk1->keyer();
  const std::vector<std::int32_t> t{1, 2, 3, 4};
  const Hash128 root = keys.root(""), k = keys.next(root, t);
  disk1->put(k, root, keys.tokens_hash(t), block_content(kShape, 3));
  disk1->flush();
  ASSERT_TRUE(r1->flush(in_s(5)));
  std::vector<std::byte> raw(kShape.raw_bytes());
  {  // Another model's replica (another fingerprint): other names, and the header says so.
    auto r2 = RemoteStore::open_or_throw(remote_options(redis, {3, 3}));
    auto disk2 = DiskStore::open_or_throw(disk_options(d2.path, r2.get(), {3, 3}));
    EXPECT_FALSE(disk2->load(k, root, keys.tokens_hash(t), raw));
    EXPECT_EQ(r2->stats().n_loaded, 0);
  }
  const std::string name = "akv:" + Hash128{1, 2}.hex() + ":block:" + k.hex();
  ScratchDir d3;
  auto r3 = RemoteStore::open_or_throw(remote_options(redis));
  auto disk3 = DiskStore::open_or_throw(disk_options(d3.path, r3.get()));
  ASSERT_TRUE(disk3->load(k, root, keys.tokens_hash(t), raw));
  // A flipped payload byte: read, checked, refused.
  command(redis, {"SETRANGE", name, std::to_string(kValueBytes - 3), "\x7f"});
  EXPECT_FALSE(disk3->load(k, root, keys.tokens_hash(t), raw));
  EXPECT_EQ(disk3->stats().rejected_corrupt, 1);
  // Longer than a block: only value_bytes + 1 bytes are read, and refused.
  command(redis, {"SETRANGE", name, std::to_string(kValueBytes + 1000000), "x"});
  EXPECT_FALSE(disk3->load(k, root, keys.tokens_hash(t), raw));
  EXPECT_EQ(r3->stats().n_bad, 1);
}

TEST(RemoteStore, RedisGoingAwayIsAMissAndWritesWaitForItsReturn) {
  auto redis = std::make_unique<RedisTestServer>();
  ScratchDir d1;
  auto r1 = RemoteStore::open_or_throw(remote_options(*redis));
  auto disk1 = DiskStore::open_or_throw(disk_options(d1.path, r1.get()));
  const BlockKeyer& keys = disk1->keyer();
  const std::vector<std::int32_t> t{1, 2, 3, 4};
  const Hash128 root = keys.root(""), k = keys.next(root, t);
  std::vector<std::byte> raw(kShape.raw_bytes());
  redis->stop();
  EXPECT_FALSE(disk1->load(k, root, keys.tokens_hash(t), raw));
  EXPECT_FALSE(r1->stats().available);
  EXPECT_GE(r1->stats().n_errors, 1);
  // Written locally at once; kept for Redis.
  disk1->put(k, root, keys.tokens_hash(t), block_content(kShape, 5));
  disk1->flush();
  EXPECT_TRUE(disk1->on_disk(k));
  EXPECT_FALSE(r1->flush(std::chrono::steady_clock::now() + std::chrono::milliseconds(300)));
  EXPECT_EQ(r1->stats().queued_blocks, 1);
  redis->start();
  ASSERT_TRUE(r1->flush(in_s(5))) << "reconnects and writes what waited";
  EXPECT_TRUE(r1->stats().available);
  // Redis restarted empty: the replica put the fleet's secret back, so one started now joins
  // the same key space and reads the block through its own disk tier.
  ScratchDir d2;
  auto r2 = RemoteStore::open_or_throw(remote_options(*redis));
  EXPECT_EQ(r2->secret(), r1->secret());
  auto disk2 = DiskStore::open_or_throw(disk_options(d2.path, r2.get()));
  ASSERT_TRUE(disk2->load(k, root, keys.tokens_hash(t), raw));
  EXPECT_EQ(raw, block_content(kShape, 5));
}

TEST(RemoteStore, AnAgentsEraseReachesRedis) {
  RedisTestServer redis;
  ScratchDir d1;
  auto r1 = RemoteStore::open_or_throw(remote_options(redis));
  auto disk = DiskStore::open_or_throw(disk_options(d1.path, r1.get()));
  const BlockKeyer& keys = disk->keyer();
  const std::vector<std::int32_t> t{1, 2, 3, 4};
  const Hash128 root = keys.root(""), k = keys.next(root, t);
  disk->put(k, root, keys.tokens_hash(t), block_content(kShape, 1));
  disk->put_manifest({.tenant = "", .agent = "a", .chain = {k}});
  disk->flush();
  ASSERT_TRUE(r1->flush(in_s(5)));
  ASSERT_TRUE(r1->get_manifest(keys.agent_hash("", "a")).has_value());
  disk->erase("", "a", {k});
  disk->flush();
  ASSERT_TRUE(r1->flush(in_s(5)));
  EXPECT_FALSE(r1->get_manifest(keys.agent_hash("", "a")).has_value());
  std::vector<std::byte> bytes;
  EXPECT_FALSE(r1->get_block(k, bytes));
}

// Budget of 6 blocks, 8 stored: blocks no manifest names go first (least recently used), then
// the least recently used unpinned agent's chain; a pinned agent's blocks never.
TEST(RemoteStore, BudgetEvictsUnnamedThenOldestAgentsNeverPinned) {
  RedisTestServer redis;
  std::int64_t now = 1'000'000;
  RemoteStoreOptions o = remote_options(redis);
  o.max_bytes = static_cast<std::int64_t>(6 * kValueBytes);
  o.low_water = 0.99;  // down to 5 blocks
  o.now_unix_ms = [&now] { return now; };
  auto remote = RemoteStore::open_or_throw(o);
  const std::vector<std::byte> header(kBlockHeaderBytes), payload(kShape.raw_bytes());
  const auto put = [&](std::uint64_t id) {
    remote->put_block({id, id}, header, payload);
    ASSERT_TRUE(remote->flush(in_s(5)));
    now += 1000;
  };
  const BlockKeyer keys(remote->secret(), {1, 2});
  const auto manifest = [&](const std::string& agent, std::vector<Hash128> chain, bool pinned, std::int64_t used) {
    const AgentRecord r{.tenant = "", .agent = agent, .chain = std::move(chain), .last_use_ms = used, .pinned = pinned};
    remote->put_manifest(keys.agent_hash("", agent), encode_manifest({1, 2}, r), used);
  };
  // Oldest first: pinned p {1,2}, agent old {3,4}, unnamed 5, 6, agent young {7,8}.
  manifest("p", {{1, 1}, {2, 2}}, true, 1);
  manifest("old", {{3, 3}, {4, 4}}, false, 2);
  manifest("young", {{7, 7}, {8, 8}}, false, 3);
  for (std::uint64_t id : {1, 2, 3, 4, 5, 6}) put(id);
  EXPECT_EQ(remote->stats().n_evicted, 0) << "at the budget, nothing goes";
  put(7);  // 7 blocks: unnamed 5 and 6 go (down to 5)
  EXPECT_EQ(remote->stats().n_evicted, 2);
  put(8);
  put(9);  // 7 again: unnamed 9 goes, then old's chain (tail first): 4 -> 5 blocks
  std::vector<std::byte> bytes;
  for (std::uint64_t id : {1, 2, 3, 7, 8}) EXPECT_TRUE(remote->get_block({id, id}, bytes)) << id;
  for (std::uint64_t id : {4, 5, 6, 9}) EXPECT_FALSE(remote->get_block({id, id}, bytes)) << id;
  EXPECT_FALSE(remote->get_manifest(keys.agent_hash("", "old")).has_value());
  EXPECT_EQ(remote->stats().n_agents_evicted, 1);
  // Only pinned blocks left to go over: they stay.
  manifest("young", {}, false, 4);
  manifest("p", {{1, 1}, {2, 2}, {3, 3}, {7, 7}, {8, 8}}, true, 5);
  put(10);
  put(11);  // 7 blocks: 10, 11 unnamed go; the pinned five stay
  for (std::uint64_t id : {1, 2, 3, 7, 8}) EXPECT_TRUE(remote->get_block({id, id}, bytes)) << id;
}

std::vector<std::byte> state_content(int seed) {
  std::vector<std::byte> b(kStateBytes);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>((i * 31 + seed * 7) & 0xff);
  return b;
}

// A replica's state block (with the KV block it ends on) reaches Redis under its own name; a
// replica that never saw it finds and loads it, verified against the same prefix only.
TEST(RemoteStore, StateBlocksFollowTheirKvBlockToAnotherReplica) {
  TwoReplicas two;
  auto [redis, r1, r2, disk1, disk2] = two.parts();
  const BlockKeyer& keys = disk1->keyer();
  const std::vector<std::int32_t> t{1, 2, 3, 4};
  const Hash128 root = keys.root("tenant"), k1 = keys.next(root, t), state = keys.state_key(k1);
  const Hash128 prefix = keys.tokens_hash(t);
  ASSERT_TRUE(disk1->put(k1, root, prefix, block_content(kShape, 1)));
  ASSERT_TRUE(disk1->put_state(state, k1, prefix, state_content(4)));
  disk1->put_manifest({.tenant = "tenant", .agent = "a", .chain = {k1}, .states = {state}, .n_tokens = 4});
  disk1->flush();
  ASSERT_TRUE(r1->flush(in_s(5)));
  EXPECT_EQ(r1->stats().n_written, 1);
  EXPECT_EQ(r1->stats().n_states_written, 1);
  const std::string fp = "akv:" + Hash128{1, 2}.hex() + ":";
  EXPECT_EQ(reply_integer(command(redis, {"EXISTS", fp + "state:" + state.hex()}).get()), 1);
  EXPECT_EQ(reply_integer(command(redis, {"EXISTS", fp + "block:" + state.hex()}).get()), 0) << "its own names";
  EXPECT_EQ(reply_integer(command(redis, {"ZCARD", fp + "states"}).get()), 1);

  // The other replica: not on its disk, found in Redis (one round trip for all candidates).
  const Hash128 other_tenant = keys.state_key(keys.next(keys.root("other"), t));
  EXPECT_FALSE(disk2->on_disk(state));
  EXPECT_EQ(disk2->find_states(std::vector<Hash128>{state, other_tenant, k1}), (std::vector<bool>{true, false, false}));
  std::vector<float> out(kStateBytes / sizeof(float));
  ASSERT_TRUE(disk2->load_state(state, k1, prefix, out));
  EXPECT_TRUE(std::ranges::equal(std::as_bytes(std::span(out)), state_content(4)));
  EXPECT_EQ(disk2->stats().n_loaded_remote, 1);
  EXPECT_EQ(disk2->stats().n_states_loaded_remote, 1);
  EXPECT_EQ(r2->stats().n_states_loaded, 1);
  // Only with the KV block and the prefix it was taken over.
  EXPECT_FALSE(disk2->load_state(state, k1, keys.tokens_hash(std::vector<std::int32_t>{1, 2, 3, 5}), out));
  EXPECT_FALSE(disk2->load_state(state, root, prefix, out));
  EXPECT_FALSE(disk2->load_state(other_tenant, keys.next(keys.root("other"), t), prefix, out)) << "another tenant";
  // A state block is not a KV block, nor the other way round.
  std::vector<std::byte> raw(kShape.raw_bytes());
  EXPECT_FALSE(disk2->load(state, k1, prefix, raw));
  EXPECT_EQ(disk2->stats().rejected_corrupt, 2) << "the two wrong prefixes";
  // A flipped payload byte: read, refused and counted, never used.
  command(redis, {"SETRANGE", fp + "state:" + state.hex(), std::to_string(kStateValueBytes - 5), "\x7f"});
  EXPECT_FALSE(disk2->load_state(state, k1, prefix, out));
  EXPECT_EQ(disk2->stats().rejected_corrupt, 3);
  // Read from Redis, then spilled locally (the engine keeps it): not sent back.
  ASSERT_TRUE(disk2->put_state(state, k1, prefix, state_content(4)));
  disk2->flush();
  ASSERT_TRUE(r2->flush(in_s(5)));
  EXPECT_EQ(r2->stats().n_states_written, 0);
  // The agent's erase takes its state block out of Redis too.
  disk1->erase("tenant", "a", {k1, state});
  disk1->flush();
  ASSERT_TRUE(r1->flush(in_s(5)));
  EXPECT_EQ(reply_integer(command(redis, {"EXISTS", fp + "state:" + state.hex()}).get()), 0);
  EXPECT_EQ(reply_integer(command(redis, {"ZCARD", fp + "states"}).get()), 0);
}

// A bf16 state block (half the bytes of the exact value the reads are bounded to) written by one
// replica loads on another, decoded from the codec its header names; one of a codec this build
// does not know is refused, counted and left in Redis.
TEST(RemoteStore, AStateBlockOfAnotherCodecLoadsOnAnotherReplica) {
  TwoReplicas two;
  auto [redis, r1, r2, disk1, disk2] = two.parts();
  const BlockKeyer& keys = disk1->keyer();
  const std::vector<std::int32_t> t{1, 2, 3, 4};
  const Hash128 root = keys.root(""), k1 = keys.next(root, t), state = keys.state_key(k1);
  std::vector<float> v(kStateBytes / sizeof(float));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(i)) * 3.0f;
  ASSERT_TRUE(disk1->put(k1, root, keys.tokens_hash(t), block_content(kShape, 1)));
  ASSERT_TRUE(disk1->put_state(state, k1, keys.tokens_hash(t), encode_state(StateCodec::Bf16, v), StateCodec::Bf16));
  disk1->flush();
  ASSERT_TRUE(r1->flush(in_s(5)));
  const std::string name = "akv:" + Hash128{1, 2}.hex() + ":state:" + state.hex();
  EXPECT_EQ(reply_integer(command(redis, {"STRLEN", name}).get()),
            static_cast<long long>(kBlockHeaderBytes + kStateBytes / 2));
  std::vector<float> out(v.size());
  ASSERT_TRUE(disk2->load_state(state, k1, keys.tokens_hash(t), out));
  for (std::size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(out[i], v[i], std::abs(v[i]) / 256) << i;
  // The codec field ("STBF") changed to an id nobody knows, the header checksum made good.
  std::vector<std::byte> value;
  ASSERT_TRUE(r2->get_state(state, value));
  const std::uint32_t unknown = 0x5a5a5453;
  std::memcpy(value.data() + 80, &unknown, 4);
  const std::uint64_t sum = XXH3_64bits(value.data(), 104);
  std::memcpy(value.data() + 104, &sum, 8);
  command(redis, {"SET", name, std::string(reinterpret_cast<const char*>(value.data()), value.size())});
  const std::int64_t version_before = disk2->stats().rejected_version;
  EXPECT_FALSE(disk2->load_state(state, k1, keys.tokens_hash(t), out));
  EXPECT_EQ(disk2->stats().rejected_version, version_before + 1);
  EXPECT_EQ(disk2->stats().rejected_corrupt, 0) << "not damage";
  EXPECT_EQ(reply_integer(command(redis, {"EXISTS", name}).get()), 1) << "left in Redis";
}

// State blocks count in the budget and go first: unnamed ones before unnamed KV blocks, an
// agent's before its chain; a pinned agent's stay.
TEST(RemoteStore, BudgetEvictsStateBlocksBeforeKvBlocks) {
  RedisTestServer redis;
  std::int64_t now = 1'000'000;
  RemoteStoreOptions o = remote_options(redis);
  o.max_bytes = static_cast<std::int64_t>(5 * kValueBytes + 2 * kStateValueBytes);
  o.low_water = 1.0;  // down to the budget itself
  o.now_unix_ms = [&now] { return now; };
  auto remote = RemoteStore::open_or_throw(o);
  const std::vector<std::byte> header(kBlockHeaderBytes), payload(kShape.raw_bytes()), state(kStateBytes);
  const auto put = [&](std::uint64_t id, bool is_state) {
    if (is_state)
      remote->put_state({id, id}, header, state);
    else
      remote->put_block({id, id}, header, payload);
    ASSERT_TRUE(remote->flush(in_s(5)));
    now += 1000;
  };
  const BlockKeyer keys(remote->secret(), {1, 2});
  const auto manifest = [&](const std::string& agent, std::vector<Hash128> chain, std::vector<Hash128> states,
                            bool pinned, std::int64_t used) {
    const AgentRecord r{.tenant = "", .agent = agent, .chain = std::move(chain), .states = std::move(states),
                        .last_use_ms = used, .pinned = pinned};
    remote->put_manifest(keys.agent_hash("", agent), encode_manifest({1, 2}, r), used);
  };
  std::vector<std::byte> bytes;
  // A read makes the value most recently used: time moves on after it.
  const auto has_state = [&](std::uint64_t id) { return (now += 1000, remote->get_state({id, id}, bytes)); };
  const auto has_block = [&](std::uint64_t id) { return (now += 1000, remote->get_block({id, id}, bytes)); };
  // Agent old: chain {1, 2, 4}, state 11; pinned p: chain {3}, state 13; block 5 unnamed.
  manifest("old", {{1, 1}, {2, 2}, {4, 4}}, {{11, 11}}, false, 1);
  manifest("p", {{3, 3}}, {{13, 13}}, true, 2);
  for (std::uint64_t id : {5, 1, 2}) put(id, false);
  put(11, true);
  put(3, false);
  put(13, true);
  put(4, false);  // 5 blocks + 2 states: at the budget
  EXPECT_EQ(remote->stats().n_evicted + remote->stats().n_states_evicted, 0);
  put(14, true);  // an unnamed state block goes before the older unnamed KV block 5
  EXPECT_EQ(remote->stats().n_states_evicted, 1);
  EXPECT_EQ(remote->stats().n_evicted, 0);
  EXPECT_FALSE(has_state(14));
  EXPECT_TRUE(has_block(5));
  put(6, false);  // over by a KV block: the unnamed 5 goes
  EXPECT_EQ(remote->stats().n_evicted, 1);
  EXPECT_FALSE(has_block(5));
  // Nothing unnamed left: the least recently used unpinned agent's state block goes before any
  // block of its chain (a state block is worth more bytes than a KV block here).
  manifest("old", {{1, 1}, {2, 2}, {4, 4}, {6, 6}, {7, 7}}, {{11, 11}}, false, 1);
  put(7, false);
  EXPECT_EQ(remote->stats().n_states_evicted, 2);
  EXPECT_EQ(remote->stats().n_evicted, 1);
  EXPECT_FALSE(has_state(11)) << "the agent's state block before its chain";
  for (std::uint64_t id : {1, 2, 3, 4, 6, 7}) EXPECT_TRUE(has_block(id)) << id;
  EXPECT_TRUE(has_state(13)) << "pinned";
  EXPECT_EQ(remote->stats().n_agents_evicted, 1);
}

}  // namespace
}  // namespace akv
