// Content-addressed index of full KV blocks. A block's key is a hash chain
// H(parent key, the block's token ids), rooted at H(namespace), so equal prefixes in one
// namespace (tenant) map to one block and other namespaces never see it. Lookups always verify
// token ids, parent identity and namespace: a hash match alone is never a hit.
// Indexed blocks whose ref count is 0 stay cached and evictable: Low retention before Normal
// before High (retention.h), each least recently released first; orphans before all.
// Engine thread only. Memory per block is preallocated; only the hash map and new namespaces
// allocate.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/retention.h"

namespace akv {

// Names a position in a chain: the root of a namespace (entry == 0) or an indexed block.
struct ChainKey {
  std::uint64_t hash = 0;
  std::uint64_t entry = 0;  // unique per indexed block, never reused
  std::uint32_t ns = 0;     // interned namespace
  BlockId block = -1;       // the indexed block; -1 for a root
};

// H(parent hash, token ids of one block). Replaceable so tests can force collisions.
using ChainHashFn = std::uint64_t (*)(std::uint64_t parent_hash,
                                      std::span<const std::int32_t> tokens);
std::uint64_t xxh3_chain_hash(std::uint64_t parent_hash, std::span<const std::int32_t> tokens);

struct PartialMatch {
  BlockId block = -1;  // -1: no child shares a first token
  std::int32_t n_tokens = 0;
};

class PrefixIndex {
 public:
  PrefixIndex(std::int32_t n_blocks, std::int32_t block_size, ChainHashFn hash = xxh3_chain_hash);

  // The root key of namespace `ns` (interned on first use).
  ChainKey root(std::string_view ns);

  // The indexed block whose parent is `parent` and whose tokens equal `tokens` (block_size of
  // them), verified on ids; nullopt when none.
  std::optional<BlockId> find(const ChainKey& parent, std::span<const std::int32_t> tokens) const;
  // The indexed child of `parent` sharing the longest run of leading tokens with `tokens`.
  PartialMatch find_partial(const ChainKey& parent, std::span<const std::int32_t> tokens) const;

  // Indexes `block` (holding `tokens`) under `parent`. Returns the block now indexed for that
  // content: `block`, or an equal block indexed earlier (the caller then shares that one).
  BlockId insert(const ChainKey& parent, std::span<const std::int32_t> tokens, BlockId block);
  bool contains(BlockId block) const { return entries_[block].id != 0; }
  ChainKey key_of(BlockId block) const;

  // Ref count reached 0 / rose from 0: the block becomes evictable / stops being evictable.
  void on_unreferenced(BlockId block);
  void on_referenced(BlockId block);
  // Raises (or, with `lower`, sets) an indexed block's retention class.
  void set_retention(BlockId block, Retention retention, bool lower = false);
  Retention retention_of(BlockId block) const { return entries_[block].retention; }
  // Drops the first evictable block (orphans, then Low, Normal, High retention, each least
  // recently released first) from the index and returns it (now an ordinary unreferenced
  // block); nullopt when nothing is evictable. Calls the evict listener first (the host tier
  // saves the block there).
  std::optional<BlockId> evict_one();
  // Drops `block` from the index like evict_one (listener first) if it is evictable; false when
  // it is not indexed or still referenced.
  bool evict(BlockId block);
  void set_evict_listener(std::function<void(BlockId, std::uint64_t hash)> fn) {
    on_evict_ = std::move(fn);
  }

  std::int32_t n_evictable() const { return n_evictable_; }
  std::int32_t n_indexed() const { return n_indexed_; }

 private:
  struct Entry {
    std::uint64_t id = 0;  // 0: not indexed
    std::uint64_t hash = 0;
    std::uint64_t parent_id = 0;
    std::uint32_t ns = 0;
    BlockId parent_block = -1;  // -1: a namespace root's child, or orphaned
    BlockId first_child = -1, next_sibling = -1, prev_sibling = -1;
    BlockId lru_prev = -1, lru_next = -1;
    bool evictable = false;
    Retention retention = Retention::Normal;
    std::uint8_t lru_list = 0;  // which of lru_head_/lru_tail_ holds it while evictable
  };
  // One LRU list per retention class, plus one for orphans (evicted first).
  static constexpr int kOrphanList = 0;
  static constexpr int kLruLists = 1 + kRetentionLevels;
  static int list_of(Retention r) { return 1 + retention_index(r); }

  std::span<const std::int32_t> tokens_of(BlockId b) const;
  // The head of `parent`'s child list; nullptr when `parent` is no longer indexed.
  BlockId* first_child_of(const ChainKey& parent);
  const BlockId* first_child_of(const ChainKey& parent) const;
  void unlink_sibling(BlockId b);
  void lru_push_back(BlockId b, int list);
  void lru_remove(BlockId b);
  void remove(BlockId b);

  std::int32_t block_size_;
  ChainHashFn hash_;
  std::vector<Entry> entries_;        // [n_blocks]
  std::vector<std::int32_t> tokens_;  // [n_blocks * block_size]
  std::unordered_multimap<std::uint64_t, BlockId> by_hash_;
  std::unordered_map<std::string, std::uint32_t> ns_ids_;
  std::vector<std::uint64_t> ns_hash_;   // [n_namespaces]
  std::vector<BlockId> ns_first_child_;  // [n_namespaces]
  BlockId lru_head_[kLruLists] = {-1, -1, -1, -1}, lru_tail_[kLruLists] = {-1, -1, -1, -1};
  std::int32_t n_evictable_ = 0, n_indexed_ = 0;
  std::uint64_t next_id_ = 1;
  std::function<void(BlockId, std::uint64_t)> on_evict_;
};

}  // namespace akv
