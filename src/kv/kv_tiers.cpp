// KvManager's tier and agent hooks: keys of indexed blocks, spilling newly indexed blocks to the
// disk tier, demoting evicted blocks to the host tier, restoring a prefix from the host and disk
// tiers at match (with the disk part loaded in the background first), eviction and retention by
// key. Agents' chains and the agents API: kv_agents.cpp.
#include <algorithm>
#include <chrono>

#include "base/check.h"
#include "kv/agent_index.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "kv/kv_manager.h"
#include "kv/restorer.h"

namespace akv {

namespace {
constexpr std::size_t kMaxPendingBytes = 64u << 20;  // of started copies out of the device
}  // namespace

KvBlockIo KvBlockIo::for_backend(Backend& backend, KvStorage& kv) {
  return {
      .read = [&backend, &kv](BlockId b,
                              std::span<std::byte> out) { backend.read_kv_block(kv, b, out); },
      .write = [&backend, &kv](
                   BlockId b, std::span<const std::byte> in) { backend.write_kv_block(kv, b, in); },
      .start_read = [&backend, &kv](BlockId b, std::span<std::byte> out) {
        backend.start_read_kv_block(kv, b, out);
      },
      .finish_reads = [&backend] { backend.finish_reads(); },
      .block_bytes = static_cast<std::size_t>(kv.layout.block_bytes())};
}

void KvManager::attach_tiers(KvTiers tiers, KvBlockIo io) {
  AKV_CHECK(keyer_ == nullptr, "attach_tiers called twice");
  AKV_CHECK(pool_.n_free() == pool_.n_blocks(), "attach_tiers after blocks were used");
  agents_ = tiers.agents;
  host_ = tiers.host;
  disk_ = tiers.disk;
  restorer_ = tiers.restorer;
  io_ = std::move(io);
  if (!io_.start_read) io_.start_read = io_.read;  // read at once: finished already
  if (!io_.finish_reads) io_.finish_reads = [] {};
  max_pending_ =
      std::max<std::size_t>(1, kMaxPendingBytes / std::max<std::size_t>(1, io_.block_bytes));
  if (disk_ != nullptr) {
    AKV_CHECK(io_.block_bytes == disk_->shape().raw_bytes(),
              "disk tier block shape differs from the KV layout");
    keyer_ = &disk_->keyer();
  } else {
    own_keyer_ = std::make_unique<BlockKeyer>(random_key_secret(), Hash128{});
    keyer_ = own_keyer_.get();
  }
  buffer_.resize(io_.block_bytes);
  block_meta_.assign(static_cast<std::size_t>(pool_.n_blocks()), TierMeta{});
  index_.set_evict_listener([this](BlockId b, std::uint64_t) { on_device_evict(b); });
}

void KvManager::note_key(BlockId block, const TierMeta& meta) {
  block_meta_[block] = meta;
  by_key_[meta.key] = block;
  if (agents_ != nullptr) agents_->set_resident(meta.key, true);
}

void KvManager::on_device_evict(BlockId block) {
  const TierMeta meta = block_meta_[block];
  if (meta.key.is_zero()) return;
  block_meta_[block] = TierMeta{};
  if (auto it = by_key_.find(meta.key); it != by_key_.end() && it->second == block)
    by_key_.erase(it);
  if (agents_ != nullptr) agents_->set_resident(meta.key, false);
  if (host_ == nullptr || !demote_on_evict_) return;
  const HostBlockMeta host_meta{.parent = meta.parent,
                                .tokens_hash = meta.tokens_hash,
                                .depth = meta.depth,
                                .retention = index_.retention_of(block)};
  if (host_->touch(meta.key, host_meta)) return;  // restored from there earlier: no copy
  // The block is reused as soon as this returns: the copy takes its bytes as they are now.
  if (demoting_.size() == max_pending_) finish_tier_reads();
  if (demote_buffers_.size() == demoting_.size()) demote_buffers_.emplace_back(io_.block_bytes);
  io_.start_read(block, demote_buffers_[demoting_.size()]);
  demoting_.push_back({.key = meta.key, .meta = host_meta});
}

void KvManager::spill(BlockId block, const TierMeta& meta) {
  if (disk_ == nullptr || disk_->has(meta.key)) return;
  if (spilling_.size() == max_pending_) finish_tier_reads();
  // The buffer is recycled (no allocation once warm); moving it into spilling_ keeps its bytes
  // where the started copy writes them.
  spilling_.push_back({.meta = meta, .raw = disk_->take_raw_buffer()});
  io_.start_read(block, spilling_.back().raw);
}

void KvManager::finish_tier_reads() {
  if (demoting_.empty() && spilling_.empty()) return;
  io_.finish_reads();
  for (std::size_t i = 0; i < demoting_.size(); ++i)
    host_->put(demoting_[i].key, demoting_[i].meta, demote_buffers_[i]);
  demoting_.clear();
  for (PendingSpill& p : spilling_)
    disk_->put(p.meta.key, p.meta.parent, p.meta.tokens_hash, std::move(p.raw));
  spilling_.clear();
}

bool KvManager::demoting(const Hash128& key) const {
  return std::any_of(demoting_.begin(), demoting_.end(),
                     [&key](const PendingDemotion& d) { return d.key == key; });
}

bool KvManager::restore_pending(KvSequence& seq, std::span<const std::int32_t> tokens,
                                std::string_view ns) {
  AKV_CHECK(!seq.open_, "restore_pending on an open sequence");
  if (restorer_ == nullptr) return false;
  if (seq.restore_) return !seq.restore_->done();
  if (seq.restore_planned_) return false;
  seq.restore_planned_ = true;
  // The blocks of the prefix that device memory does not hold, from the host tier or the disk,
  // up to the first one neither has (match stops there too). match derives the keys again from
  // its own tokens (~70 ns a block): kept in seq, they would make it trust its tokens are these.
  const std::int32_t bs = pool_.block_size();
  const auto limit = static_cast<std::int32_t>(tokens.size()) - 1;
  std::vector<RestoreJob::Block> wanted;
  Hash128 parent = keyer_->root(ns);
  for (std::int32_t at = 0; at + bs <= limit; at += bs) {
    const auto block_tokens = tokens.subspan(at, bs);
    const Hash128 key = keyer_->next(parent, block_tokens);
    if (!by_key_.contains(key)) {
      const bool in_host = host_ != nullptr && host_->contains(key);
      if (!in_host && (disk_ == nullptr || !disk_->on_disk(key))) break;
      wanted.push_back({.key = key,
                        .parent = parent,
                        .tokens_hash = keyer_->tokens_hash(block_tokens),
                        .from_host = in_host});
    }
    parent = key;
  }
  if (wanted.empty()) return false;
  seq.restore_ = std::make_shared<RestoreJob>(std::move(wanted), io_.block_bytes);
  restorer_->submit(seq.restore_);
  return true;
}

std::span<const std::byte> KvManager::load_from_tiers(KvSequence& seq, const TierMeta& meta,
                                                      int& from, std::int32_t& cursor) {
  // The background load's blocks are verified already (their source may be gone by now: fine).
  if (const RestoreJob* job = seq.restore_.get(); job != nullptr && job->done()) {
    const auto blocks = job->blocks();
    for (std::int32_t i = cursor; i < job->n_loaded(); ++i) {
      if (!(blocks[i].key == meta.key)) continue;
      cursor = i + 1;  // the job's blocks are in chain order
      from = blocks[i].from_host ? 1 : 2;
      return job->raw(i);
    }
  }
  // A block this match evicted (an orphan of the chain it restores) reaches the host tier first.
  if (demoting(meta.key)) finish_tier_reads();
  from = 1;
  if (host_ != nullptr && host_->get(meta.key, meta.parent, meta.tokens_hash, buffer_))
    return buffer_;
  from = 2;
  if (disk_ != nullptr && disk_->load(meta.key, meta.parent, meta.tokens_hash, buffer_))
    return buffer_;
  from = 0;
  return {};
}

std::int32_t KvManager::restore_from_tiers(KvSequence& seq, std::span<const std::int32_t> tokens,
                                           std::int32_t matched, std::int32_t limit) {
  const std::int32_t bs = pool_.block_size();
  std::int32_t cursor = 0;  // into seq's background load
  while (matched + bs <= limit && n_available() > 0) {
    const auto block_tokens = tokens.subspan(matched, bs);
    const Hash128 parent = seq.keys_.empty() ? seq.root_key_ : seq.keys_.back();
    const TierMeta meta{.key = keyer_->next(parent, block_tokens),
                        .parent = parent,
                        .tokens_hash = keyer_->tokens_hash(block_tokens),
                        .depth = static_cast<std::int32_t>(seq.keys_.size())};
    int from = 0;
    const std::span<const std::byte> raw = load_from_tiers(seq, meta, from, cursor);
    if (from == 0) break;
    const BlockId b = take_block();  // may evict a cached block (its demotion is started)
    io_.write(b, raw);
    AKV_CHECK(index_.insert(seq.tail_key_, block_tokens, b) == b,
              "a restored block was already indexed");
    index_.set_retention(b, seq.retention_, /*lower=*/true);
    note_key(b, meta);
    seq.blocks_.push_back(b);
    seq.tail_key_ = index_.key_of(b);
    seq.keys_.push_back(meta.key);
    ++seq.n_indexed_;
    ++(from == 1 ? seq.n_host_restored_ : seq.n_restored_);
    matched += bs;
  }
  return matched;
}

void KvManager::spill_missing(const KvSequence& seq) {
  std::size_t room = std::min(disk_->n_queue_room(), max_pending_);
  const auto n = std::min<std::size_t>(static_cast<std::size_t>(seq.n_indexed_), seq.keys_.size());
  for (std::size_t i = 0; i < n && room > 0; ++i) {
    const BlockId b = seq.blocks_[i];
    const TierMeta& meta = block_meta_[b];
    if (meta.key != seq.keys_[i] || disk_->has(meta.key)) continue;
    spill(b, meta);
    --room;
  }
  finish_tier_reads();
}

bool KvManager::read_for_disk(const Hash128& key, std::span<std::byte> raw, TierMeta& meta) {
  if (const auto found = by_key_.find(key); found != by_key_.end()) {
    meta = block_meta_[found->second];
    io_.read(found->second, raw);
    return true;
  }
  if (host_ == nullptr) return false;
  const std::optional<HostBlockMeta> m = host_->find_meta(key);
  if (!m || !host_->get(key, m->parent, m->tokens_hash, raw)) return false;
  meta = {.key = key, .parent = m->parent, .tokens_hash = m->tokens_hash, .depth = m->depth};
  return true;
}

AgentSpill KvManager::spill_agents_to_disk(std::chrono::steady_clock::time_point deadline) {
  AgentSpill out;
  if (disk_ == nullptr || agents_ == nullptr) return out;
  finish_tier_reads();
  for (const AgentRecord& agent : agents_->list_all()) {
    std::int64_t n_queued = 0;
    const auto n_chain = static_cast<std::int64_t>(agent.chain.size());
    for (std::int64_t i = 0; i < n_chain; ++i) {
      const Hash128& key = agent.chain[i];
      if (disk_->has(key)) continue;
      std::vector<std::byte> raw = disk_->take_raw_buffer();
      TierMeta meta;
      if (!read_for_disk(key, raw, meta)) {
        out.n_missing += n_chain - i;
        break;
      }
      if (!disk_->put_or_wait(key, meta.parent, meta.tokens_hash, std::move(raw), deadline) &&
          !disk_->has(key)) {
        out.n_late += n_chain - i;
        break;
      }
      ++n_queued;
    }
    if (n_queued == 0) continue;
    disk_->put_manifest(agent);  // behind its blocks
    ++out.n_agents;
    out.n_queued += n_queued;
  }
  return out;
}

std::int32_t KvManager::evict_keys(std::span<const Hash128> keys) {
  std::int32_t n = 0;
  demote_on_evict_ = false;
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
    if (host_ != nullptr) host_->erase(*it);
    const auto found = by_key_.find(*it);
    if (found == by_key_.end()) continue;
    const BlockId b = found->second;
    if (pool_.ref_count(b) != 0 || !index_.evict(b)) continue;  // held by a running sequence
    pool_.put_free(b);
    ++n;
  }
  demote_on_evict_ = true;
  return n;
}

void KvManager::set_retention(std::span<const Hash128> keys, Retention retention) {
  for (const Hash128& key : keys)
    if (const auto found = by_key_.find(key); found != by_key_.end())
      index_.set_retention(found->second, retention, /*lower=*/true);
  if (host_ != nullptr) host_->set_retention(keys, retention);
}

}  // namespace akv
