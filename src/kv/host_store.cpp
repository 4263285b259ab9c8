#include "kv/host_store.h"

#include <cstring>

#include "base/check.h"

namespace akv {

HostStore::HostStore(HostStoreOptions options)
    : options_(std::move(options)),
      slot_bytes_(encoded_bytes(options_.codec, options_.shape)),
      max_slots_(slot_bytes_ == 0 ? 0 : options_.max_bytes / slot_bytes_) {
  AKV_CHECK(options_.block_size > 0 && slot_bytes_ > 0, "host tier needs a block shape");
  AKV_CHECK(options_.attention_equal_tokens > 0.0, "attention_equal_tokens must be positive");
  stats_.max_bytes = static_cast<std::int64_t>(max_slots_ * slot_bytes_);
  entries_.reserve(max_slots_);
}

bool HostStore::contains(const Hash128& key) const {
  std::lock_guard lock(mu_);
  return entries_.contains(key);
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

void HostStore::evict_one_locked() {
  const auto victim = order_.begin();
  inflation_ = victim->first.first;
  const auto it = entries_.find(victim->second);
  free_slots_.push_back(it->second.slot);
  entries_.erase(it);
  order_.erase(victim);
  ++stats_.n_evicted;
}

std::int32_t HostStore::take_slot_locked() {
  if (free_slots_.empty() && slots_.size() < max_slots_) {
    slots_.push_back(std::make_unique<std::byte[]>(slot_bytes_));
    free_slots_.push_back(static_cast<std::int32_t>(slots_.size() - 1));
  }
  if (free_slots_.empty()) evict_one_locked();
  const std::int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

bool HostStore::touch_locked(const Hash128& key, const HostBlockMeta& meta) {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  it->second.meta.retention = max_retention(it->second.meta.retention, meta.retention);
  reprioritise_locked(key, it->second);
  return true;
}

bool HostStore::touch(const Hash128& key, const HostBlockMeta& meta) {
  std::lock_guard lock(mu_);
  return touch_locked(key, meta);
}

bool HostStore::put(const Hash128& key, const HostBlockMeta& meta, std::span<const std::byte> raw) {
  AKV_CHECK(raw.size() == options_.shape.raw_bytes(), "host tier block of the wrong size");
  if (max_slots_ == 0) return false;
  std::lock_guard lock(mu_);
  if (touch_locked(key, meta)) return true;
  const std::int32_t slot = take_slot_locked();
  encode_block(options_.codec, options_.shape, raw, {slots_[slot].get(), slot_bytes_});
  Entry& e =
      entries_.emplace(key, Entry{.meta = meta, .slot = slot, .order = order_.end()}).first->second;
  reprioritise_locked(key, e);
  ++stats_.n_put;
  return true;
}

bool HostStore::get(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                    std::span<std::byte> raw) {
  AKV_CHECK(raw.size() == options_.shape.raw_bytes(), "host tier block of the wrong size");
  std::lock_guard lock(mu_);
  const auto it = entries_.find(key);
  if (it == entries_.end() || !(it->second.meta.parent == parent) ||
      !(it->second.meta.tokens_hash == tokens_hash))
    return false;
  decode_block(options_.codec, options_.shape, {slots_[it->second.slot].get(), slot_bytes_}, raw);
  reprioritise_locked(key, it->second);
  ++stats_.n_hits;
  return true;
}

void HostStore::erase(const Hash128& key) {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(key);
  if (it == entries_.end()) return;
  order_.erase(it->second.order);
  free_slots_.push_back(it->second.slot);
  entries_.erase(it);
}

void HostStore::set_retention(std::span<const Hash128> keys, Retention retention) {
  std::lock_guard lock(mu_);
  for (const Hash128& key : keys) {
    const auto it = entries_.find(key);
    if (it == entries_.end()) continue;
    it->second.meta.retention = retention;
    reprioritise_locked(key, it->second);
  }
}

std::int64_t HostStore::stored_bytes(std::span<const Hash128> chain) const {
  std::lock_guard lock(mu_);
  std::int64_t n = 0;
  for (const Hash128& key : chain) n += entries_.contains(key) ? 1 : 0;
  return n * static_cast<std::int64_t>(slot_bytes_);
}

HostStoreStats HostStore::stats() const {
  std::lock_guard lock(mu_);
  HostStoreStats s = stats_;
  s.n_blocks = static_cast<std::int64_t>(entries_.size());
  s.bytes = s.n_blocks * static_cast<std::int64_t>(slot_bytes_);
  return s;
}

}  // namespace akv
