#include "engine/state_snapshots.h"

#include <algorithm>

#include "base/check.h"

namespace akv {

Hash128 StateSnapshots::key_of(std::string_view ns, std::span<const std::int32_t> tokens,
                               std::int32_t pos) {
  const Hash128 ns_hash = hash128(std::as_bytes(std::span(ns.data(), ns.size())));
  return hash128(std::as_bytes(tokens.first(static_cast<std::size_t>(pos))),
                 ns_hash.lo ^ ns_hash.hi);
}

void StateSnapshots::erase(std::list<Entry>::iterator it) {
  bytes_ -= static_cast<std::int64_t>(it->state.size() * sizeof(float));
  index_.erase(it->key);
  lru_.erase(it);
}

void StateSnapshots::put(std::string_view ns, std::span<const std::int32_t> tokens,
                         std::int32_t pos, std::vector<float> state) {
  const auto size = static_cast<std::int64_t>(state.size() * sizeof(float));
  if (pos <= 0 || size > max_bytes_) return;
  const Hash128 key = key_of(ns, tokens, pos);
  if (auto it = index_.find(key); it != index_.end()) erase(it->second);
  lru_.push_front({.key = key, .ns = std::string(ns), .pos = pos, .state = std::move(state)});
  index_[key] = lru_.begin();
  bytes_ += size;
  while (bytes_ > max_bytes_) erase(std::prev(lru_.end()));
}

std::int32_t StateSnapshots::deepest(std::string_view ns, std::span<const std::int32_t> tokens,
                                     std::int32_t limit) {
  limit = std::min(limit, static_cast<std::int32_t>(tokens.size()));
  auto best = lru_.end();
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->ns != ns || it->pos > limit || (best != lru_.end() && it->pos <= best->pos)) continue;
    if (it->key == key_of(ns, tokens, it->pos)) best = it;
  }
  if (best == lru_.end()) return 0;
  lru_.splice(lru_.begin(), lru_, best);
  return best->pos;
}

const std::vector<float>* StateSnapshots::find(std::string_view ns,
                                               std::span<const std::int32_t> tokens,
                                               std::int32_t pos) const {
  if (pos <= 0 || pos > static_cast<std::int32_t>(tokens.size())) return nullptr;
  const auto it = index_.find(key_of(ns, tokens, pos));
  return it == index_.end() ? nullptr : &it->second->state;
}

std::int32_t SnapshotResume::resume_point(const Sequence& seq, std::int32_t matched) {
  const std::int32_t in_memory = snapshots_.deepest(seq.ns, seq.tokens, matched);
  if (tiers_ == nullptr || in_memory >= matched) return in_memory;
  loaded_.resize(static_cast<std::size_t>(kv_.state.slot_floats()));
  const std::int32_t on_disk = tiers_->load_state(seq.kv, seq.tokens, in_memory, matched, loaded_);
  if (on_disk <= in_memory) return in_memory;
  snapshots_.put(seq.ns, seq.tokens, on_disk, loaded_);  // restore() reads it from there
  return snapshots_.find(seq.ns, seq.tokens, on_disk) != nullptr ? on_disk : in_memory;
}

std::int32_t SnapshotResume::held_point(const Sequence& seq) {
  if (tiers_ == nullptr) return -1;
  return snapshots_.deepest(seq.ns, seq.tokens, static_cast<std::int32_t>(seq.tokens.size()) - 1);
}

void SnapshotResume::restore(const Sequence& seq, std::int32_t pos) {
  const std::vector<float>* state = snapshots_.find(seq.ns, seq.tokens, pos);
  AKV_CHECK(state != nullptr && seq.state_slot >= 0,
            "restore of a resume point without its snapshot");
  write_state_slot(backend_, kv_, seq.state_slot, *state);
}

void SnapshotResume::read(const Sequence& seq, std::vector<float>& state) {
  AKV_CHECK(seq.state_slot >= 0, "read of a sequence without a state slot");
  state.resize(static_cast<std::size_t>(kv_.state.slot_floats()));
  read_state_slot(backend_, kv_, seq.state_slot, state);
}

void SnapshotResume::keep(Sequence& seq, std::int32_t pos, std::vector<float> state) {
  if (tiers_ != nullptr) tiers_->put_state(seq.kv, seq.tokens, pos, state);
  snapshots_.put(seq.ns, seq.tokens, pos, std::move(state));
}

}  // namespace akv
