// The host-RAM tier: KV blocks evicted from device memory, kept encoded (--kv-host-codec) in a
// fixed byte budget (--kv-host-bytes), keyed like the disk tier (block_key.h). A prefix hit here
// is restored with one decode and one copy to the device, much cheaper than a disk read.
//
// Which block goes when the budget is full is cost-aware (GreedyDual): each block's priority is
// L + weight(retention) * cost, where cost is what losing it would take to get back, in
// prefill-token equivalents: recomputing its block_size tokens at its depth in the chain
// (attention makes deep blocks dearer), or, when the disk tier holds it, a reload costing
// `disk_reload_fraction` of that. The block with the lowest priority goes and L rises to its
// priority, so blocks not used for a while age out whatever their cost; a hit refreshes a
// block's priority. The tier is inclusive: a block restored to the device keeps its host copy,
// so demoting it again costs nothing.
//
// Thread-safe (one mutex; the engine thread puts and gets, HTTP threads read sizes). Memory is
// one fixed-size slot per block, allocated on first use and recycled; nothing is allocated
// once the budget's slots exist.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_codec.h"
#include "kv/block_key.h"
#include "kv/retention.h"

namespace akv {

struct HostStoreOptions {
  std::size_t max_bytes = 0;  // encoded bytes held at most; a budget below one block holds none
  SpillCodec codec = SpillCodec::Native;
  BlockShape shape;             // of one block's raw bytes (Backend::read_kv_block layout)
  std::int32_t block_size = 0;  // tokens per block
  // Context length at which one token's attention costs as much as its matmuls
  // (~ parameters / (2 * n_layers * hidden)); deeper blocks cost more to recompute.
  double attention_equal_tokens = 4096.0;
  // Reloading a block from disk, as a fraction of recomputing it at depth 0.
  double disk_reload_fraction = 0.05;
  // True when the disk tier holds (or is writing) the block; null without a disk tier.
  std::function<bool(const Hash128& key)> on_disk;
};

// What a block needs besides its bytes: the chain check and the inputs of its cost.
struct HostBlockMeta {
  Hash128 parent;          // key of the previous block (or the root)
  Hash128 tokens_hash;     // BlockKeyer::tokens_hash of its tokens
  std::int32_t depth = 0;  // its index in the chain (0: first block)
  Retention retention = Retention::Normal;
};

struct HostStoreStats {
  std::int64_t n_blocks = 0;
  std::int64_t bytes = 0;  // encoded bytes held
  std::int64_t max_bytes = 0;
  std::int64_t n_put = 0;      // blocks demoted into the tier
  std::int64_t n_hits = 0;     // blocks restored from it
  std::int64_t n_evicted = 0;  // blocks dropped for room
};

class HostStore {
 public:
  explicit HostStore(HostStoreOptions options);
  HostStore(const HostStore&) = delete;
  HostStore& operator=(const HostStore&) = delete;

  bool contains(const Hash128& key) const;
  // The block's parent, tokens hash, depth and retention if held (for get); nullopt otherwise.
  std::optional<HostBlockMeta> find_meta(const Hash128& key) const;
  // If the block is held: refreshes its priority, raises its retention to meta's, returns true.
  bool touch(const Hash128& key, const HostBlockMeta& meta);
  // Encodes and keeps a block (`raw` in the shape's layout), dropping the lowest-priority blocks
  // if the budget is full. A block already held is only touched. False when the budget holds no
  // block at all.
  bool put(const Hash128& key, const HostBlockMeta& meta, std::span<const std::byte> raw);
  // Decodes the block into `raw` if held with this parent and tokens hash, refreshing its
  // priority; false otherwise (nothing changes).
  bool get(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
           std::span<std::byte> raw);
  void erase(const Hash128& key);
  // Sets the retention of the blocks held with these keys (pins and unpins).
  void set_retention(std::span<const Hash128> keys, Retention retention);

  // Encoded bytes held of the chain's blocks.
  std::int64_t stored_bytes(std::span<const Hash128> chain) const;
  std::size_t encoded_block_bytes() const { return slot_bytes_; }
  HostStoreStats stats() const;

 private:
  struct Entry {
    HostBlockMeta meta;
    std::int32_t slot = -1;
    std::map<std::pair<double, std::uint64_t>, Hash128>::iterator order;
  };

  bool touch_locked(const Hash128& key, const HostBlockMeta& meta);
  double cost_locked(const Hash128& key, const HostBlockMeta& meta) const;
  void reprioritise_locked(const Hash128& key, Entry& e);
  void evict_one_locked();
  std::int32_t take_slot_locked();

  HostStoreOptions options_;
  std::size_t slot_bytes_;
  std::size_t max_slots_;

  mutable std::mutex mu_;
  std::unordered_map<Hash128, Entry, Hash128Hasher> entries_;
  std::map<std::pair<double, std::uint64_t>, Hash128> order_;  // (priority, serial) -> key
  std::vector<std::unique_ptr<std::byte[]>> slots_;
  std::vector<std::int32_t> free_slots_;
  double inflation_ = 0.0;  // L: the priority of the last block evicted
  std::uint64_t serial_ = 0;
  HostStoreStats stats_;
};

}  // namespace akv
