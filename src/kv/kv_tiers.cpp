// KvManager's tier and agent hooks: keys of indexed blocks, spilling newly indexed blocks to the
// disk tier, demoting evicted blocks to the host tier, restoring a prefix from the host and disk
// tiers at match (with the disk part loaded in the background first), eviction and retention by
// key. Agents' chains and the agents API: kv_agents.cpp.
#include <algorithm>
#include <chrono>
#include <limits>

#include "base/check.h"
#include "kv/agent_index.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "kv/kv_manager.h"
#include "kv/restorer.h"

namespace akv {

namespace {
constexpr std::size_t kMaxPendingBytes = 64u << 20;  // of started copies out of the device

// Adds the time from its construction to its destruction to a KvTierTimes field.
class TierTimer {
 public:
  explicit TierTimer(double& total) : total_(total), t0_(std::chrono::steady_clock::now()) {}
  ~TierTimer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  TierTimer(const TierTimer&) = delete;
  TierTimer& operator=(const TierTimer&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point t0_;
};
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
      .start_read_encoded =
          [&backend, &kv](BlockId b, SpillCodec codec, std::span<std::byte> out) {
            backend.start_read_kv_block_encoded(kv, b, codec, out);
          },
      .start_reads_encoded =
          [&backend, &kv](std::span<const BlockId> blocks, SpillCodec codec,
                          std::span<const std::span<std::byte>> out) {
            backend.start_read_kv_blocks_encoded(kv, blocks, codec, out);
          },
      .write_blocks = [&backend, &kv](std::span<const EncodedKvBlock> blocks) {
        return backend.write_kv_blocks(kv, blocks);
      },
      .writes_done = [&backend](std::uint64_t fence) { return backend.kv_writes_done(fence); },
      .block_bytes = static_cast<std::size_t>(kv.layout.block_bytes())};
}

KvManager::~KvManager() {
  if (host_feeds_disk_) disk_->drop_lent();
}

void KvManager::attach_tiers(KvTiers tiers, KvBlockIo io) {
  AKV_CHECK(keyer_ == nullptr, "attach_tiers called twice");
  AKV_CHECK(pool_.n_free() == pool_.n_blocks(), "attach_tiers after blocks were used");
  agents_ = tiers.agents;
  host_ = tiers.host;
  disk_ = tiers.disk;
  restorer_ = tiers.restorer;
  host_write_through_ = tiers.host_write_through;
  io_ = std::move(io);
  if (!io_.start_read) io_.start_read = io_.read;  // read at once: finished already
  if (!io_.finish_reads) io_.finish_reads = [] {};
  if (io_.start_read_encoded && !io_.start_reads_encoded)
    io_.start_reads_encoded = [this](std::span<const BlockId> blocks, SpillCodec codec,
                                     std::span<const std::span<std::byte>> out) {
      for (std::size_t i = 0; i < blocks.size(); ++i) io_.start_read_encoded(blocks[i], codec, out[i]);
    };
  if (!io_.write_blocks)  // decode on the host and write each block: done at once
    io_.write_blocks = [this](std::span<const EncodedKvBlock> blocks) {
      for (const EncodedKvBlock& b : blocks) {
        if (b.codec == SpillCodec::Native) {
          io_.write(b.block, b.bytes);
          continue;
        }
        decode_block(b.codec, host_->shape(), b.bytes, buffer_);
        io_.write(b.block, buffer_);
      }
      return std::uint64_t{0};
    };
  if (!io_.writes_done) io_.writes_done = [](std::uint64_t) { return true; };
  if (host_ != nullptr)
    AKV_CHECK(io_.block_bytes == host_->shape().raw_bytes(),
              "host tier block shape differs from the KV layout");
  max_pending_ =
      std::max<std::size_t>(1, kMaxPendingBytes / std::max<std::size_t>(1, io_.block_bytes));
  // The host copy can be what the disk writes when it is exact or already in the disk's codec.
  host_feeds_disk_ = host_ != nullptr && disk_ != nullptr &&
                     (host_->codec() == disk_->codec() ||
                      codec_is_raw(host_->codec(), host_->shape().dtype));
  if (host_feeds_disk_) {  // lent blocks are pinned in the host tier: a quarter of it at most
    const auto host_slots = static_cast<std::size_t>(host_->stats().max_bytes) /
                            std::max<std::size_t>(1, host_->encoded_block_bytes());
    disk_->limit_lent_blocks(std::max<std::size_t>(1, host_slots / 4));
  }
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
  spill_waiting_.assign(static_cast<std::size_t>(pool_.n_blocks()), false);
  index_.set_evict_listener([this](BlockId b, std::uint64_t) { on_device_evict(b); });
}

void KvManager::note_key(BlockId block, const TierMeta& meta) {
  block_meta_[block] = meta;
  by_key_[meta.key] = block;
  if (agents_ != nullptr) agents_->set_resident(meta.key, true);
}

void KvManager::on_device_evict(BlockId block) {
  const TierTimer timer(tier_times_.evict_s);
  const TierMeta meta = block_meta_[block];
  if (meta.key.is_zero()) return;
  if (spill_waiting_[block]) {  // queued for the disk: its bytes go before the block is reused
    spill_waiting_[block] = false;
    spill(block, meta);
  }
  block_meta_[block] = TierMeta{};
  if (auto it = by_key_.find(meta.key); it != by_key_.end() && it->second == block)
    by_key_.erase(it);
  if (agents_ != nullptr) agents_->set_resident(meta.key, false);
  if (host_ == nullptr || !demote_on_evict_) return;
  // The block is reused as soon as this returns: a copy takes its bytes as they are now.
  if (copy_to_host(block, meta)) return;
  if (host_slot_demotions()) return;  // every slot is pinned or reserved: the block is not kept
  const HostBlockMeta host_meta = host_meta_of(block, meta);
  if (n_demote_buffers_ == max_pending_) finish_tier_reads();
  if (demote_buffers_.size() == n_demote_buffers_) demote_buffers_.emplace_back(io_.block_bytes);
  io_.start_read(block, demote_buffers_[n_demote_buffers_]);
  demoting_.push_back({.key = meta.key,
                       .meta = host_meta,
                       .buffer = static_cast<std::int32_t>(n_demote_buffers_++)});
}

bool KvManager::copy_to_host(BlockId block, const TierMeta& meta) {
  const HostBlockMeta host_meta = host_meta_of(block, meta);
  // Restored from there earlier, spilled through it, or being copied there: no copy.
  if (host_->touch(meta.key, host_meta) || demoting(meta.key)) return true;
  return demote_into_slot(block, meta.key, host_meta, /*to_disk=*/false);
}

HostBlockMeta KvManager::host_meta_of(BlockId block, const TierMeta& meta) const {
  return {.parent = meta.parent,
          .tokens_hash = meta.tokens_hash,
          .depth = meta.depth,
          .retention = index_.retention_of(block)};
}

bool KvManager::host_slot_demotions() const {
  return codec_is_raw(host_->codec(), host_->shape().dtype) || io_.start_read_encoded != nullptr;
}

bool KvManager::demote_into_slot(BlockId block, const Hash128& key, const HostBlockMeta& meta,
                                 bool to_disk) {
  if (!host_slot_demotions()) return false;
  const std::span<std::byte> slot = host_->reserve(key, meta);
  if (slot.empty()) return false;
  if (codec_is_raw(host_->codec(), host_->shape().dtype)) {
    io_.start_read(block, slot);
  } else {  // started with the others of this eviction or spill round (start_encoded_reads)
    encode_blocks_.push_back(block);
    encode_slots_.push_back(slot);
  }
  demoting_.push_back({.key = key, .meta = meta, .to_disk = to_disk});
  return true;
}

void KvManager::lend_to_disk(const Hash128& key, const Hash128& parent,
                             const Hash128& tokens_hash) {
  SpillCodec codec = host_->codec();
  const std::span<const std::byte> bytes = host_->lend(key, &codec);
  if (bytes.empty()) return;  // erased meanwhile
  HostStore* host = host_;
  disk_->put_lent(key, parent, tokens_hash,
                  {.bytes = bytes, .codec = codec, .release = [host, key] { host->unpin(key); }});
}

bool KvManager::host_writes_through() const {
  return host_write_through_ && disk_ == nullptr && host_ != nullptr && host_slot_demotions();
}

void KvManager::queue_spill(BlockId block) {
  if ((disk_ == nullptr && !host_writes_through()) || spill_waiting_[block]) return;
  spill_waiting_[block] = true;
  spill_queue_.push_back(block);
}

std::size_t KvManager::spill_room() const {
  if (disk_ == nullptr) return host_writes_through() ? std::numeric_limits<std::size_t>::max() : 0;
  return host_feeds_disk_ ? disk_->n_lent_room() : disk_->n_queue_room();
}

std::int32_t KvManager::spill_queued(std::int32_t max_blocks) {
  const TierTimer timer(tier_times_.spill_s);
  std::int32_t n = 0;
  // Only as many as the disk queue takes now: the others wait (copied at eviction if need be)
  // rather than being copied and dropped.
  max_blocks = static_cast<std::int32_t>(std::min<std::size_t>(
      static_cast<std::size_t>(std::max(max_blocks, 0)), spill_room()));
  while (n < max_blocks && !spill_queue_.empty()) {
    const BlockId b = spill_queue_.front();
    spill_queue_.pop_front();
    if (!spill_waiting_[b]) continue;  // copied out when it was evicted
    spill_waiting_[b] = false;
    spill(b, block_meta_[b]);
    ++n;
  }
  finish_tier_reads();
  return n;
}

void KvManager::spill(BlockId block, const TierMeta& meta) {
  if (disk_ == nullptr) {
    // Host tier only: write through to it, so evicting the block later copies nothing (a
    // returning agent's restore then takes device blocks without first demoting them).
    if (host_writes_through()) copy_to_host(block, meta);
    return;
  }
  if (disk_->has(meta.key)) return;
  if (host_feeds_disk_) {
    // Write-through: the disk writes the block's host copy (made now if it has none), so the
    // device copies it out once and its eviction later copies nothing.
    const HostBlockMeta host_meta = host_meta_of(block, meta);
    if (host_->touch(meta.key, host_meta)) {
      lend_to_disk(meta.key, meta.parent, meta.tokens_hash);
      return;
    }
    for (PendingDemotion& d : demoting_)
      if (d.key == meta.key) {
        d.to_disk = true;
        return;
      }
    if (demote_into_slot(block, meta.key, host_meta, /*to_disk=*/true)) return;
  }
  if (spilling_.size() == max_pending_) finish_tier_reads();
  // The buffer is recycled (no allocation once warm); moving it into spilling_ keeps its bytes
  // where the started copy writes them.
  spilling_.push_back({.meta = meta, .raw = disk_->take_raw_buffer()});
  io_.start_read(block, spilling_.back().raw);
}

void KvManager::start_encoded_reads() {
  if (encode_blocks_.empty()) return;
  io_.start_reads_encoded(encode_blocks_, host_->codec(), encode_slots_);
  encode_blocks_.clear();
  encode_slots_.clear();
}

void KvManager::finish_tier_reads() {
  if (demoting_.empty() && spilling_.empty()) return;
  const TierTimer timer(tier_times_.finish_s);
  start_encoded_reads();
  io_.finish_reads();
  for (const PendingDemotion& d : demoting_) {
    if (d.buffer < 0)
      host_->publish(d.key);
    else
      host_->put(d.key, d.meta, demote_buffers_[static_cast<std::size_t>(d.buffer)]);
    if (d.to_disk) lend_to_disk(d.key, d.meta.parent, d.meta.tokens_hash);
  }
  demoting_.clear();
  n_demote_buffers_ = 0;
  for (PendingSpill& p : spilling_)
    disk_->put(p.meta.key, p.meta.parent, p.meta.tokens_hash, std::move(p.raw));
  spilling_.clear();
}

bool KvManager::demoting(const Hash128& key) const {
  return std::any_of(demoting_.begin(), demoting_.end(),
                     [&key](const PendingDemotion& d) { return d.key == key; });
}

bool KvManager::restore_pending(KvSequence& seq, std::span<const std::int32_t> tokens,
                                std::string_view ns, std::int32_t state_floor) {
  AKV_CHECK(!seq.open_, "restore_pending on an open sequence");
  if (restorer_ == nullptr) return false;
  if (seq.restore_) {
    if (!seq.restore_->done()) restore_early(seq, tokens, ns);
    return !seq.restore_->done();
  }
  if (seq.restore_planned_) return false;
  seq.restore_planned_ = true;
  // The blocks of the prefix that only the disk (or the remote tier under it) may hold, up to the
  // first block no tier has (match stops there too). match derives the keys again from its own
  // tokens (~70 ns a block): kept in seq, they would make it trust its tokens are these.
  const std::int32_t bs = pool_.block_size();
  const auto limit = static_cast<std::int32_t>(tokens.size()) - 1;
  const bool want_state = state_floor >= 0 && state_floats_ > 0 && disk_ != nullptr;
  std::vector<RestoreJob::Block> wanted;
  std::vector<RestoreJob::StateCandidate> states;  // chain order
  Hash128 parent = keyer_->root(ns);
  std::int32_t at = 0;
  for (; at + bs <= limit; at += bs) {
    const auto block_tokens = tokens.subspan(at, bs);
    const Hash128 key = keyer_->next(parent, block_tokens);
    // The host tier's blocks need no load: the match writes them from their slots.
    if (!by_key_.contains(key) && (host_ == nullptr || !host_->contains(key))) {
      if (disk_ == nullptr || !disk_->may_load(key)) break;
      wanted.push_back({.key = key,
                        .parent = parent,
                        .tokens_hash = keyer_->tokens_hash(block_tokens),
                        .depth = at / bs});
    }
    // A state block past what the caller holds, ending on this block: the disk's, or Redis's
    // (which one holds it only the restorer asks).
    if (want_state && at + bs > state_floor) {
      const Hash128 state = keyer_->state_key(key);
      if (disk_->may_load_state(state)) states.push_back({.key = state, .parent = key, .pos = at + bs});
    }
    parent = key;
  }
  if (wanted.empty() && states.empty()) return false;
  seq.restore_ = std::make_shared<RestoreJob>(std::move(wanted), io_.block_bytes, seq.retention_);
  if (!states.empty()) {
    const std::int32_t deepest = states.back().pos;
    seq.restore_->want_state(std::move(states), std::vector<std::int32_t>(tokens.begin(), tokens.begin() + deepest),
                             at, bs, state_floats_);
  }
  restorer_->submit(seq.restore_);
  return true;
}

void KvManager::restore_early(KvSequence& seq, std::span<const std::int32_t> tokens, std::string_view ns) {
  const std::shared_ptr<RestoreJob>& job = seq.restore_;
  // Only a load into the host tier publishes blocks before it is done; a state block is taken
  // by the match that finds the job done, which must be seq's own.
  if (!job->in_host() || job->wants_state()) return;
  const std::int32_t n = job->n_loaded();
  if (n < seq.n_early_restored_ + job->progress_step()) return;
  const std::int32_t end = (job->blocks()[static_cast<std::size_t>(n - 1)].depth + 1) * pool_.block_size();
  if (end >= static_cast<std::int32_t>(tokens.size())) return;
  KvSequence early;
  early.restore_ = job;  // its loaded blocks count as restored from disk
  match(early, tokens.first(static_cast<std::size_t>(end) + 1), ns, seq.retention_);
  seq.n_restored_ += early.n_restored_;
  seq.n_host_restored_ += early.n_host_restored_;
  release(early);  // the blocks stay cached: the match finds them on the device
  seq.n_early_restored_ = n;
}

std::span<const std::byte> KvManager::find_in_tiers(KvSequence& seq, const TierMeta& meta,
                                                    TierSource& from, SpillCodec& codec,
                                                    std::int32_t& cursor) {
  codec = SpillCodec::Native;
  // The background load's blocks are verified already (their source may be gone by now: fine).
  // (A load into the host tier left its blocks there, pinned: restore_from_tiers found them.)
  if (const RestoreJob* job = seq.restore_.get(); job != nullptr && job->done() && !job->in_host()) {
    const auto blocks = job->blocks();
    for (std::int32_t i = cursor; i < job->n_loaded(); ++i) {
      if (!(blocks[i].key == meta.key)) continue;
      cursor = i + 1;  // the job's blocks are in chain order
      from = TierSource::Job;
      return job->raw(i);
    }
  }
  // A block this match evicted (an orphan of the chain it restores) reaches the host tier first.
  if (demoting(meta.key)) finish_tier_reads();
  if (host_ != nullptr) {
    const std::span<const std::byte> slot = host_->pin(meta.key, meta.parent, meta.tokens_hash, &codec);
    if (!slot.empty()) {
      from = TierSource::Host;
      restore_pins_.push_back(meta.key);
      return slot;
    }
  }
  // With a restorer, disk blocks come only through restore_pending's background load: the
  // engine thread never waits for the disk.
  from = TierSource::DiskNow;
  if (restorer_ == nullptr && disk_ != nullptr &&
      disk_->load(meta.key, meta.parent, meta.tokens_hash, buffer_))
    return buffer_;
  from = TierSource::None;
  return {};
}

void KvManager::flush_restores(const std::shared_ptr<RestoreJob>& job) {
  if (restore_batch_.empty()) return;
  start_encoded_reads();  // the blocks taken for the batch were read as they were evicted
  const std::uint64_t fence = io_.write_blocks(restore_batch_);
  restore_batch_.clear();
  if (io_.writes_done(fence)) {  // read already (a host-side write): nothing to keep
    for (const Hash128& key : restore_pins_) host_->unpin(key);
    restore_pins_.clear();
    return;
  }
  restoring_.push_back({.fence = fence, .pinned = std::move(restore_pins_), .job = job});
  restore_pins_.clear();
}

void KvManager::release_restores() {
  while (!restoring_.empty() && io_.writes_done(restoring_.front().fence)) {
    for (const Hash128& key : restoring_.front().pinned) host_->unpin(key);
    restoring_.pop_front();
  }
}

std::int32_t KvManager::restore_from_tiers(KvSequence& seq, std::span<const std::int32_t> tokens,
                                           std::int32_t matched, std::int32_t limit) {
  const TierTimer timer(tier_times_.restore_s);
  const std::int32_t bs = pool_.block_size();
  // First the chain's keys, pinning the blocks the host tier holds: taking device blocks below
  // starts demotions, and those must not push out the blocks this restore is about to read.
  restore_metas_.clear();
  restore_slots_.clear();
  restore_codecs_.clear();
  for (std::int32_t at = matched; at + bs <= limit; at += bs) {
    const auto block_tokens = tokens.subspan(at, bs);
    const Hash128 parent = restore_metas_.empty()
                               ? (seq.keys_.empty() ? seq.root_key_ : seq.keys_.back())
                               : restore_metas_.back().key;
    const TierMeta meta{.key = keyer_->next(parent, block_tokens),
                        .parent = parent,
                        .tokens_hash = keyer_->tokens_hash(block_tokens),
                        .depth = static_cast<std::int32_t>(seq.keys_.size() + restore_metas_.size())};
    SpillCodec codec = SpillCodec::Native;  // the host block's own (a disk load may keep the disk's)
    const std::span<const std::byte> slot =
        host_ != nullptr ? host_->pin(meta.key, meta.parent, meta.tokens_hash, &codec)
                         : std::span<const std::byte>{};
    // Past a block no tier may have, nothing can follow (a device orphan may be demoted on the
    // way; a disk block comes from the background load or, without a restorer, from disk).
    if (slot.empty() && !by_key_.contains(meta.key) && (disk_ == nullptr || !disk_->may_load(meta.key)))
      break;
    restore_metas_.push_back(meta);
    restore_slots_.push_back(slot);
    restore_codecs_.push_back(codec);
  }

  std::int32_t cursor = 0;  // into seq's background load
  // A background load into the host tier left its blocks there: they count as disk restores.
  const RestoreJob* loaded_to_host =
      seq.restore_ != nullptr && seq.restore_->in_host() ? seq.restore_.get() : nullptr;
  std::int32_t host_cursor = 0;  // into that load's blocks (chain order)
  bool used_job = false;
  std::size_t k = 0;
  for (; k < restore_metas_.size() && n_available() > 0; ++k) {
    const TierMeta& meta = restore_metas_[k];
    TierSource from = TierSource::Host;
    SpillCodec codec = restore_codecs_[k];
    std::span<const std::byte> bytes = restore_slots_[k];
    if (!bytes.empty())
      restore_pins_.push_back(meta.key);
    else
      bytes = find_in_tiers(seq, meta, from, codec, cursor);
    if (from == TierSource::None) break;
    const BlockId b = take_block();  // may evict a cached block (its demotion is started)
    if (from == TierSource::DiskNow) {
      start_encoded_reads();  // b's old contents first
      io_.write(b, bytes);    // buffer_ is reused by the next block
    } else {
      restore_batch_.push_back({.block = b, .codec = codec, .bytes = bytes});
    }
    used_job = used_job || from == TierSource::Job;
    AKV_CHECK(index_.insert(seq.tail_key_, tokens.subspan(matched, bs), b) == b,
              "a restored block was already indexed");
    index_.set_retention(b, seq.retention_, /*lower=*/true);
    note_key(b, meta);
    seq.blocks_.push_back(b);
    seq.tail_key_ = index_.key_of(b);
    seq.keys_.push_back(meta.key);
    ++seq.n_indexed_;
    bool from_disk = from != TierSource::Host;
    // (Its leading blocks an early restore wrote are device hits now: skipped.)
    while (loaded_to_host != nullptr && host_cursor < loaded_to_host->n_loaded() &&
           loaded_to_host->blocks()[host_cursor].depth < meta.depth)
      ++host_cursor;
    if (!from_disk && loaded_to_host != nullptr && host_cursor < loaded_to_host->n_loaded() &&
        loaded_to_host->blocks()[host_cursor].key == meta.key) {
      from_disk = true;
      ++host_cursor;
    }
    ++(from_disk ? seq.n_restored_ : seq.n_host_restored_);
    matched += bs;
  }
  for (; k < restore_slots_.size(); ++k)  // pinned, not used
    if (!restore_slots_[k].empty()) host_->unpin(restore_metas_[k].key);
  // One batched write for every block above; what it reads stays pinned until its fence.
  flush_restores(used_job ? seq.restore_ : nullptr);
  return matched;
}

void KvManager::spill_missing(const KvSequence& seq) {
  std::size_t room = std::min(disk_->n_queue_room(), max_pending_);
  const auto n = std::min<std::size_t>(static_cast<std::size_t>(seq.n_indexed_), seq.keys_.size());
  for (std::size_t i = 0; i < n && room > 0; ++i) {
    const BlockId b = seq.blocks_[i];
    const TierMeta& meta = block_meta_[b];
    if (meta.key != seq.keys_[i] || spill_waiting_[b] || disk_->has(meta.key)) continue;
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
