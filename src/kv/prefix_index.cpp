#include "kv/prefix_index.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "base/check.h"

namespace akv {

std::uint64_t xxh3_chain_hash(std::uint64_t parent_hash, std::span<const std::int32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent_hash);
}

PrefixIndex::PrefixIndex(std::int32_t n_blocks, std::int32_t block_size, ChainHashFn hash)
    : block_size_(block_size),
      hash_(hash),
      entries_(n_blocks),
      tokens_(static_cast<std::size_t>(n_blocks) * block_size, -1) {
  by_hash_.reserve(static_cast<std::size_t>(n_blocks));
}

ChainKey PrefixIndex::root(std::string_view ns) {
  auto it = ns_ids_.find(std::string(ns));
  if (it == ns_ids_.end()) {
    it = ns_ids_.emplace(std::string(ns), static_cast<std::uint32_t>(ns_hash_.size())).first;
    // The namespace seeds the chain, so its hash flows into every block key below it.
    ns_hash_.push_back(XXH3_64bits_withSeed(ns.data(), ns.size(), 0x6b76u));
    ns_first_child_.push_back(-1);
  }
  return {ns_hash_[it->second], 0, it->second, -1};
}

std::span<const std::int32_t> PrefixIndex::tokens_of(BlockId b) const {
  return {tokens_.data() + static_cast<std::size_t>(b) * block_size_,
          static_cast<std::size_t>(block_size_)};
}

const BlockId* PrefixIndex::first_child_of(const ChainKey& parent) const {
  if (parent.entry == 0)
    return parent.ns < ns_first_child_.size() ? &ns_first_child_[parent.ns] : nullptr;
  const Entry& e = entries_[parent.block];
  return e.id == parent.entry ? &e.first_child : nullptr;
}

BlockId* PrefixIndex::first_child_of(const ChainKey& parent) {
  return const_cast<BlockId*>(std::as_const(*this).first_child_of(parent));
}

std::optional<BlockId> PrefixIndex::find(const ChainKey& parent,
                                         std::span<const std::int32_t> tokens) const {
  AKV_CHECK(static_cast<std::int32_t>(tokens.size()) == block_size_, "find takes one full block");
  const std::uint64_t h = hash_(parent.hash, tokens);
  auto [it, end] = by_hash_.equal_range(h);
  for (; it != end; ++it) {
    const Entry& e = entries_[it->second];
    if (e.parent_id != parent.entry || e.ns != parent.ns) continue;
    if (e.parent_id != 0 && e.parent_block == -1) continue;  // orphan: its parent was evicted
    const auto have = tokens_of(it->second);
    if (std::equal(have.begin(), have.end(), tokens.begin())) return it->second;
  }
  return std::nullopt;
}

ChainKey PrefixIndex::key_of(BlockId block) const {
  const Entry& e = entries_[block];
  AKV_CHECK(e.id != 0, "key_of a block that is not indexed");
  return {e.hash, e.id, e.ns, block};
}

PartialMatch PrefixIndex::find_partial(const ChainKey& parent,
                                       std::span<const std::int32_t> tokens) const {
  PartialMatch best;
  const BlockId* head = first_child_of(parent);
  if (head == nullptr) return best;
  for (BlockId c = *head; c != -1; c = entries_[c].next_sibling) {
    const auto have = tokens_of(c);
    const std::size_t n = std::min(have.size(), tokens.size());
    std::int32_t common = 0;
    while (static_cast<std::size_t>(common) < n && have[common] == tokens[common]) ++common;
    if (common > best.n_tokens) best = {c, common};
  }
  return best;
}

BlockId PrefixIndex::insert(const ChainKey& parent, std::span<const std::int32_t> tokens,
                            BlockId block) {
  if (std::optional<BlockId> existing = find(parent, tokens)) return *existing;
  Entry& e = entries_[block];
  AKV_CHECK(e.id == 0, "block indexed twice");
  BlockId* head = first_child_of(parent);
  AKV_CHECK(head != nullptr, "inserting under a parent that is no longer indexed");
  e = Entry{};
  e.id = next_id_++;
  e.hash = hash_(parent.hash, tokens);
  e.parent_id = parent.entry;
  e.ns = parent.ns;
  e.parent_block = parent.block;
  e.next_sibling = *head;
  if (*head != -1) entries_[*head].prev_sibling = block;
  *head = block;
  std::copy(tokens.begin(), tokens.end(),
            tokens_.begin() + static_cast<std::ptrdiff_t>(block) * block_size_);
  by_hash_.emplace(e.hash, block);
  ++n_indexed_;
  return block;
}

void PrefixIndex::on_unreferenced(BlockId block) {
  Entry& e = entries_[block];
  AKV_CHECK(e.id != 0 && !e.evictable, "on_unreferenced: not an indexed, held block");
  e.evictable = true;
  ++n_evictable_;
  // An orphan (its parent was evicted) can never be matched again: evict it first.
  const bool orphan = e.parent_id != 0 && e.parent_block == -1;
  lru_push_back(block, orphan ? kOrphanList : list_of(e.retention));
}

void PrefixIndex::set_retention(BlockId block, Retention retention, bool lower) {
  Entry& e = entries_[block];
  AKV_CHECK(e.id != 0, "set_retention on a block that is not indexed");
  const Retention r = lower ? retention : max_retention(e.retention, retention);
  if (r == e.retention) return;
  e.retention = r;
  if (e.evictable && e.lru_list != kOrphanList) {
    lru_remove(block);
    lru_push_back(block, list_of(r));
  }
}

void PrefixIndex::on_referenced(BlockId block) {
  Entry& e = entries_[block];
  AKV_CHECK(e.id != 0 && e.evictable, "on_referenced: not an evictable block");
  e.evictable = false;
  --n_evictable_;
  lru_remove(block);
}

std::optional<BlockId> PrefixIndex::evict_one() {
  const BlockId* head =
      std::find_if(std::begin(lru_head_), std::end(lru_head_), [](BlockId b) { return b != -1; });
  if (head == std::end(lru_head_)) return std::nullopt;
  const BlockId b = *head;
  if (on_evict_) on_evict_(b, entries_[b].hash);
  lru_remove(b);
  entries_[b].evictable = false;
  --n_evictable_;
  remove(b);
  return b;
}

bool PrefixIndex::evict(BlockId block) {
  const Entry& e = entries_[block];
  if (e.id == 0 || !e.evictable) return false;
  if (on_evict_) on_evict_(block, e.hash);
  lru_remove(block);
  entries_[block].evictable = false;
  --n_evictable_;
  remove(block);
  return true;
}

void PrefixIndex::remove(BlockId b) {
  Entry& e = entries_[b];
  // Children become orphans: unreachable from any root, first in line for eviction.
  for (BlockId c = e.first_child; c != -1;) {
    Entry& ce = entries_[c];
    const BlockId next = ce.next_sibling;
    ce.parent_block = -1;
    ce.prev_sibling = ce.next_sibling = -1;
    if (ce.evictable) {
      lru_remove(c);
      lru_push_back(c, kOrphanList);
    }
    c = next;
  }
  e.first_child = -1;
  unlink_sibling(b);
  auto [it, end] = by_hash_.equal_range(e.hash);
  for (; it != end; ++it) {
    if (it->second == b) {
      by_hash_.erase(it);
      break;
    }
  }
  e = Entry{};
  --n_indexed_;
}

void PrefixIndex::unlink_sibling(BlockId b) {
  Entry& e = entries_[b];
  if (e.prev_sibling != -1) {
    entries_[e.prev_sibling].next_sibling = e.next_sibling;
  } else if (e.parent_id == 0) {
    if (ns_first_child_[e.ns] == b) ns_first_child_[e.ns] = e.next_sibling;
  } else if (e.parent_block != -1) {
    entries_[e.parent_block].first_child = e.next_sibling;
  }
  if (e.next_sibling != -1) entries_[e.next_sibling].prev_sibling = e.prev_sibling;
  e.prev_sibling = e.next_sibling = -1;
}

void PrefixIndex::lru_push_back(BlockId b, int list) {
  Entry& e = entries_[b];
  e.lru_list = static_cast<std::uint8_t>(list);
  e.lru_prev = lru_tail_[list];
  e.lru_next = -1;
  if (lru_tail_[list] != -1)
    entries_[lru_tail_[list]].lru_next = b;
  else
    lru_head_[list] = b;
  lru_tail_[list] = b;
}

void PrefixIndex::lru_remove(BlockId b) {
  Entry& e = entries_[b];
  const int list = e.lru_list;
  if (e.lru_prev != -1)
    entries_[e.lru_prev].lru_next = e.lru_next;
  else
    lru_head_[list] = e.lru_next;
  if (e.lru_next != -1)
    entries_[e.lru_next].lru_prev = e.lru_prev;
  else
    lru_tail_[list] = e.lru_prev;
  e.lru_prev = e.lru_next = -1;
}

}  // namespace akv
