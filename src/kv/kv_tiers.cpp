// KvManager's tier and agent hooks: keys of indexed blocks, spilling newly indexed blocks to the
// disk tier, restoring a prefix from it at match, agents' chains, eviction by key.
#include <chrono>

#include "base/check.h"
#include "kv/agent_index.h"
#include "kv/disk_store.h"
#include "kv/kv_manager.h"

namespace akv {

KvBlockIo KvBlockIo::for_backend(Backend& backend, KvStorage& kv) {
  return {
      .read = [&backend, &kv](BlockId b,
                              std::span<std::byte> out) { backend.read_kv_block(kv, b, out); },
      .write = [&backend, &kv](
                   BlockId b, std::span<const std::byte> in) { backend.write_kv_block(kv, b, in); },
      .block_bytes = static_cast<std::size_t>(kv.layout.block_bytes())};
}

void KvManager::attach_tiers(AgentIndex* agents, DiskStore* disk, KvBlockIo io) {
  AKV_CHECK(keyer_ == nullptr, "attach_tiers called twice");
  AKV_CHECK(pool_.n_free() == pool_.n_blocks(), "attach_tiers after blocks were used");
  agents_ = agents;
  disk_ = disk;
  io_ = std::move(io);
  if (disk_ != nullptr) {
    AKV_CHECK(io_.block_bytes == disk_->shape().raw_bytes(),
              "disk tier block shape differs from the KV layout");
    keyer_ = &disk_->keyer();
  } else {
    own_keyer_ = std::make_unique<BlockKeyer>(random_key_secret(), Hash128{});
    keyer_ = own_keyer_.get();
  }
  buffer_.resize(io_.block_bytes);
  block_key_.assign(static_cast<std::size_t>(pool_.n_blocks()), Hash128{});
  index_.set_evict_listener([this](BlockId b, std::uint64_t) { forget_key(b); });
}

void KvManager::note_key(BlockId block, const Hash128& key) {
  block_key_[block] = key;
  by_key_[key] = block;
  if (agents_ != nullptr) agents_->set_resident(key, true);
}

void KvManager::forget_key(BlockId block) {
  const Hash128 key = block_key_[block];
  if (key.is_zero()) return;
  block_key_[block] = Hash128{};
  if (auto it = by_key_.find(key); it != by_key_.end() && it->second == block) by_key_.erase(it);
  if (agents_ != nullptr) agents_->set_resident(key, false);
}

void KvManager::spill(BlockId block, const Hash128& key, const Hash128& parent,
                      std::span<const std::int32_t> tokens) {
  if (disk_ == nullptr || disk_->has(key)) return;
  std::vector<std::byte> raw(io_.block_bytes);
  io_.read(block, raw);
  disk_->put(key, parent, keyer_->tokens_hash(tokens), std::move(raw));
}

std::int32_t KvManager::restore_from_disk(KvSequence& seq, std::span<const std::int32_t> tokens,
                                          std::int32_t matched, std::int32_t limit) {
  const std::int32_t bs = pool_.block_size();
  while (matched + bs <= limit && n_available() > 0) {
    const auto block_tokens = tokens.subspan(matched, bs);
    const Hash128 parent = seq.keys_.empty() ? seq.root_key_ : seq.keys_.back();
    const Hash128 key = keyer_->next(parent, block_tokens);
    if (!disk_->on_disk(key)) break;
    const BlockId b = take_block();
    if (!disk_->load(key, parent, keyer_->tokens_hash(block_tokens), buffer_)) {
      drop(b);  // not indexed: back to the free list
      break;
    }
    io_.write(b, buffer_);
    AKV_CHECK(index_.insert(seq.tail_key_, block_tokens, b) == b,
              "a restored block was already indexed");
    note_key(b, key);
    seq.blocks_.push_back(b);
    seq.tail_key_ = index_.key_of(b);
    seq.keys_.push_back(key);
    ++seq.n_indexed_;
    ++seq.n_restored_;
    matched += bs;
  }
  return matched;
}

void KvManager::remember_agent(const KvSequence& seq, std::string_view ns, std::string_view agent,
                               std::int64_t n_tokens, bool hit) {
  if (agents_ == nullptr || agent.empty() || !seq.open_) return;
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const AgentRecord r = agents_->record_turn(ns, agent,
                                             {.chain = seq.keys_,
                                              .n_tokens = n_tokens,
                                              .hit = hit,
                                              .restored = seq.n_restored_ > 0,
                                              .now_ms = now});
  if (disk_ != nullptr) disk_->put_manifest(r);
}

std::int32_t KvManager::evict_keys(std::span<const Hash128> keys) {
  std::int32_t n = 0;
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
    const auto found = by_key_.find(*it);
    if (found == by_key_.end()) continue;
    const BlockId b = found->second;
    if (pool_.ref_count(b) != 0 || !index_.evict(b)) continue;  // held by a running sequence
    pool_.put_free(b);
    ++n;
  }
  return n;
}

}  // namespace akv
