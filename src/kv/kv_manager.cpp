#include "kv/kv_manager.h"

#include <algorithm>

#include "base/check.h"
#include "kv/restorer.h"

namespace akv {

KvManager::CopyBlockFn KvManager::backend_copier(Backend& backend, KvStorage& kv) {
  return [&backend, &kv](BlockId src, BlockId dst) { backend.copy_kv_block(kv, src, dst); };
}

KvManager::KvManager(std::int32_t n_blocks, std::int32_t block_size, CopyBlockFn copy,
                     ChainHashFn hash)
    : pool_(n_blocks, block_size), index_(n_blocks, block_size, hash), copy_(std::move(copy)) {}

std::int32_t KvManager::match(KvSequence& seq, std::span<const std::int32_t> tokens,
                              std::string_view ns, Retention retention) {
  AKV_CHECK(!seq.open_ && seq.blocks_.empty(), "match on a sequence that already holds blocks");
  seq.open_ = true;
  seq.retention_ = retention;
  seq.n_indexed_ = 0;
  seq.tail_key_ = index_.root(ns);
  const std::int32_t bs = pool_.block_size();
  const auto n = static_cast<std::int32_t>(tokens.size());
  const std::int32_t limit = std::max(0, n - 1);  // the last token is always computed

  if (keyer_ != nullptr) {
    seq.root_key_ = keyer_->root(ns);
    seq.keys_.clear();
    release_restores();  // host slots of earlier restores the device has read
  }

  // Phase 1: whole blocks, by reference.
  std::int32_t matched = 0;
  while (matched + bs <= limit) {
    const std::optional<BlockId> b = index_.find(seq.tail_key_, tokens.subspan(matched, bs));
    if (!b) break;
    acquire(*b);
    index_.set_retention(*b, retention);
    seq.blocks_.push_back(*b);
    seq.tail_key_ = index_.key_of(*b);
    ++seq.n_indexed_;
    if (keyer_ != nullptr)
      seq.keys_.push_back(keyer_->next(seq.keys_.empty() ? seq.root_key_ : seq.keys_.back(),
                                       tokens.subspan(matched, bs)));
    matched += bs;
  }
  // Phase 1b: whole blocks the host or disk tier holds, loaded into blocks of our own.
  if (host_ != nullptr || disk_ != nullptr)
    matched = restore_from_tiers(seq, tokens, matched, limit);
  if (seq.restore_ != nullptr && seq.restore_->done() && seq.restore_->state_pos() > 0) {
    seq.loaded_state_ = seq.restore_->take_state();
    seq.loaded_state_pos_ = seq.restore_->state_pos();
  }
  seq.restore_.reset();
  // Phase 2: the longest partial match of the next block, copied into a block of our own.
  if (matched < limit) {
    const auto rest = tokens.subspan(matched, std::min(bs, n - matched));
    const PartialMatch pm = index_.find_partial(seq.tail_key_, rest);
    const std::int32_t take = std::min(pm.n_tokens, limit - matched);
    if (take > 0 && n_available() > (pool_.ref_count(pm.block) == 0 ? 1 : 0)) {
      acquire(pm.block);  // so that taking a block cannot evict the source
      const BlockId dst = take_block();
      start_encoded_reads();  // dst's old contents first
      copy_(pm.block, dst);
      drop(pm.block);
      seq.blocks_.push_back(dst);
      matched += take;
    }
  }
  finish_tier_reads();  // the blocks evicted above reach the host tier before anyone looks
  return matched;
}

bool KvManager::allocate(KvSequence& seq, std::int32_t n_positions) {
  AKV_CHECK(seq.open_, "allocate before match");
  const std::int32_t bs = pool_.block_size();
  const std::int32_t need = (n_positions + bs - 1) / bs - seq.n_blocks();
  if (need <= 0) return true;
  if (need > n_available()) return false;
  for (std::int32_t i = 0; i < need; ++i) seq.blocks_.push_back(take_block());
  finish_tier_reads();
  return true;
}

void KvManager::commit(KvSequence& seq, std::span<const std::int32_t> tokens,
                       std::int32_t n_computed) {
  AKV_CHECK(seq.open_, "commit before match");
  AKV_CHECK(n_computed <= static_cast<std::int32_t>(tokens.size()), "commit beyond the tokens");
  const std::int32_t bs = pool_.block_size();
  const std::int32_t n_full = std::min(n_computed / bs, seq.n_blocks());
  for (std::int32_t i = seq.n_indexed_; i < n_full; ++i) {
    const BlockId mine = seq.blocks_[i];
    const auto block_tokens = tokens.subspan(i * bs, bs);
    const BlockId kept = index_.insert(seq.tail_key_, block_tokens, mine);
    if (kept != mine) {  // someone indexed the same content first: share theirs, free ours
      acquire(kept);
      drop(mine);
      seq.blocks_[i] = kept;
    }
    // New content takes this sequence's retention; shared content keeps the highest.
    index_.set_retention(kept, seq.retention_, /*lower=*/kept == mine);
    if (keyer_ != nullptr) {
      const Hash128 parent = seq.keys_.empty() ? seq.root_key_ : seq.keys_.back();
      const TierMeta meta{.key = keyer_->next(parent, block_tokens),
                          .parent = parent,
                          .tokens_hash = keyer_->tokens_hash(block_tokens),
                          .depth = i};
      seq.keys_.push_back(meta.key);
      if (kept == mine) {  // newly indexed content: only new blocks go to the tiers
        note_key(mine, meta);
        queue_spill(mine);
      }
    }
    seq.tail_key_ = index_.key_of(kept);
    seq.n_indexed_ = i + 1;
  }
  if (keyer_ != nullptr) release_restores();
}

void KvManager::release(KvSequence& seq) {
  // Deepest first, so a chain's tail is evicted before its head.
  for (auto it = seq.blocks_.rbegin(); it != seq.blocks_.rend(); ++it) drop(*it);
  seq.blocks_.clear();
  seq.n_indexed_ = 0;
  seq.tail_key_ = {};
  seq.keys_.clear();
  seq.open_ = false;
  if (seq.restore_) seq.restore_->cancel();
  seq.restore_.reset();
  seq.restore_planned_ = false;
  seq.n_early_restored_ = 0;
  seq.loaded_state_ = {};
  seq.loaded_state_pos_ = 0;
}

KvUsage KvManager::usage() const {
  KvUsage u;
  u.n_blocks = pool_.n_blocks();
  u.n_free = pool_.n_free();
  u.n_cached = index_.n_evictable();
  u.n_used = u.n_blocks - u.n_free - u.n_cached;
  u.tier = tier_times_;
  return u;
}

BlockId KvManager::take_block() {
  if (std::optional<BlockId> b = pool_.take_free()) return *b;
  const std::optional<BlockId> b = index_.evict_one();
  AKV_CHECK(b.has_value(), "take_block with nothing free or evictable");
  pool_.add_ref(*b);
  return *b;
}

void KvManager::acquire(BlockId block) {
  if (pool_.ref_count(block) == 0) index_.on_referenced(block);
  pool_.add_ref(block);
}

void KvManager::drop(BlockId block) {
  if (pool_.drop_ref(block) > 0) return;
  if (index_.contains(block))
    index_.on_unreferenced(block);
  else
    pool_.put_free(block);
}

}  // namespace akv
