#include "kv/block_pool.h"

#include "base/check.h"

namespace akv {

BlockPool::BlockPool(std::int32_t n_blocks, std::int32_t block_size)
    : block_size_(block_size),
      ref_count_(n_blocks, 0),
      is_free_(n_blocks, true),
      location_(n_blocks, BlockLocation::Device) {
  AKV_CHECK(n_blocks > 0 && block_size > 0, "block pool needs blocks of at least one position");
  free_.reserve(n_blocks);
  for (BlockId b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::size_t BlockPool::check_id(BlockId block) const {
  AKV_CHECK(block >= 0 && block < n_blocks(), "block id out of range");
  return static_cast<std::size_t>(block);
}

std::optional<BlockId> BlockPool::take_free() {
  if (free_.empty()) return std::nullopt;
  const BlockId b = free_.back();
  free_.pop_back();
  is_free_[b] = false;
  ref_count_[b] = 1;
  return b;
}

void BlockPool::put_free(BlockId block) {
  const std::size_t i = check_id(block);
  AKV_CHECK(!is_free_[i], "block freed twice");
  AKV_CHECK(ref_count_[i] == 0, "freeing a block that is still referenced");
  is_free_[i] = true;
  free_.push_back(block);
}

void BlockPool::add_ref(BlockId block) {
  const std::size_t i = check_id(block);
  AKV_CHECK(!is_free_[i], "referencing a free block");
  ++ref_count_[i];
}

std::int32_t BlockPool::drop_ref(BlockId block) {
  const std::size_t i = check_id(block);
  AKV_CHECK(!is_free_[i] && ref_count_[i] > 0, "dropping a reference that is not held");
  return --ref_count_[i];
}

std::int32_t BlockPool::ref_count(BlockId block) const { return ref_count_[check_id(block)]; }

}  // namespace akv
