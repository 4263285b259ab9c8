// The scheduler's only view of KV memory (architecture.md §3): match a sequence against the
// prefix cache, allocate blocks for the positions it is about to compute, commit (index) the
// blocks it has filled, release it. Owns the block pool and the prefix index; the scheduler
// never sees tiers or device pointers, only `KvSequence::block_table()` for the runner.
// Engine thread only. None of these calls allocate memory except PrefixIndex's hash map and a
// sequence's first growth of its block vector.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "kv/block_pool.h"
#include "kv/prefix_index.h"

namespace akv {

// The blocks one sequence holds, in position order. Owned by the engine's sequence; only
// KvManager changes it.
class KvSequence {
 public:
  std::span<const std::int32_t> block_table() const { return blocks_; }
  std::int32_t n_blocks() const { return static_cast<std::int32_t>(blocks_.size()); }
  bool is_open() const { return open_; }

 private:
  friend class KvManager;
  std::vector<BlockId> blocks_;
  ChainKey tail_key_;           // key of blocks_[n_indexed_ - 1], or the namespace root
  std::int32_t n_indexed_ = 0;  // leading blocks that are in the prefix index
  bool open_ = false;
};

struct KvUsage {
  std::int32_t n_blocks = 0;
  std::int32_t n_free = 0;    // on the free list
  std::int32_t n_cached = 0;  // unreferenced but indexed: evictable, reusable by a match
  std::int32_t n_used = 0;    // referenced by at least one sequence
};

class KvManager {
 public:
  // Copies every layer's KV of block src into block dst (copy-on-write).
  using CopyBlockFn = std::function<void(BlockId src, BlockId dst)>;
  static CopyBlockFn backend_copier(Backend& backend, KvStorage& kv);

  KvManager(std::int32_t n_blocks, std::int32_t block_size, CopyBlockFn copy,
            ChainHashFn hash = xxh3_chain_hash);

  // Opens `seq` (which holds nothing) in namespace `ns` and shares the longest cached prefix of
  // `tokens`: whole blocks by reference, then a partially matching block by copy. Returns how
  // many leading tokens now have their KV in seq's blocks; always < tokens.size(), so the
  // caller still computes at least the last token (its logits are needed).
  std::int32_t match(KvSequence& seq, std::span<const std::int32_t> tokens, std::string_view ns);
  // Grows seq's blocks to cover positions [0, n_positions), evicting cached blocks if needed.
  // All or nothing: false (and no change) when not enough blocks are free or evictable.
  bool allocate(KvSequence& seq, std::int32_t n_positions);
  // Indexes seq's blocks that are full within the first `n_computed` tokens (prompt and
  // generated alike), so a later request extending these tokens reuses them. A block equal to
  // one indexed earlier is swapped for it (the shared copy is kept once).
  void commit(KvSequence& seq, std::span<const std::int32_t> tokens, std::int32_t n_computed);
  // Drops seq's references; indexed blocks stay cached (evictable), others become free.
  void release(KvSequence& seq);

  std::int32_t block_size() const { return pool_.block_size(); }
  // Blocks an allocate may still obtain (free + evictable).
  std::int32_t n_available() const { return pool_.n_free() + index_.n_evictable(); }
  KvUsage usage() const;
  // The seam for tiers and agent memory (evict listener, ...); tests inspect it too.
  PrefixIndex& index() { return index_; }
  const BlockPool& pool() const { return pool_; }

 private:
  BlockId take_block();          // free or evicted; ref count 1. Caller checked n_available().
  void acquire(BlockId block);   // one more reference to an existing block
  void drop(BlockId block);      // one reference less; at 0 cached if indexed, else freed

  BlockPool pool_;
  PrefixIndex index_;
  CopyBlockFn copy_;
};

}  // namespace akv
