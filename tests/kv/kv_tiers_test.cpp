// KvManager with tiers: device evictions demote to the host tier and a match restores from it,
// evict_keys empties both, retention protects a conversation from side requests, and a prefix
// on disk is loaded by the restorer in the background before the match copies it in.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

#include "kv/agent_index.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "kv/kv_manager.h"
#include "kv/restorer.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using Tokens = std::vector<std::int32_t>;
constexpr std::int32_t kBs = 4;
constexpr BlockShape kShape{.n_rows = 4, .row_width = 4, .dtype = DType::F32};  // 64 bytes

Tokens iota_tokens(std::int32_t n, std::int32_t first) {
  Tokens t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// What "the model" writes into a block: a function of the tokens up to its end, so a block
// restored into the wrong place shows.
std::vector<std::byte> content(std::span<const std::int32_t> prefix) {
  std::vector<std::byte> raw(kShape.raw_bytes());
  std::uint32_t h = 2166136261u;
  for (std::int32_t t : prefix) h = (h ^ static_cast<std::uint32_t>(t)) * 16777619u;
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::byte>((h >> (i % 24)) + i);
  return raw;
}

// A KV manager over an in-memory "device" of n_blocks blocks.
struct Device {
  explicit Device(std::int32_t n_blocks)
      : mem(static_cast<std::size_t>(n_blocks), std::vector<std::byte>(kShape.raw_bytes())),
        kv(n_blocks, kBs, [this](BlockId s, BlockId d) { mem[d] = mem[s]; }) {}
  KvBlockIo io() { return test::memory_block_io(mem, kShape.raw_bytes()); }
  // With deferred reads as a device backend does them: a started read takes the block's bytes
  // at the call but fills `out` (garbage until then) only at finish_reads.
  KvBlockIo deferred_io() {
    KvBlockIo io = this->io();
    io.start_read = [this](BlockId b, std::span<std::byte> out) {
      std::fill(out.begin(), out.end(), std::byte{0xEE});
      started.push_back({out, mem[b]});
    };
    io.finish_reads = [this] {
      for (const auto& [out, bytes] : started) std::memcpy(out.data(), bytes.data(), out.size());
      started.clear();
      ++n_finishes;
    };
    return io;
  }
  // Match, compute what is missing (fill blocks), commit, release. Returns the tokens matched.
  std::int32_t run(const Tokens& tokens, Retention retention = Retention::Normal) {
    KvSequence seq;
    const std::int32_t hit = kv.match(seq, tokens, "", retention);
    EXPECT_TRUE(check(seq, tokens, hit / kBs)) << "matched blocks hold the wrong KV";
    const auto n = static_cast<std::int32_t>(tokens.size());
    EXPECT_TRUE(kv.allocate(seq, n));
    for (std::int32_t b = hit / kBs; b * kBs < n; ++b)
      mem[seq.block_table()[b]] = content(std::span(tokens).first(std::min(n, (b + 1) * kBs)));
    kv.commit(seq, tokens, n);
    kv.spill_queued(1 << 20);  // the engine drains its spill queue between steps
    last_host_restored = seq.n_host_restored_blocks();
    last_disk_restored = seq.n_restored_blocks();
    kv.release(seq);
    return hit;
  }
  bool check(const KvSequence& seq, const Tokens& tokens, std::int32_t n_blocks) const {
    for (std::int32_t b = 0; b < n_blocks; ++b)
      if (mem[seq.block_table()[b]] != content(std::span(tokens).first((b + 1) * kBs)))
        return false;
    return true;
  }
  std::vector<std::vector<std::byte>> mem;
  KvManager kv;
  std::int32_t last_host_restored = 0, last_disk_restored = 0;
  std::vector<std::pair<std::span<std::byte>, std::vector<std::byte>>> started;  // deferred_io
  std::int32_t n_finishes = 0;
};

HostStoreOptions host_options(std::size_t n_blocks) {
  HostStoreOptions o;
  o.max_bytes = n_blocks * kShape.raw_bytes();
  o.shape = kShape;
  o.block_size = kBs;
  return o;
}

// The tests' disk tier options: blocks of kShape under `dir`.
DiskStoreOptions disk_options(const std::string& dir) {
  DiskStoreOptions o;
  o.dir = dir;
  o.fingerprint = {3, 4};
  o.shape = kShape;
  o.block_size = kBs;
  return o;
}

// A disk tier in `dir` holding the full blocks of `tokens`, written by an earlier "server".
std::unique_ptr<DiskStore> disk_holding(const std::string& dir, const Tokens& tokens) {
  std::unique_ptr<DiskStore> disk = DiskStore::open_or_throw(disk_options(dir));
  Device first(static_cast<std::int32_t>(tokens.size()) / kBs + 4);
  first.kv.attach_tiers({.disk = disk.get()}, first.io());
  first.run(tokens);
  disk->flush();
  return disk;
}

// Polls restore_pending until seq's background load is done (2 s at most).
void wait_for_restore(KvManager& kv, KvSequence& seq, const Tokens& tokens) {
  for (int i = 0; i < 1000 && kv.restore_pending(seq, tokens, ""); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

TEST(KvTiers, DeviceEvictionsDemoteToTheHostAndAMatchRestoresFromIt) {
  Device d(6);
  HostStore host(host_options(16));
  AgentIndex agents;
  d.kv.attach_tiers({.agents = &agents, .host = &host}, d.io());
  const Tokens a = iota_tokens(13, 100);  // 3 full blocks and one token
  EXPECT_EQ(d.run(a), 0);
  for (int i = 0; i < 3; ++i) d.run(iota_tokens(12, 1000 + 100 * i));  // pushes a out
  EXPECT_EQ(host.stats().n_put, 3 + 3);  // a's 3 blocks, then the first other chain's
  EXPECT_EQ(d.run(a), 12);  // every full block, from the host, verified against its content
  EXPECT_EQ(d.last_host_restored, 3);
}

TEST(KvTiers, ARestoredBlockKeepsItsHostCopySoDemotingItAgainCopiesNothing) {
  Device d(4);
  HostStore host(host_options(16));
  d.kv.attach_tiers({.host = &host}, d.io());
  const Tokens a = iota_tokens(9, 100);  // 2 full blocks and one token
  d.run(a);
  d.run(iota_tokens(8, 200));  // fills the device
  d.run(iota_tokens(8, 300));  // evicts a's 2 blocks: copied down
  EXPECT_EQ(host.stats().n_put, 2);
  EXPECT_EQ(d.run(a), 8);  // from the host; makes room by demoting 3 more blocks
  EXPECT_EQ(d.last_host_restored, 2);
  EXPECT_EQ(host.stats().n_put, 5);
  d.run(iota_tokens(8, 400));  // evicts the last never-demoted block (1 copy)
  EXPECT_EQ(host.stats().n_put, 6);
  d.run(iota_tokens(8, 500));  // evicts a's restored blocks again: no copy
  EXPECT_EQ(host.stats().n_put, 6);
  EXPECT_EQ(d.run(a), 8);
  EXPECT_EQ(host.stats().n_hits, 4);
}

// A host-tier hit is written to the device from the block's slot: one write_blocks call for the
// whole prefix, nothing decoded or copied on the host on the way; the "device" here reads the
// slots only later (as a DMA does), so a slot reused before the call's fence passes would show
// as wrong KV. The slots stay pinned through the pressure of other chains' demotions and are
// released at the first match or commit after the fence.
TEST(KvTiers, HostBlocksAreWrittenFromTheirSlotsInOneBatchPinnedUntilTheFence) {
  Device d(8);
  HostStore host(host_options(4));
  KvBlockIo io = d.io();
  std::vector<std::vector<EncodedKvBlock>> calls;
  std::uint64_t fence_done = 0;
  io.write_blocks = [&](std::span<const EncodedKvBlock> blocks) {
    calls.emplace_back(blocks.begin(), blocks.end());
    return static_cast<std::uint64_t>(calls.size());
  };
  io.writes_done = [&](std::uint64_t fence) { return fence <= fence_done; };
  auto device_reads = [&] {  // the queued copies land
    for (const auto& call : calls)
      for (const EncodedKvBlock& b : call)
        std::memcpy(d.mem[b.block].data(), b.bytes.data(), b.bytes.size());
    fence_done = calls.size();
  };
  d.kv.attach_tiers({.host = &host}, io);
  const Tokens a = iota_tokens(13, 100);  // 3 full blocks and one token
  d.run(a);
  d.run(iota_tokens(32, 1000));  // takes the whole device: a goes to the host tier
  ASSERT_EQ(host.stats().n_blocks, 3);

  KvSequence seq;
  EXPECT_FALSE(d.kv.restore_pending(seq, a, ""));  // no restorer, nothing to load: match now
  EXPECT_EQ(d.kv.match(seq, a, ""), 12);
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].size(), 3u);
  for (const EncodedKvBlock& b : calls[0]) EXPECT_EQ(b.codec, SpillCodec::Native);
  EXPECT_EQ(seq.n_host_restored_blocks(), 3);
  // Other chains push blocks through the one host slot a's pinned blocks leave.
  const std::int64_t evicted = host.stats().n_evicted;
  for (int i = 0; i < 4; ++i) d.run(iota_tokens(8, 3000 + 100 * i));
  EXPECT_GE(host.stats().n_evicted - evicted, 2);
  device_reads();
  EXPECT_TRUE(d.check(seq, a, 3));  // the slots held a's bytes until the device read them
  d.kv.release(seq);
  // Released at the next match: with the other chains' demotions a's blocks age out now.
  for (int i = 0; i < 8; ++i) d.run(iota_tokens(8, 5000 + 100 * i));
  EXPECT_EQ(d.run(a), 0);
}

// A restore into a full pool evicts a block for each one it restores: all those demotions are
// started during the match and finished once, at its end, and every demoted block is in the host
// tier with its bytes when the match returns (restored again below, its content checked).
TEST(KvTiers, ARestoreIntoAFullPoolDemotesEveryEvictedBlockWithOneFinish) {
  Device d(9);
  HostStore host(host_options(64));
  d.kv.attach_tiers({.host = &host}, d.deferred_io());
  const Tokens a = iota_tokens(33, 100), b = iota_tokens(33, 500);  // 8 full blocks and one token
  d.run(a);
  d.run(b);  // pushes a's 8 blocks to the host
  EXPECT_EQ(host.stats().n_put, 8);
  EXPECT_TRUE(d.started.empty());

  const std::int32_t finishes = d.n_finishes;
  KvSequence seq;
  EXPECT_EQ(d.kv.match(seq, a, ""), 32);
  EXPECT_EQ(seq.n_host_restored_blocks(), 8);
  EXPECT_TRUE(d.check(seq, a, 8));
  EXPECT_EQ(d.n_finishes - finishes, 1);  // one finish for the match, not one per block
  EXPECT_TRUE(d.started.empty());
  EXPECT_EQ(host.stats().n_put, 8 + 7);  // the free block, then 7 of b's evicted (tail first)
  d.kv.release(seq);

  EXPECT_EQ(d.run(b), 32);  // b's first block from the device, the 7 demoted ones from the host
  EXPECT_EQ(d.last_host_restored, 7);
}

// A restore that evicts the very blocks it needs next (the chain's orphans, left on the device
// when its head went first) finds each in the host tier: the match finishes the started
// demotion before it looks the block up.
TEST(KvTiers, ARestoreFindsTheOrphansItDemotesItself) {
  Device d(5);
  HostStore host(host_options(16));
  AgentIndex agents;
  d.kv.attach_tiers({.agents = &agents, .host = &host}, d.deferred_io());
  const Tokens a = iota_tokens(17, 100);  // 4 full blocks and one token
  KvSequence seq;
  d.kv.match(seq, a, "");
  ASSERT_TRUE(d.kv.allocate(seq, 17));
  for (std::int32_t blk = 0; blk < 5; ++blk)
    d.mem[seq.block_table()[blk]] = content(std::span(a).first(std::min(17, (blk + 1) * kBs)));
  d.kv.commit(seq, a, 17);
  d.kv.spill_queued(1 << 20);  // the engine drains its spill queue between steps
  d.kv.remember_agent(seq, "", "agent", 17, false);
  d.kv.release(seq);
  const std::vector<Hash128> chain = agents.find("", "agent")->chain;
  ASSERT_EQ(chain.size(), 4u);
  d.kv.set_retention(std::span(chain).first(1), Retention::Low);  // a's head goes first
  d.run(iota_tokens(8, 900));  // 2 blocks: the free one and a's head (demoted)
  EXPECT_EQ(host.stats().n_put, 1);

  // The pool is full: a's other 3 blocks are orphans, evicted first as the head comes back.
  EXPECT_EQ(d.kv.match(seq, a, ""), 16);
  EXPECT_EQ(seq.n_host_restored_blocks(), 4);
  EXPECT_TRUE(d.check(seq, a, 4));
  EXPECT_TRUE(d.started.empty());
  d.kv.release(seq);
}

TEST(KvTiers, EvictKeysEmptiesDeviceAndHost) {
  Device d(8);
  HostStore host(host_options(16));
  AgentIndex agents;
  d.kv.attach_tiers({.agents = &agents, .host = &host}, d.io());
  const Tokens a = iota_tokens(13, 100);
  KvSequence seq;
  d.kv.match(seq, a, "");
  ASSERT_TRUE(d.kv.allocate(seq, 13));
  d.kv.commit(seq, a, 13);
  d.kv.spill_queued(1 << 20);  // the engine drains its spill queue between steps
  d.kv.remember_agent(seq, "", "agent", 13, false);
  d.kv.release(seq);
  const std::vector<Hash128> chain = agents.find("", "agent")->chain;
  ASSERT_EQ(chain.size(), 3u);
  EXPECT_EQ(d.kv.evict_keys(chain), 3);
  EXPECT_EQ(host.stats().n_blocks, 0);  // not demoted: the agent asked for them to go
  EXPECT_EQ(agents.n_resident(chain), 0);
  EXPECT_EQ(d.run(a), 0);
}

// Two agents share a 2-block prefix and both are pinned; unpinning one lowers only its own
// blocks: the shared prefix stays High for the other (issue 13, item 4). Deleting the other,
// still pinned, lowers the prefix too.
TEST(KvTiers, UnpinKeepsTheBlocksAnotherPinnedAgentHoldsHigh) {
  Device d(16);
  AgentIndex agents;
  d.kv.attach_tiers({.agents = &agents}, d.io());
  const Tokens shared = iota_tokens(8, 1);
  Tokens ta = shared, tb = shared;
  for (std::int32_t t : iota_tokens(9, 100)) ta.push_back(t);
  for (std::int32_t t : iota_tokens(9, 200)) tb.push_back(t);
  // Each agent's turn: 16 of its 17 tokens computed (4 full blocks), recorded, released.
  auto turn = [&](const Tokens& tokens, const std::string& agent) {
    KvSequence seq;
    d.kv.match(seq, tokens, "");
    EXPECT_TRUE(d.kv.allocate(seq, 16));
    d.kv.commit(seq, tokens, 16);
    d.kv.spill_queued(1 << 20);  // the engine drains its spill queue between steps
    d.kv.remember_agent(seq, "", agent, 16, false);
    const std::vector<BlockId> blocks(seq.block_table().begin(), seq.block_table().end());
    d.kv.release(seq);
    return blocks;
  };
  const std::vector<BlockId> a = turn(ta, "a"), b = turn(tb, "b");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  ASSERT_EQ(a[0], b[0]);
  ASSERT_EQ(a[1], b[1]);
  ASSERT_NE(a[2], b[2]);
  ASSERT_TRUE(d.kv.set_agent_pinned("", "a", true));
  ASSERT_TRUE(d.kv.set_agent_pinned("", "b", true));
  const PrefixIndex& index = d.kv.index();
  for (BlockId blk : {a[0], a[1], a[2], a[3], b[2], b[3]})
    EXPECT_EQ(index.retention_of(blk), Retention::High);

  const std::optional<AgentRecord> unpinned = d.kv.set_agent_pinned("", "a", false);
  ASSERT_TRUE(unpinned);
  EXPECT_FALSE(unpinned->pinned);
  EXPECT_EQ(index.retention_of(a[0]), Retention::High) << "b still pins the shared prefix";
  EXPECT_EQ(index.retention_of(a[1]), Retention::High);
  EXPECT_EQ(index.retention_of(a[2]), Retention::Normal);
  EXPECT_EQ(index.retention_of(a[3]), Retention::Normal);
  EXPECT_EQ(index.retention_of(b[2]), Retention::High);
  EXPECT_EQ(index.retention_of(b[3]), Retention::High);

  ASSERT_TRUE(d.kv.erase_agent("", "b"));
  EXPECT_FALSE(agents.find("", "b"));
  EXPECT_TRUE(agents.find("", "a")) << "a's chain keeps the shared prefix";
  EXPECT_EQ(index.retention_of(a[0]), Retention::Normal) << "nobody pins it now";
  EXPECT_EQ(index.retention_of(a[1]), Retention::Normal);
  EXPECT_FALSE(index.contains(b[2])) << "b's own blocks leave memory";
  EXPECT_FALSE(d.kv.set_agent_pinned("", "b", true)) << "unknown agent";
}

// A turn that was submitted before its agent was pinned (so its new blocks were computed at
// Normal retention) and ends after the pin leaves the agent's whole new chain High.
TEST(KvTiers, ATurnEndingAfterAPinLeavesItsWholeChainHigh) {
  Device d(16);
  AgentIndex agents;
  d.kv.attach_tiers({.agents = &agents}, d.io());
  const Tokens t1 = iota_tokens(9, 1);
  Tokens t2 = t1;
  for (std::int32_t t : iota_tokens(8, 50)) t2.push_back(t);
  KvSequence first;
  d.kv.match(first, t1, "");
  ASSERT_TRUE(d.kv.allocate(first, 8));
  d.kv.commit(first, t1, 8);
  d.kv.spill_queued(1 << 20);  // the engine drains its spill queue between steps
  d.kv.remember_agent(first, "", "a", 8, false);
  d.kv.release(first);

  KvSequence turn;  // in flight while the pin is applied
  EXPECT_EQ(d.kv.match(turn, t2, "", Retention::Normal), 8);
  ASSERT_TRUE(d.kv.set_agent_pinned("", "a", true));
  ASSERT_TRUE(d.kv.allocate(turn, 16));
  d.kv.commit(turn, t2, 16);
  d.kv.spill_queued(1 << 20);  // the engine drains its spill queue between steps
  d.kv.remember_agent(turn, "", "a", 16, true);
  const std::vector<BlockId> blocks(turn.block_table().begin(), turn.block_table().end());
  d.kv.release(turn);
  ASSERT_EQ(blocks.size(), 4u);
  for (BlockId b : blocks) EXPECT_EQ(d.kv.index().retention_of(b), Retention::High) << b;
  EXPECT_TRUE(agents.find("", "a")->pinned);
}

TEST(KvTiers, SideRequestsDoNotPushOutTheMainConversation) {
  Device d(8);
  const Tokens main_chat = iota_tokens(13, 100);  // 4 blocks held after release: 3 indexed
  d.run(main_chat, Retention::Normal);
  for (int i = 0; i < 6; ++i) d.run(iota_tokens(9, 2000 + 100 * i), Retention::Low);
  EXPECT_EQ(d.run(main_chat), 12);  // still all on the device
  // Without the distinction the side requests would have evicted it.
  Device plain(8);
  plain.run(main_chat);
  for (int i = 0; i < 6; ++i) plain.run(iota_tokens(9, 2000 + 100 * i));
  EXPECT_LT(plain.run(main_chat), 12);
}

TEST(KvTiers, APrefixOnDiskIsLoadedInTheBackgroundThenCopiedIn) {
  test::ScratchDir dir;
  const Tokens a = iota_tokens(17, 100);  // 4 full blocks and one token
  std::unique_ptr<DiskStore> disk = disk_holding(dir.path, a);
  std::atomic<int> done{0};
  Restorer restorer(disk.get(), [&] { ++done; });
  Device d(8);
  d.kv.attach_tiers({.disk = disk.get(), .restorer = &restorer}, d.io());
  d.run(iota_tokens(8, 100));  // 2 blocks on the device again (the first loaded by this match)
  const std::int64_t loads = disk->stats().n_loaded;
  KvSequence seq;
  ASSERT_TRUE(d.kv.restore_pending(seq, a, ""));
  wait_for_restore(d.kv, seq, a);
  EXPECT_FALSE(d.kv.restore_pending(seq, a, ""));
  // The restorer calls on_done just after it marks the job done (restorer.cpp: the owner's
  // reference must be the last when it hears), so the count may trail the state by a moment.
  for (int i = 0; i < 1000 && done.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(disk->stats().n_loaded, loads + 2);  // only the 2 blocks the device lacks
  EXPECT_EQ(d.kv.match(seq, a, ""), 16);
  EXPECT_EQ(seq.n_restored_blocks(), 2);
  EXPECT_EQ(disk->stats().n_loaded, loads + 2);  // the match read nothing itself
  EXPECT_TRUE(d.check(seq, a, 4));
  d.kv.release(seq);
  // Nothing left on disk only: no background load, match straight away.
  KvSequence again;
  EXPECT_FALSE(d.kv.restore_pending(again, a, ""));
  EXPECT_EQ(d.kv.match(again, a, ""), 16);
  d.kv.release(again);
}

// With a host tier, the background load goes into host slots (pinned by the job), and the match
// writes them from there in its one batch; once the job is gone the slots are free to reuse, and
// the blocks stay in the host tier for the next return.
TEST(KvTiers, WithAHostTierTheBackgroundLoadGoesIntoHostSlots) {
  test::ScratchDir dir;
  const Tokens a = iota_tokens(17, 100);  // 4 full blocks and one token
  std::unique_ptr<DiskStore> disk = disk_holding(dir.path, a);
  HostStore host(host_options(6));
  Restorer restorer(disk.get(), [] {}, Restorer::kDefaultMaxBytes, 2, &host);
  Device d(8);
  d.kv.attach_tiers({.host = &host, .disk = disk.get(), .restorer = &restorer}, d.io());
  KvSequence seq;
  ASSERT_TRUE(d.kv.restore_pending(seq, a, ""));
  wait_for_restore(d.kv, seq, a);
  EXPECT_EQ(disk->stats().n_loaded, 4);
  EXPECT_EQ(host.stats().n_blocks, 4) << "loaded into the host tier";
  EXPECT_EQ(d.kv.match(seq, a, ""), 16);
  EXPECT_EQ(seq.n_restored_blocks(), 4) << "written from the host slots, counted as from disk";
  EXPECT_EQ(seq.n_host_restored_blocks(), 0);
  EXPECT_EQ(disk->stats().n_loaded, 4) << "the match read nothing itself";
  EXPECT_TRUE(d.check(seq, a, 4));
  d.kv.release(seq);
  // Unpinned: all 6 slots can go to other blocks (the 4 loaded ones are evicted for them).
  for (std::uint64_t i = 0; i < 6; ++i) {
    const Hash128 key{5000 + i, 9};
    ASSERT_FALSE(host.reserve(key, {}).empty()) << "slot " << i << " is still pinned";
    host.publish(key);
  }
}

TEST(KvTiers, ABackgroundLoadStopsAtAMissingBlockAndIsDroppedOnRelease) {
  test::ScratchDir dir;
  const Tokens a = iota_tokens(33, 100);  // 8 full blocks and one token
  std::unique_ptr<DiskStore> disk = disk_holding(dir.path, a);
  // Block 5's file goes missing (the store still lists it).
  Hash128 key = disk->keyer().root("");
  for (int b = 0; b <= 5; ++b) key = disk->keyer().next(key, std::span(a).subspan(b * kBs, kBs));
  ASSERT_TRUE(std::filesystem::remove(dir.path + "/blocks/" + key.hex() + ".kvb"));

  Restorer restorer(disk.get(), {}, Restorer::kDefaultMaxBytes, /*n_threads=*/3);
  Device d(12);
  d.kv.attach_tiers({.disk = disk.get(), .restorer = &restorer}, d.io());
  KvSequence cancelled;
  d.kv.restore_pending(cancelled, a, "");
  d.kv.release(cancelled);  // the request went away: its load is dropped, nothing leaks
  EXPECT_EQ(d.kv.usage().n_free, 12);

  KvSequence seq;
  wait_for_restore(d.kv, seq, a);
  EXPECT_EQ(d.kv.match(seq, a, ""), 5 * kBs);  // the chain breaks at the missing block
  EXPECT_EQ(seq.n_restored_blocks(), 5);
  EXPECT_TRUE(d.check(seq, a, 5));
  d.kv.release(seq);
}

// The host tier on F32 and BF16 live KV with every codec: a block restored from it is what the
// codec makes of the block computed (native, and bf16 on BF16, exactly the block), decoded by
// write_blocks' host-side default.
TEST(KvTiers, HostCodecsRestoreEveryLiveDtype) {
  for (bool encoded_reads : {false, true})
  for (DType live : {DType::F32, DType::BF16})
    for (SpillCodec codec : {SpillCodec::Native, SpillCodec::BF16, SpillCodec::Int8, SpillCodec::Int4}) {
      const BlockShape shape{.n_rows = 2 * 2 * kBs, .row_width = 64, .dtype = live, .block_size = kBs};
      std::vector<std::vector<std::byte>> mem(6, std::vector<std::byte>(shape.raw_bytes()));
      KvManager kv(6, kBs, [&](BlockId src, BlockId dst) { mem[dst] = mem[src]; });
      HostStoreOptions o;
      o.max_bytes = 16 * encoded_bytes(codec, shape);
      o.codec = codec;
      o.shape = shape;
      o.block_size = kBs;
      HostStore host(o);
      KvBlockIo io{
          .read = [&](BlockId b, std::span<std::byte> out) { std::memcpy(out.data(), mem[b].data(), out.size()); },
          .write = [&](BlockId b, std::span<const std::byte> in) { std::memcpy(mem[b].data(), in.data(), in.size()); },
          .block_bytes = shape.raw_bytes()};
      std::int32_t n_encoded_reads = 0;
      if (encoded_reads)  // as a device that encodes (the CUDA backend): straight into the slot
        io.start_read_encoded = [&](BlockId b, SpillCodec c, std::span<std::byte> out) {
          encode_block(c, shape, mem[b], out);
          ++n_encoded_reads;
        };
      kv.attach_tiers({.host = &host}, io);
      std::vector<std::vector<std::byte>> computed;
      auto run = [&](const Tokens& tokens, bool keep) {
        KvSequence seq;
        const std::int32_t hit = kv.match(seq, tokens, "");
        const auto n = static_cast<std::int32_t>(tokens.size());
        EXPECT_TRUE(kv.allocate(seq, n));
        for (std::int32_t b = hit / kBs; b * kBs < n; ++b) {
          std::vector<std::byte>& raw = mem[seq.block_table()[b]];
          for (std::size_t i = 0; i < raw.size() / dtype_size(live); ++i) {
            const float x = std::sin(0.1f * static_cast<float>(i + 977 * b + tokens[0])) * (i % 64 == 7 ? 30.0f : 2.0f);
            if (live == DType::F32)
              std::memcpy(raw.data() + 4 * i, &x, 4);
            else {
              const std::uint16_t h = f32_to_bf16(x);
              std::memcpy(raw.data() + 2 * i, &h, 2);
            }
          }
          if (keep) computed.push_back(raw);
        }
        kv.commit(seq, tokens, n);
        kv.spill_queued(1 << 20);  // the engine drains its spill queue between steps
        kv.release(seq);
        return hit;
      };
      const Tokens a = iota_tokens(13, 100);
      run(a, true);
      run(iota_tokens(24, 5000), false);  // takes the whole device: a goes to the host tier
      ASSERT_EQ(host.stats().n_blocks, 3);
      EXPECT_EQ(n_encoded_reads, encoded_reads && !codec_is_raw(codec, live) ? 3 : 0);
      KvSequence seq;
      ASSERT_EQ(kv.match(seq, a, ""), 12);
      std::vector<std::byte> enc(encoded_bytes(codec, shape)), want(shape.raw_bytes());
      for (int b = 0; b < 3; ++b) {
        encode_block(codec, shape, computed[b], enc);
        decode_block(codec, shape, enc, want);
        EXPECT_EQ(mem[seq.block_table()[b]], want) << spill_codec_name(codec) << " " << dtype_name(live);
        if (codec_is_raw(codec, live)) {
          EXPECT_EQ(mem[seq.block_table()[b]], computed[b]) << spill_codec_name(codec);
        }
      }
      kv.release(seq);
    }
}

// Background loads hold at most their budget across requests: a job alone larger than it loads
// only its leading blocks that fit, and the next job waits until the memory comes back (when
// the first job is used and dropped).
TEST(KvTiers, BackgroundLoadsStayWithinTheirMemoryBudget) {
  test::ScratchDir dir;
  const Tokens a = iota_tokens(17, 100), b = iota_tokens(17, 900);  // 4 full blocks each
  std::unique_ptr<DiskStore> disk = disk_holding(dir.path, a);
  {
    Device writer(8);
    writer.kv.attach_tiers({.disk = disk.get()}, writer.io());
    writer.run(b);
    disk->flush();
  }
  Restorer restorer(disk.get(), {}, /*max_bytes=*/3 * kShape.raw_bytes());
  Device d(16);
  d.kv.attach_tiers({.disk = disk.get(), .restorer = &restorer}, d.io());
  KvSequence sa, sb;
  ASSERT_TRUE(d.kv.restore_pending(sa, a, ""));
  wait_for_restore(d.kv, sa, a);
  ASSERT_TRUE(d.kv.restore_pending(sb, b, ""));
  EXPECT_EQ(restorer.used_bytes(), 3 * kShape.raw_bytes());  // a's job, cut to the budget
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_TRUE(d.kv.restore_pending(sb, b, ""));  // b waits for a's memory
  EXPECT_EQ(d.kv.match(sa, a, ""), 12);
  EXPECT_EQ(sa.n_restored_blocks(), 3);
  EXPECT_TRUE(d.check(sa, a, 3));
  wait_for_restore(d.kv, sb, b);  // a's job is gone: b's runs
  EXPECT_EQ(d.kv.match(sb, b, ""), 12);
  EXPECT_EQ(sb.n_restored_blocks(), 3);
  EXPECT_TRUE(d.check(sb, b, 3));
  d.kv.release(sa);
  d.kv.release(sb);
  EXPECT_EQ(restorer.used_bytes(), 0u);
}

}  // namespace
}  // namespace akv

namespace akv {
namespace {

// Spills dropped while the disk queue was full are queued again when the agent's request ends,
// as far as the queue has room, so a few turns (or the graceful stop) fill the chain's gaps.
// Spills wait for room in the disk queue (a busy disk) instead of being copied out and dropped;
// remember_agent queues the agent's manifest, and the blocks follow as the queue drains.
TEST(KvTiers, SpillsWaitForRoomInTheDiskQueueInsteadOfBeingDropped) {
  test::ScratchDir dir;
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  DiskStoreOptions o = disk_options(dir.path);
  o.max_queue_bytes = 2 * kShape.raw_bytes();
  o.before_write = [&] {  // a busy disk until the test opens it
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return open; });
  };
  std::unique_ptr<DiskStore> disk = DiskStore::open_or_throw(o);
  Device d(16);
  AgentIndex agents;
  d.kv.attach_tiers({.agents = &agents, .disk = disk.get()}, d.io());
  const Tokens t = iota_tokens(6 * kBs + 1, 10);  // 6 full blocks
  const auto n = static_cast<std::int32_t>(t.size());
  KvSequence seq;
  EXPECT_EQ(d.kv.match(seq, t, ""), 0);
  ASSERT_TRUE(d.kv.allocate(seq, n));
  for (std::int32_t b = 0; b * kBs < n; ++b)
    d.mem[seq.block_table()[b]] = content(std::span(t).first(std::min(n, (b + 1) * kBs)));
  d.kv.commit(seq, t, n);
  EXPECT_EQ(d.kv.spill_queued(1 << 20), 2) << "a queue of 2 blocks takes 2 of the 6";
  EXPECT_EQ(d.kv.n_spills_queued(), 4u);
  EXPECT_FALSE(d.kv.spills_ready()) << "no room: the engine waits instead of copying";
  EXPECT_EQ(disk->stats().n_dropped, 0);
  d.kv.remember_agent(seq, "", "a", n, false);
  {
    std::lock_guard lock(mu);
    open = true;
  }
  cv.notify_all();
  for (int i = 0; i < 100 && d.kv.n_spills_queued() > 0; ++i) {
    disk->flush();
    d.kv.spill_queued(1 << 20);
  }
  disk->flush();
  const std::vector<Hash128> chain = agents.find("", "a")->chain;
  EXPECT_EQ(std::count_if(chain.begin(), chain.end(), [&](const Hash128& k) { return disk->on_disk(k); }), 6);
  EXPECT_EQ(disk->stats().n_dropped, 0);
  d.kv.release(seq);
}

// With a host tier whose copy is exact, spills go through it: the disk writes the host copy
// (lent, pinned until written), so each block leaves the device once, and evicting it later
// copies nothing; both tiers then restore it with its content.
// A device backend with a host tier and no disk (KvTiers::host_write_through): committed blocks
// are copied into the host tier behind the steps, so an eviction copies nothing and a returning
// agent's restore takes device blocks without demoting them first. Off, the host tier only
// receives evicted blocks.
TEST(KvTiers, HostWriteThroughCopiesCommittedBlocksSoEvictionCopiesNothing) {
  for (const bool through : {true, false}) {
    SCOPED_TRACE(through ? "write-through" : "demote on eviction");
    HostStore host(host_options(32));
    Device d(8);
    KvBlockIo io = d.deferred_io();
    std::int32_t n_reads = 0;
    io.start_read = [&n_reads, inner = io.start_read](BlockId b, std::span<std::byte> out) {
      ++n_reads;
      inner(b, out);
    };
    d.kv.attach_tiers({.host = &host, .host_write_through = through}, io);
    const Tokens a = iota_tokens(4 * kBs + 1, 10);  // 4 full blocks and one token
    d.run(a);  // commits and drains the spill queue
    EXPECT_EQ(n_reads, through ? 4 : 0);
    EXPECT_EQ(host.stats().n_blocks, through ? 4u : 0u);
    EXPECT_EQ(d.kv.n_spills_queued(), 0u);
    // Another prompt takes the whole pool: a's blocks are evicted.
    const std::int32_t before = n_reads;
    d.run(iota_tokens(7 * kBs + 1, 500));
    EXPECT_EQ(n_reads - before, through ? 7 : 4)
        << (through ? "the new prompt's 7 blocks written through; a's evicted with no copy" : "a's 4 blocks demoted");
    const std::int32_t before_return = n_reads;
    EXPECT_EQ(d.run(a), 4 * kBs) << "a returns from the host tier, with its content";
    EXPECT_EQ(d.last_host_restored, 4);
    // The restore took 4 device blocks of the other prompt: already in the host tier when
    // written through, else demoted now.
    EXPECT_EQ(n_reads - before_return, through ? 0 : 4);
  }
}

TEST(KvTiers, SpillsGoThroughTheHostTierAndEvictionCopiesNothingMore) {
  test::ScratchDir dir;
  DiskStoreOptions o = disk_options(dir.path);
  std::unique_ptr<DiskStore> disk = DiskStore::open_or_throw(o);
  HostStore host(host_options(32));
  Device d(8);
  KvBlockIo io = d.deferred_io();
  std::int32_t n_reads = 0;
  io.start_read = [&d, &n_reads, inner = io.start_read](BlockId b, std::span<std::byte> out) {
    ++n_reads;
    inner(b, out);
  };
  d.kv.attach_tiers({.host = &host, .disk = disk.get()}, io);
  const Tokens a = iota_tokens(4 * kBs + 1, 10);  // 4 full blocks and one token
  d.run(a);  // commits and drains the spill queue
  EXPECT_EQ(n_reads, 4) << "each block copied out once, into its host slot";
  EXPECT_EQ(host.stats().n_blocks, 4);
  disk->flush();
  EXPECT_EQ(disk->stats().n_written, 4) << "written from the host copies";
  // Another prompt takes the whole pool: a's blocks are evicted, already in the host tier.
  const std::int32_t before = n_reads;
  d.run(iota_tokens(7 * kBs + 1, 500));
  EXPECT_EQ(n_reads - before, 7) << "only the new prompt's blocks (spilled) were copied out";
  EXPECT_EQ(d.run(a), 4 * kBs) << "a returns from the host tier";
  EXPECT_EQ(d.last_host_restored, 4);
  disk->flush();
  Device fresh(8);
  fresh.kv.attach_tiers({.disk = disk.get()}, fresh.io());
  EXPECT_EQ(fresh.run(a), 4 * kBs) << "and from the disk, with its content";
  EXPECT_EQ(fresh.last_disk_restored, 4);
  // Every lent block was released: the host tier can give all 32 slots to other blocks.
  for (std::uint64_t i = 0; i < 32; ++i) {
    const Hash128 key{1000 + i, 7};
    ASSERT_FALSE(host.reserve(key, {}).empty()) << "slot " << i << ": a lent block is still pinned";
    host.publish(key);
  }
}

}  // namespace
}  // namespace akv

namespace akv {
namespace {

// Write-behind: commit only queues newly indexed blocks for the disk (the engine drains the
// queue between steps), spill_queued copies out at most the blocks asked for, and a waiting
// block evicted first is copied out before its reuse, so nothing queued is lost or torn.
TEST(KvTiers, CommitQueuesDiskSpillsAndEvictionCopiesAWaitingBlockFirst) {
  test::ScratchDir dir;
  DiskStoreOptions o = disk_options(dir.path);
  std::unique_ptr<DiskStore> disk = DiskStore::open_or_throw(o);
  Device d(8);
  d.kv.attach_tiers({.disk = disk.get()}, d.io());
  const Tokens a = iota_tokens(4 * kBs + 1, 10);  // 4 full blocks and one token
  const auto n = static_cast<std::int32_t>(a.size());
  KvSequence seq;
  EXPECT_EQ(d.kv.match(seq, a, ""), 0);
  ASSERT_TRUE(d.kv.allocate(seq, n));
  for (std::int32_t b = 0; b * kBs < n; ++b)
    d.mem[seq.block_table()[b]] = content(std::span(a).first(std::min(n, (b + 1) * kBs)));
  d.kv.commit(seq, a, n);
  EXPECT_EQ(d.kv.n_spills_queued(), 4u) << "commit copies nothing out";
  disk->flush();
  EXPECT_EQ(disk->stats().n_written, 0);
  EXPECT_EQ(d.kv.spill_queued(1), 1);
  disk->flush();
  EXPECT_EQ(disk->stats().n_written, 1);
  d.kv.release(seq);
  // Another prompt needs the whole pool: a's three waiting blocks are evicted, copied out first.
  d.run(iota_tokens(7 * kBs + 1, 500));
  EXPECT_EQ(d.kv.n_spills_queued(), 0u);
  disk->flush();
  Device fresh(8);
  fresh.kv.attach_tiers({.disk = disk.get()}, fresh.io());
  EXPECT_EQ(fresh.run(a), 4 * kBs) << "every block of a reached the disk with its content";
  EXPECT_EQ(fresh.last_disk_restored, 4);
}

}  // namespace
}  // namespace akv
