#include "kv/host_store.h"

#include <algorithm>
#include <chrono>

#include "base/check.h"
#include "base/log.h"

namespace akv {

namespace {
constexpr std::size_t kSlotAlign = 256;
constexpr std::size_t kChunkBytes = 64u << 20;  // slots are carved from chunks of about this
}  // namespace

HostStore::HostStore(HostStoreOptions options)
    : options_(std::move(options)),
      slot_bytes_(encoded_bytes(options_.codec, options_.shape)),
      slot_stride_((slot_bytes_ + kSlotAlign - 1) / kSlotAlign * kSlotAlign),
      max_slots_(slot_bytes_ == 0 ? 0 : options_.max_bytes / slot_bytes_),
      slots_per_chunk_(std::max<std::size_t>(1, kChunkBytes / std::max<std::size_t>(1, slot_stride_))) {
  AKV_CHECK(options_.block_size > 0 && slot_bytes_ > 0, "host tier needs a block shape");
  AKV_CHECK(options_.attention_equal_tokens > 0.0, "attention_equal_tokens must be positive");
  if (!options_.alloc) options_.alloc = alloc_plain_host;
  stats_.max_bytes = static_cast<std::int64_t>(max_slots_ * slot_bytes_);
  entries_.reserve(max_slots_);
  if (options_.allocate_ahead && max_slots_ > 0) allocator_ = std::thread([this] { allocate_ahead(); });
}

HostStore::~HostStore() {
  stop_allocating_.store(true, std::memory_order_relaxed);
  if (allocator_.joinable()) allocator_.join();
}

std::size_t HostStore::next_chunk_slots_locked() const {
  const std::size_t have = chunks_.size() * slots_per_chunk_;
  return have >= max_slots_ ? 0 : std::min(slots_per_chunk_, max_slots_ - have);
}

void HostStore::allocate_ahead() {
  const auto t0 = std::chrono::steady_clock::now();
  while (!stop_allocating_.load(std::memory_order_relaxed)) {
    std::size_t n = 0;
    {
      std::lock_guard lock(mu_);
      n = next_chunk_slots_locked();
    }
    if (n == 0) {
      log_info("KV host tier: {} MiB allocated in {:.1f} s", (max_slots_ * slot_stride_) >> 20,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      return;
    }
    std::unique_ptr<HostMemory> chunk;
    try {
      chunk = options_.alloc(n * slot_stride_);  // outside the lock: demotions go on meanwhile
    } catch (const std::exception& e) {
      std::size_t held = 0;
      {
        std::lock_guard lock(mu_);
        held = chunks_.size() * slots_per_chunk_ * slot_stride_;
      }
      log_warn("KV host tier: allocating ahead stopped at {} MiB ({}); the rest on first use",
               held >> 20, e.what());
      return;
    }
    std::lock_guard lock(mu_);
    // A demotion may have allocated this chunk meanwhile: then this one is the next, if any.
    const std::size_t need = next_chunk_slots_locked();
    if (need == 0) return;
    if (chunk == nullptr || chunk->bytes().size() < need * slot_stride_) return;
    chunks_.push_back(std::move(chunk));
  }
}

bool HostStore::contains(const Hash128& key) const {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(key);
  return it != entries_.end() && it->second.ready && !it->second.erased;
}

std::optional<HostBlockMeta> HostStore::find_meta(const Hash128& key) const {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second.meta;
}

double HostStore::cost_locked(const Hash128& key, const HostBlockMeta& meta) const {
  const double bs = options_.block_size;
  const double recompute = bs * (1.0 + (meta.depth + 0.5) * bs / options_.attention_equal_tokens);
  const bool backed = options_.on_disk && options_.on_disk(key);
  const double cost = backed ? options_.disk_reload_fraction * bs : recompute;
  return retention_weight(meta.retention) * cost;
}

void HostStore::reprioritise_locked(const Hash128& key, Entry& e) {
  if (e.order != order_.end()) order_.erase(e.order);
  e.order = order_.emplace(std::pair{inflation_ + cost_locked(key, e.meta), serial_++}, key).first;
}

std::byte* HostStore::slot_data(std::int32_t slot) const {
  const auto i = static_cast<std::size_t>(slot);
  return chunks_[i / slots_per_chunk_]->bytes().data() + i % slots_per_chunk_ * slot_stride_;
}

void HostStore::free_entry_locked(std::unordered_map<Hash128, Entry, Hash128Hasher>::iterator it) {
  Entry& e = it->second;
  if (e.order != order_.end()) order_.erase(e.order);
  if (e.ready && !e.erased) --n_ready_;
  free_slots_.push_back(e.slot);
  entries_.erase(it);
}

bool HostStore::evict_one_locked() {
  for (auto victim = order_.begin(); victim != order_.end(); ++victim) {
    const auto it = entries_.find(victim->second);
    if (it->second.pins > 0) continue;  // a copy reads it
    inflation_ = victim->first.first;
    free_entry_locked(it);
    ++stats_.n_evicted;
    return true;
  }
  return false;
}

std::int32_t HostStore::take_slot_locked() {
  if (free_slots_.empty() && n_slots_ < max_slots_) {
    if (n_slots_ == chunks_.size() * slots_per_chunk_) {
      const std::size_t n = std::min(slots_per_chunk_, max_slots_ - n_slots_);
      chunks_.push_back(options_.alloc(n * slot_stride_));
      AKV_CHECK(chunks_.back() != nullptr && chunks_.back()->bytes().size() >= n * slot_stride_,
                "host tier: short allocation");
    }
    free_slots_.push_back(static_cast<std::int32_t>(n_slots_++));
  }
  if (free_slots_.empty() && !evict_one_locked()) return -1;
  const std::int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

bool HostStore::touch_locked(const Hash128& key, const HostBlockMeta& meta) {
  const auto it = entries_.find(key);
  if (it == entries_.end() || !it->second.ready || it->second.erased) return false;
  it->second.meta.retention = max_retention(it->second.meta.retention, meta.retention);
  reprioritise_locked(key, it->second);
  return true;
}

bool HostStore::touch(const Hash128& key, const HostBlockMeta& meta) {
  std::lock_guard lock(mu_);
  return touch_locked(key, meta);
}

std::span<std::byte> HostStore::reserve(const Hash128& key, const HostBlockMeta& meta,
                                        std::optional<SpillCodec> codec) {
  const SpillCodec c = codec.value_or(options_.codec);
  AKV_CHECK(holds_codec(c), "host tier: a block's codec larger than its slots");
  if (max_slots_ == 0) return {};
  std::lock_guard lock(mu_);
  if (entries_.contains(key)) return {};
  const std::int32_t slot = take_slot_locked();
  if (slot < 0) return {};
  entries_.emplace(key, Entry{.meta = meta, .slot = slot, .codec = c, .pins = 1, .order = order_.end()});
  return {slot_data(slot), encoded_bytes(c, options_.shape)};
}

void HostStore::release_locked(const Hash128& key, bool publish) {
  const auto it = entries_.find(key);
  AKV_CHECK(it != entries_.end() && it->second.pins > 0, "host tier: release of an unpinned block");
  Entry& e = it->second;
  --e.pins;
  if (!e.ready) {  // a reservation
    if (!publish || e.erased) {
      free_entry_locked(it);
      return;
    }
    e.ready = true;
    ++n_ready_;
    ++stats_.n_put;
    reprioritise_locked(key, e);
    return;
  }
  if (e.pins == 0 && e.erased) free_entry_locked(it);
}

void HostStore::publish(const Hash128& key) {
  std::lock_guard lock(mu_);
  release_locked(key, /*publish=*/true);
}

void HostStore::abandon(const Hash128& key) {
  std::lock_guard lock(mu_);
  release_locked(key, /*publish=*/false);
}

std::span<const std::byte> HostStore::bytes_locked(const Entry& e) const {
  return {slot_data(e.slot), encoded_bytes(e.codec, options_.shape)};
}

bool HostStore::put(const Hash128& key, const HostBlockMeta& meta, std::span<const std::byte> raw) {
  AKV_CHECK(raw.size() == options_.shape.raw_bytes(), "host tier block of the wrong size");
  if (touch(key, meta)) return true;
  const std::span<std::byte> slot = reserve(key, meta);
  if (slot.empty()) return false;
  encode_block(options_.codec, options_.shape, raw, slot);  // outside the lock
  publish(key);
  return true;
}

std::span<const std::byte> HostStore::pin(const Hash128& key, const Hash128& parent,
                                          const Hash128& tokens_hash, SpillCodec* codec) {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(key);
  if (it == entries_.end() || !it->second.ready || it->second.erased ||
      !(it->second.meta.parent == parent) || !(it->second.meta.tokens_hash == tokens_hash))
    return {};
  ++it->second.pins;
  reprioritise_locked(key, it->second);
  ++stats_.n_hits;
  if (codec != nullptr) *codec = it->second.codec;
  return bytes_locked(it->second);
}

std::span<const std::byte> HostStore::lend(const Hash128& key, SpillCodec* codec) {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(key);
  if (it == entries_.end() || !it->second.ready || it->second.erased) return {};
  ++it->second.pins;
  if (codec != nullptr) *codec = it->second.codec;
  return bytes_locked(it->second);
}

void HostStore::unpin(const Hash128& key) {
  std::lock_guard lock(mu_);
  release_locked(key, /*publish=*/false);
}

bool HostStore::get(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                    std::span<std::byte> raw) {
  AKV_CHECK(raw.size() == options_.shape.raw_bytes(), "host tier block of the wrong size");
  SpillCodec codec = options_.codec;
  const std::span<const std::byte> bytes = pin(key, parent, tokens_hash, &codec);
  if (bytes.empty()) return false;
  decode_block(codec, options_.shape, bytes, raw);  // outside the lock
  unpin(key);
  return true;
}

void HostStore::erase(const Hash128& key) {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(key);
  if (it == entries_.end() || it->second.erased) return;
  Entry& e = it->second;
  if (e.pins == 0) {
    free_entry_locked(it);
    return;
  }
  if (e.ready) --n_ready_;
  e.erased = true;
  if (e.order != order_.end()) order_.erase(e.order);
  e.order = order_.end();
}

void HostStore::set_retention(std::span<const Hash128> keys, Retention retention) {
  std::lock_guard lock(mu_);
  for (const Hash128& key : keys) {
    const auto it = entries_.find(key);
    if (it == entries_.end()) continue;
    it->second.meta.retention = retention;
    if (it->second.ready && !it->second.erased) reprioritise_locked(key, it->second);
  }
}

std::int64_t HostStore::stored_bytes(std::span<const Hash128> chain) const {
  std::lock_guard lock(mu_);
  std::int64_t n = 0;
  for (const Hash128& key : chain) {
    const auto it = entries_.find(key);
    n += it != entries_.end() && it->second.ready && !it->second.erased ? 1 : 0;
  }
  return n * static_cast<std::int64_t>(slot_bytes_);
}

HostStoreStats HostStore::stats() const {
  std::lock_guard lock(mu_);
  HostStoreStats s = stats_;
  s.n_blocks = n_ready_;
  s.bytes = n_ready_ * static_cast<std::int64_t>(slot_bytes_);
  return s;
}

}  // namespace akv
