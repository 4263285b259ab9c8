// Loads from the disk tier as a restore after a restart does them: payloads read in pieces and
// checksummed piece by piece give the file's bytes (native and int8) and reject a damaged byte
// in any piece or a truncated file; a restorer's threads load chains into host slots, in the
// disk's int8 form when the device decodes (a native host tier's slot then holds int8 bytes, and
// the match's batched write gets them as int8), stop a chain at a damaged block in its middle,
// and load two agents at once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <span>
#include <thread>

#include "kv/disk_format.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "kv/kv_manager.h"
#include "kv/restorer.h"
#include "tier_test_util.h"

namespace akv {
namespace {

using test::ScratchDir;

// bf16 blocks of 4 layers x 4 tokens x 8,320 channels: 520 KiB raw (two 256 KiB read pieces and
// a part), about 400 KiB in int8 (one piece and a part).
constexpr std::int32_t kBs = 4;
constexpr BlockShape kShape{
    .n_rows = 2 * 4 * kBs, .row_width = 8320, .dtype = DType::BF16, .block_size = kBs};

std::vector<std::byte> kv_block(std::uint64_t seed) {
  const std::vector<std::byte> f32 = test::block_content(
      {.n_rows = kShape.n_rows, .row_width = kShape.row_width, .dtype = DType::F32}, seed);
  std::vector<float> values(f32.size() / 4);
  std::memcpy(values.data(), f32.data(), f32.size());
  return test::raw_from_floats(values, DType::BF16);
}

std::vector<std::byte> encoded(SpillCodec codec, std::span<const std::byte> raw) {
  std::vector<std::byte> out(encoded_bytes(codec, kShape));
  encode_block(codec, kShape, raw, out);
  return out;
}

std::vector<std::byte> decoded(SpillCodec codec, std::span<const std::byte> in) {
  std::vector<std::byte> raw(kShape.raw_bytes());
  decode_block(codec, kShape, in, raw);
  return raw;
}

DiskStoreOptions disk_options(const std::string& dir, SpillCodec codec) {
  DiskStoreOptions o;
  o.dir = dir;
  o.fingerprint = {3, 4};
  o.codec = codec;
  o.shape = kShape;
  o.block_size = kBs;
  return o;
}

// A chain of n blocks on `disk` (block i's content: kv_block(seed + i)).
std::vector<RestoreJob::Block> write_chain(DiskStore& disk, std::int32_t n, std::uint64_t seed) {
  const BlockKeyer& keys = disk.keyer();
  std::vector<RestoreJob::Block> chain;
  Hash128 parent = keys.root("t");
  for (std::int32_t i = 0; i < n; ++i) {
    const std::vector<std::int32_t> tokens{static_cast<std::int32_t>(seed) + i};
    const Hash128 key = keys.next(parent, tokens);
    EXPECT_TRUE(disk.put(key, parent, keys.tokens_hash(tokens),
                         kv_block(seed + static_cast<std::uint64_t>(i))));
    chain.push_back(
        {.key = key, .parent = parent, .tokens_hash = keys.tokens_hash(tokens), .depth = i});
    parent = key;
  }
  disk.flush();
  return chain;
}

std::string file_of(const std::string& dir, const Hash128& key) {
  return dir + "/blocks/" + key.hex() + ".kvb";
}

// Flips one byte `from_end` bytes before the end of the file.
void damage(const std::string& path, std::size_t from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  const auto at = static_cast<std::streamoff>(f.tellg()) - static_cast<std::streamoff>(from_end);
  f.seekg(at);
  char c = 0;
  f.get(c);
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x40));
}

// Runs jobs on a restorer and waits for them.
class Jobs {
 public:
  Jobs(DiskStore* disk, HostStore* host, bool device_decodes, int n_threads)
      : restorer(
            disk,
            [this] {
              std::lock_guard lock(mu_);
              ++n_done_;
              cv_.notify_all();
            },
            Restorer::kDefaultMaxBytes, n_threads, host, device_decodes) {}
  void wait_for(int n_done) {
    std::unique_lock lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(20), [&] { return n_done_ >= n_done; }));
  }
  Restorer restorer;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_done_ = 0;
};

HostStoreOptions host_options(SpillCodec codec, std::size_t n_blocks) {
  HostStoreOptions o;
  o.codec = codec;
  o.shape = kShape;
  o.block_size = kBs;
  o.max_bytes = n_blocks * encoded_bytes(codec, kShape);
  return o;
}

TEST(DiskLoad, AChecksumTakenInPiecesIsTheWholePayloadsChecksum) {
  const std::vector<std::byte> payload = kv_block(1);
  for (const std::size_t piece :
       {std::size_t{1}, std::size_t{4095}, std::size_t{256} << 10, payload.size()}) {
    PayloadChecksum sum;
    for (std::size_t at = 0; at < payload.size(); at += piece)
      sum.update(std::span(payload).subspan(at, std::min(piece, payload.size() - at)));
    EXPECT_EQ(sum.digest(), payload_checksum(payload)) << "pieces of " << piece;
  }
  EXPECT_NE(PayloadChecksum().digest(), payload_checksum(payload));
}

TEST(DiskLoad, NativeAndInt8FilesLoadAsTheirBytesDecodedOrAsStored) {
  for (const SpillCodec codec : {SpillCodec::Native, SpillCodec::Int8}) {
    ScratchDir dir;
    std::vector<RestoreJob::Block> chain;
    {
      auto disk = DiskStore::open_or_throw(disk_options(dir.path, codec));
      chain = write_chain(*disk, 3, 10);
    }
    auto disk = DiskStore::open_or_throw(disk_options(dir.path, codec));  // a restart
    for (std::size_t i = 0; i < chain.size(); ++i) {
      const std::vector<std::byte> raw = kv_block(10 + i);
      const std::vector<std::byte> stored = codec == SpillCodec::Native ? raw : encoded(codec, raw);
      std::vector<std::byte> out(kShape.raw_bytes());
      ASSERT_TRUE(disk->load(chain[i].key, chain[i].parent, chain[i].tokens_hash, out));
      EXPECT_EQ(out, decoded(codec, stored)) << spill_codec_name(codec) << " block " << i;
      std::vector<std::byte> as_stored(encoded_bytes(codec, kShape));
      ASSERT_TRUE(
          disk->load_as(chain[i].key, chain[i].parent, chain[i].tokens_hash, codec, as_stored));
      EXPECT_EQ(as_stored, stored) << spill_codec_name(codec) << " block " << i;
    }
    EXPECT_EQ(disk->stats().rejected_corrupt, 0);
  }
}

TEST(DiskLoad, ADamagedByteInAnyPieceOrATruncatedFileIsRejectedAndRemoved) {
  for (const SpillCodec codec : {SpillCodec::Native, SpillCodec::Int8}) {
    ScratchDir dir;
    std::vector<RestoreJob::Block> chain;
    {
      auto disk = DiskStore::open_or_throw(disk_options(dir.path, codec));
      chain = write_chain(*disk, 4, 20);
    }
    const std::size_t payload = encoded_bytes(codec, kShape);
    damage(file_of(dir.path, chain[0].key), payload);  // the payload's first byte
    damage(file_of(dir.path, chain[1].key), 1);        // its last byte (the last piece)
    std::filesystem::resize_file(file_of(dir.path, chain[2].key), kBlockHeaderBytes + payload - 1);
    // Opened before the damage shows at start-up: the scan checks sizes, so truncate after it.
    auto disk = DiskStore::open_or_throw(disk_options(dir.path, codec));
    std::filesystem::resize_file(file_of(dir.path, chain[3].key), kBlockHeaderBytes + payload / 2);
    const std::int64_t rejected_at_start = disk->stats().rejected_corrupt;
    EXPECT_EQ(rejected_at_start, 1) << "the truncated file is found by the start-up scan";
    std::vector<std::byte> out(kShape.raw_bytes());
    for (const std::size_t i : {0u, 1u, 3u}) {
      EXPECT_FALSE(disk->load(chain[i].key, chain[i].parent, chain[i].tokens_hash, out))
          << spill_codec_name(codec) << " block " << i;
    }
    disk->flush();  // the removals are queued for the IO thread
    EXPECT_EQ(disk->stats().rejected_corrupt, rejected_at_start + 3);
    for (const auto& b : chain) EXPECT_FALSE(std::filesystem::exists(file_of(dir.path, b.key)));
  }
}

TEST(DiskLoad, WhenTheDeviceDecodesANativeHostSlotKeepsTheDisksInt8Bytes) {
  ScratchDir dir;
  auto disk = DiskStore::open_or_throw(disk_options(dir.path, SpillCodec::Int8));
  const std::vector<RestoreJob::Block> chain = write_chain(*disk, 6, 30);
  for (const bool device_decodes : {false, true}) {
    HostStore host(host_options(SpillCodec::Native, 8));
    Jobs jobs(disk.get(), &host, device_decodes, 3);
    {
      auto job = std::make_shared<RestoreJob>(chain, kShape.raw_bytes());
      jobs.restorer.submit(job);
      jobs.wait_for(1);
      ASSERT_EQ(job->n_loaded(), 6);
    }
    for (std::size_t i = 0; i < chain.size(); ++i) {
      const std::vector<std::byte> int8 = encoded(SpillCodec::Int8, kv_block(30 + i));
      SpillCodec codec = SpillCodec::F32;
      const std::span<const std::byte> slot =
          host.pin(chain[i].key, chain[i].parent, chain[i].tokens_hash, &codec);
      ASSERT_FALSE(slot.empty());
      if (device_decodes) {
        EXPECT_EQ(codec, SpillCodec::Int8);
        EXPECT_TRUE(std::ranges::equal(slot, int8))
            << "block " << i << ": the file's payload as it is";
      } else {
        EXPECT_EQ(codec, SpillCodec::Native);
        EXPECT_TRUE(std::ranges::equal(slot, decoded(SpillCodec::Int8, int8))) << "block " << i;
      }
      host.unpin(chain[i].key);
      // Either way the host tier gives the same raw block back (get decodes by the block's codec).
      std::vector<std::byte> raw(kShape.raw_bytes());
      ASSERT_TRUE(host.get(chain[i].key, chain[i].parent, chain[i].tokens_hash, raw));
      EXPECT_EQ(raw, decoded(SpillCodec::Int8, int8));
    }
  }
}

TEST(DiskLoad, AChainStopsAtADamagedBlockInItsMiddleWhateverTheThreadsFinishFirst) {
  for (const SpillCodec codec : {SpillCodec::Native, SpillCodec::Int8}) {
    ScratchDir dir;
    std::vector<RestoreJob::Block> chain;
    {
      auto disk = DiskStore::open_or_throw(disk_options(dir.path, codec));
      chain = write_chain(*disk, 12, 40);
    }
    damage(file_of(dir.path, chain[5].key), 100);
    auto disk = DiskStore::open_or_throw(disk_options(dir.path, codec));
    HostStore host(host_options(SpillCodec::Native, 16));
    Jobs jobs(disk.get(), &host, /*device_decodes=*/true, 4);
    auto job = std::make_shared<RestoreJob>(chain, kShape.raw_bytes());
    jobs.restorer.submit(job);
    jobs.wait_for(1);
    EXPECT_EQ(job->n_loaded(), 5) << spill_codec_name(codec)
                                  << ": the blocks before the damaged one";
    for (std::int32_t i = 0; i < 5; ++i)
      EXPECT_TRUE(host.contains(chain[static_cast<std::size_t>(i)].key));
    EXPECT_FALSE(host.contains(chain[5].key)) << "nothing half-loaded is published";
    disk->flush();
    EXPECT_EQ(disk->stats().rejected_corrupt, 1);
  }
}

TEST(DiskLoad, TwoAgentsLoadAtOnceEachIntoItsOwnSlots) {
  ScratchDir dir;
  auto disk = DiskStore::open_or_throw(disk_options(dir.path, SpillCodec::Int8));
  const std::vector<RestoreJob::Block> a = write_chain(*disk, 10, 100);
  const std::vector<RestoreJob::Block> b = write_chain(*disk, 10, 200);
  HostStore host(host_options(SpillCodec::Native, 24));
  Jobs jobs(disk.get(), &host, /*device_decodes=*/true, 4);
  auto job_a = std::make_shared<RestoreJob>(a, kShape.raw_bytes());
  auto job_b = std::make_shared<RestoreJob>(b, kShape.raw_bytes());
  std::thread other([&] { jobs.restorer.submit(job_b); });
  jobs.restorer.submit(job_a);
  other.join();
  jobs.wait_for(2);
  ASSERT_EQ(job_a->n_loaded(), 10);
  ASSERT_EQ(job_b->n_loaded(), 10);
  for (const auto& [chain, seed] : {std::pair{&a, 100u}, std::pair{&b, 200u}})
    for (std::size_t i = 0; i < chain->size(); ++i) {
      const RestoreJob::Block& k = (*chain)[i];
      const std::span<const std::byte> slot = host.pin(k.key, k.parent, k.tokens_hash);
      EXPECT_TRUE(std::ranges::equal(slot, encoded(SpillCodec::Int8, kv_block(seed + i))))
          << seed << " " << i;
      host.unpin(k.key);
    }
}

// A KV manager over an in-memory device whose batched write records each block's codec.
struct Device {
  explicit Device(std::int32_t n_blocks)
      : mem(static_cast<std::size_t>(n_blocks), std::vector<std::byte>(kShape.raw_bytes())),
        kv(n_blocks, kBs, [this](BlockId s, BlockId d) { mem[d] = mem[s]; }) {}
  KvBlockIo io() {
    KvBlockIo io = test::memory_block_io(mem, kShape.raw_bytes());
    io.write_blocks = [this](std::span<const EncodedKvBlock> blocks) {
      for (const EncodedKvBlock& b : blocks) {
        codecs.push_back(b.codec);
        decode_block(b.codec, kShape, b.bytes, mem[static_cast<std::size_t>(b.block)]);
      }
      return std::uint64_t{0};
    };
    return io;
  }
  std::vector<std::vector<std::byte>> mem;
  KvManager kv;
  std::vector<SpillCodec> codecs;  // of the blocks written by write_blocks
};

// A first server of `pool_blocks` device blocks computes the first `n` blocks of `tokens`
// (block b's content: kv_block(seed + b)), commits them and writes them to `disk`. Returns
// their contents in `blocks`; `matched` gets what its first match found.
void first_server_writes(DiskStore& disk, std::span<const std::int32_t> tokens, std::int32_t n, std::uint64_t seed,
                         std::int32_t pool_blocks, std::vector<std::vector<std::byte>>& blocks,
                         std::int32_t* matched = nullptr) {
  Device first(pool_blocks);
  first.kv.attach_tiers({.disk = &disk}, first.io());
  KvSequence seq;
  const std::int32_t m = first.kv.match(seq, tokens, "");
  if (matched != nullptr) *matched = m;
  ASSERT_TRUE(first.kv.allocate(seq, static_cast<std::int32_t>(tokens.size())));
  for (std::int32_t b = 0; b < n; ++b) {
    blocks.push_back(kv_block(seed + static_cast<std::uint64_t>(b)));
    first.mem[static_cast<std::size_t>(seq.block_table()[b])] = blocks.back();
  }
  first.kv.commit(seq, tokens, static_cast<std::int32_t>(tokens.size()));
  first.kv.spill_queued(1 << 20);
  first.kv.release(seq);
  disk.flush();
}

TEST(DiskLoad, AMatchWritesTheInt8HostSlotsAsInt8ToTheDevice) {
  ScratchDir dir;
  std::vector<std::int32_t> tokens(5 * kBs + 1);
  std::iota(tokens.begin(), tokens.end(), 7);
  auto disk = DiskStore::open_or_throw(disk_options(dir.path, SpillCodec::Int8));
  std::vector<std::vector<std::byte>> blocks;  // what the first server computed
  std::int32_t first_matched = -1;
  ASSERT_NO_FATAL_FAILURE(first_server_writes(*disk, tokens, 5, 300, 8, blocks, &first_matched));
  EXPECT_EQ(first_matched, 0);
  HostStore host(host_options(SpillCodec::Native, 8));
  Restorer restorer(
      disk.get(), [] {}, Restorer::kDefaultMaxBytes, 2, &host, /*device_decodes=*/true);
  Device d(8);
  d.kv.attach_tiers({.host = &host, .disk = disk.get(), .restorer = &restorer}, d.io());
  KvSequence seq;
  ASSERT_TRUE(d.kv.restore_pending(seq, tokens, ""));
  for (int i = 0; i < 2000 && d.kv.restore_pending(seq, tokens, ""); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(d.kv.match(seq, tokens, ""), 5 * kBs);
  EXPECT_EQ(seq.n_restored_blocks(), 5);
  EXPECT_EQ(d.codecs, std::vector<SpillCodec>(5, SpillCodec::Int8))
      << "decoded by the device's write";
  for (std::int32_t b = 0; b < 5; ++b)
    EXPECT_EQ(
        d.mem[static_cast<std::size_t>(seq.block_table()[b])],
        decoded(SpillCodec::Int8, encoded(SpillCodec::Int8, blocks[static_cast<std::size_t>(b)])));
  d.kv.release(seq);
}

TEST(DiskLoad, ARunningLoadsLeadingBlocksReachTheDeviceBeforeItEnds) {
  ScratchDir dir;
  std::vector<std::int32_t> tokens(8 * kBs + 1);
  std::iota(tokens.begin(), tokens.end(), 11);
  std::vector<std::vector<std::byte>> blocks;
  {
    auto disk = DiskStore::open_or_throw(disk_options(dir.path, SpillCodec::Int8));
    ASSERT_NO_FATAL_FAILURE(first_server_writes(*disk, tokens, 8, 500, 10, blocks));
  }
  // After a restart, a disk that gives 5 blocks and then waits.
  test::Gate gate;
  std::mutex mu;
  int n_loads = 0;
  DiskStoreOptions o = disk_options(dir.path, SpillCodec::Int8);
  o.before_load = [&](bool) {
    std::unique_lock lock(mu);
    if (++n_loads == 6) {
      lock.unlock();
      gate.wait();
    }
  };
  auto disk = DiskStore::open_or_throw(o);
  HostStore host(host_options(SpillCodec::Native, 10));
  std::atomic<int> n_progress{0};
  Restorer restorer(disk.get(), [] {}, Restorer::kDefaultMaxBytes, 1, &host, /*device_decodes=*/true,
                    [&] { ++n_progress; });
  Device d(10);
  d.kv.attach_tiers({.host = &host, .disk = disk.get(), .restorer = &restorer}, d.io());
  KvSequence seq;
  ASSERT_TRUE(d.kv.restore_pending(seq, tokens, ""));
  gate.wait_entered();  // 5 blocks loaded, the 6th waits
  EXPECT_EQ(n_progress.load(), 2) << "a step is a quarter of the job: 2 blocks";
  EXPECT_TRUE(d.kv.restore_pending(seq, tokens, "")) << "still loading";
  EXPECT_EQ(d.codecs.size(), 5u) << "the blocks loaded so far are written to the device already";
  gate.release();
  for (int i = 0; i < 2000 && d.kv.restore_pending(seq, tokens, ""); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(d.kv.match(seq, tokens, ""), 8 * kBs);
  EXPECT_EQ(d.codecs.size(), 8u) << "each block written once (the early ones are device hits now)";
  EXPECT_EQ(seq.n_restored_blocks(), 8) << "the early blocks count as restored from disk too";
  EXPECT_EQ(seq.n_host_restored_blocks(), 0);
  for (std::int32_t b = 0; b < 8; ++b)
    EXPECT_EQ(d.mem[static_cast<std::size_t>(seq.block_table()[b])],
              decoded(SpillCodec::Int8, encoded(SpillCodec::Int8, blocks[static_cast<std::size_t>(b)])))
        << "block " << b;
  d.kv.release(seq);
}

}  // namespace
}  // namespace akv
