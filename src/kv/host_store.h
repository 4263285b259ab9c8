// The host-RAM tier: KV blocks evicted from device memory, kept encoded (--kv-host-codec) in a
// fixed byte budget (--kv-host-bytes), keyed like the disk tier (block_key.h). A prefix hit here
// is restored straight from the block's slot (Backend::write_kv_blocks reads it in place: on
// CUDA the slots are page-locked, so the device decodes them with no host copy).
//
// Which block goes when the budget is full is cost-aware (GreedyDual): each block's priority is
// L + weight(retention) * cost, where cost is what losing it would take to get back, in
// prefill-token equivalents: recomputing its block_size tokens at its depth in the chain
// (attention makes deep blocks dearer), or, when the disk tier holds it, a reload costing
// `disk_reload_fraction` of that. The block with the lowest priority goes and L rises to its
// priority, so blocks not used for a while age out whatever their cost; a hit refreshes a
// block's priority. The tier is inclusive: a block restored to the device keeps its host copy,
// so demoting it again costs nothing. A pinned block (pin: a copy reads its slot) and a reserved
// one (reserve: a copy fills it) are never evicted or reused.
//
// A block is held in the store's codec, or in a more compact one given at reserve (a disk block
// loaded in the disk's int8 form into a native tier's slot, for the device to decode on restore):
// pin, lend and get go by each block's own codec.
//
// Thread-safe: one mutex guards the index (entries, priorities, free slots), never the bytes:
// put and get encode and decode outside it, into and out of a slot pinned meanwhile. Memory is
// fixed-size slots, 256-byte aligned, carved from chunks of Options::alloc (allocated ahead on
// a thread of the store's own with allocate_ahead, else on first use under the lock; then
// recycled); nothing is allocated once the budget's chunks exist.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/tier_io.h"
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
  // The slots' memory, in chunks (Backend::alloc_host: page-locked on CUDA); null: plain memory.
  std::function<std::unique_ptr<HostMemory>(std::size_t bytes)> alloc;
  // Allocate the whole budget's chunks on a thread of the store's own from the start, so no
  // demotion waits for one (page-locking 64 MiB takes milliseconds); otherwise on first use.
  bool allocate_ahead = false;
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
  ~HostStore();  // stops the allocating thread
  HostStore(const HostStore&) = delete;
  HostStore& operator=(const HostStore&) = delete;

  // Held and readable (not a reservation still being filled, not erased).
  bool contains(const Hash128& key) const;
  // The block's parent, tokens hash, depth and retention if held (for get); nullopt otherwise.
  std::optional<HostBlockMeta> find_meta(const Hash128& key) const;
  // If the block is held: refreshes its priority, raises its retention to meta's, returns true.
  bool touch(const Hash128& key, const HostBlockMeta& meta);
  // Encodes and keeps a block (`raw` in the shape's layout), dropping the lowest-priority blocks
  // if the budget is full. A block already held is only touched. False when it was not kept:
  // the budget holds no block at all, or every slot is pinned or reserved.
  bool put(const Hash128& key, const HostBlockMeta& meta, std::span<const std::byte> raw);
  // Decodes the block into `raw` if held with this parent and tokens hash, refreshing its
  // priority; false otherwise (nothing changes).
  bool get(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
           std::span<std::byte> raw);

  // Restoring in place: if the block is held with this parent and tokens hash, refreshes its
  // priority, counts a hit, pins it and returns its encoded bytes (in `*codec`, when given: the
  // block's codec), valid and unchanged until the matching unpin(key); empty otherwise. Pins nest.
  std::span<const std::byte> pin(const Hash128& key, const Hash128& parent,
                                 const Hash128& tokens_hash, SpillCodec* codec = nullptr);
  void unpin(const Hash128& key);
  // Pins a held block for a copy of its encoded bytes (in `*codec`, when given) without counting
  // a hit or refreshing its priority (the disk tier's write-through); empty when not held.
  // Released by unpin.
  std::span<const std::byte> lend(const Hash128& key, SpillCodec* codec = nullptr);
  // Demoting in place: a slot for the block's bytes encoded with `codec` (default: codec(); another
  // must fit a slot: encoded_bytes(codec) <= encoded_block_bytes()), dropping the
  // lowest-priority unpinned block if the budget is full. The caller fills it, then calls
  // publish(key) (the block is held from then on) or abandon(key). Empty when the key is held
  // or reserved already, or no slot can be had.
  std::span<std::byte> reserve(const Hash128& key, const HostBlockMeta& meta,
                               std::optional<SpillCodec> codec = std::nullopt);
  // Whether reserve takes blocks encoded with `codec`.
  bool holds_codec(SpillCodec codec) const { return encoded_bytes(codec, options_.shape) <= slot_bytes_; }
  void publish(const Hash128& key);
  void abandon(const Hash128& key);

  // Drops the block; a pinned one stays readable by its pinners until the last unpin.
  void erase(const Hash128& key);
  // Sets the retention of the blocks held with these keys (pins and unpins).
  void set_retention(std::span<const Hash128> keys, Retention retention);

  // Encoded bytes held of the chain's blocks.
  std::int64_t stored_bytes(std::span<const Hash128> chain) const;
  std::size_t encoded_block_bytes() const { return slot_bytes_; }
  SpillCodec codec() const { return options_.codec; }
  const BlockShape& shape() const { return options_.shape; }
  HostStoreStats stats() const;

 private:
  using Order = std::map<std::pair<double, std::uint64_t>, Hash128>;
  struct Entry {
    HostBlockMeta meta;
    std::int32_t slot = -1;
    SpillCodec codec = SpillCodec::Native;  // of its bytes: the store's, or the one given at reserve
    std::int32_t pins = 0;  // readers of the slot, plus one while reserved
    bool ready = false;     // published (put or publish); false: reserved, being filled
    bool erased = false;    // erased while pinned: freed at the last unpin
    Order::iterator order;  // end() while reserved or erased
  };

  bool touch_locked(const Hash128& key, const HostBlockMeta& meta);
  double cost_locked(const Hash128& key, const HostBlockMeta& meta) const;
  void reprioritise_locked(const Hash128& key, Entry& e);
  // Drops the lowest-priority unpinned block; false when every held block is pinned.
  bool evict_one_locked();
  // A free slot (allocating a chunk or evicting); -1 when none can be had.
  std::int32_t take_slot_locked();
  void free_entry_locked(std::unordered_map<Hash128, Entry, Hash128Hasher>::iterator it);
  std::byte* slot_data(std::int32_t slot) const;
  // The block's encoded bytes in its slot (its own codec's size).
  std::span<const std::byte> bytes_locked(const Entry& e) const;
  // Unpins a reservation or reader: publishes, abandons or frees as the entry's state says.
  void release_locked(const Hash128& key, bool publish);
  // Slots the next chunk holds (0: the budget's chunks all exist).
  std::size_t next_chunk_slots_locked() const;
  void allocate_ahead();  // the allocating thread

  HostStoreOptions options_;
  std::size_t slot_bytes_;   // encoded bytes of one block
  std::size_t slot_stride_;  // slot_bytes_ rounded up to 256
  std::size_t max_slots_;
  std::size_t slots_per_chunk_;

  mutable std::mutex mu_;
  std::unordered_map<Hash128, Entry, Hash128Hasher> entries_;
  Order order_;  // (priority, serial) -> key of the published blocks
  std::vector<std::unique_ptr<HostMemory>> chunks_;
  std::size_t n_slots_ = 0;  // slots carved from chunks_ so far
  std::vector<std::int32_t> free_slots_;
  std::int64_t n_ready_ = 0;  // published, not erased
  double inflation_ = 0.0;    // L: the priority of the last block evicted
  std::uint64_t serial_ = 0;
  HostStoreStats stats_;
  std::atomic<bool> stop_allocating_{false};
  std::thread allocator_;  // last: starts after everything above exists
};

}  // namespace akv
