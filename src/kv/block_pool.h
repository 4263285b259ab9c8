// A fixed set of KV blocks (each `block_size` token positions across all layers) with reference
// counts and a free list. Knows nothing of tokens or hashes (prefix_index.h) or of sequences
// (kv_manager.h). Engine thread only; no allocation after construction.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace akv {

using BlockId = std::int32_t;

// Where a block's KV lives. Only Device exists today; the host/disk tiers will move blocks
// between locations without changing their ids as the scheduler sees them.
enum class BlockLocation : std::uint8_t { Device, Host, Disk };

class BlockPool {
 public:
  BlockPool(std::int32_t n_blocks, std::int32_t block_size);

  std::int32_t n_blocks() const { return static_cast<std::int32_t>(ref_count_.size()); }
  std::int32_t block_size() const { return block_size_; }
  std::int32_t n_free() const { return static_cast<std::int32_t>(free_.size()); }

  // A free block with ref count 1, or nullopt when the free list is empty.
  std::optional<BlockId> take_free();
  // Returns a block with ref count 0 to the free list.
  void put_free(BlockId block);

  void add_ref(BlockId block);
  // Drops one reference; returns the count left. The caller decides what a 0 means (free it,
  // or keep it as an evictable cached block).
  std::int32_t drop_ref(BlockId block);
  std::int32_t ref_count(BlockId block) const;
  bool is_free(BlockId block) const { return is_free_[check_id(block)]; }

  BlockLocation location(BlockId block) const { return location_[check_id(block)]; }

 private:
  std::size_t check_id(BlockId block) const;

  std::int32_t block_size_;
  std::vector<std::int32_t> ref_count_;  // [n_blocks]
  std::vector<bool> is_free_;            // [n_blocks]
  std::vector<BlockLocation> location_;  // [n_blocks]
  std::vector<BlockId> free_;            // stack; lowest ids handed out first
};

}  // namespace akv
