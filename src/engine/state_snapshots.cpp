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
  bytes_ -= it->bytes();
  index_.erase(it->key);
  lru_.erase(it);
}

void StateSnapshots::put(std::string_view ns, std::span<const std::int32_t> tokens,
                         std::int32_t pos, std::vector<float> state) {
  const auto size = static_cast<std::int64_t>(encoded_state_bytes(codec_, static_cast<std::int64_t>(state.size())));
  if (pos <= 0 || size > max_bytes_) return;
  const Hash128 key = key_of(ns, tokens, pos);
  if (auto it = index_.find(key); it != index_.end()) erase(it->second);
  Entry e{.key = key, .ns = std::string(ns), .pos = pos, .exact = {}, .encoded = {}};
  if (codec_ == StateCodec::Exact)
    e.exact = std::move(state);
  else
    e.encoded = encode_state(codec_, state);
  lru_.push_front(std::move(e));
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

bool StateSnapshots::contains(std::string_view ns, std::span<const std::int32_t> tokens, std::int32_t pos) const {
  return pos > 0 && pos <= static_cast<std::int32_t>(tokens.size()) && index_.contains(key_of(ns, tokens, pos));
}

std::span<const float> StateSnapshots::find(std::string_view ns, std::span<const std::int32_t> tokens,
                                            std::int32_t pos, std::vector<float>& scratch) const {
  if (pos <= 0 || pos > static_cast<std::int32_t>(tokens.size())) return {};
  const auto it = index_.find(key_of(ns, tokens, pos));
  if (it == index_.end()) return {};
  const Entry& e = *it->second;
  if (codec_ == StateCodec::Exact) return e.exact;
  scratch.resize(e.encoded.size() / encoded_state_bytes(codec_, 1));
  decode_state(codec_, e.encoded, scratch);
  return scratch;
}

std::int32_t SnapshotResume::resume_point(const Sequence& seq, std::int32_t matched) {
  const std::int32_t in_memory = snapshots_.deepest(seq.ns, seq.tokens, matched);
  if (tiers_ == nullptr || in_memory >= matched) return in_memory;
  loaded_.resize(static_cast<std::size_t>(kv_.state.slot_floats()));
  const std::int32_t on_disk = tiers_->load_state(seq.kv, seq.tokens, in_memory, matched, loaded_);
  if (on_disk <= in_memory) return in_memory;
  snapshots_.put(seq.ns, seq.tokens, on_disk, loaded_);  // restore() reads it from there
  return snapshots_.contains(seq.ns, seq.tokens, on_disk) ? on_disk : in_memory;
}

std::int32_t SnapshotResume::held_point(const Sequence& seq) {
  if (tiers_ == nullptr) return -1;
  return snapshots_.deepest(seq.ns, seq.tokens, static_cast<std::int32_t>(seq.tokens.size()) - 1);
}

void SnapshotResume::restore(const Sequence& seq, std::int32_t pos) {
  const std::span<const float> state = snapshots_.find(seq.ns, seq.tokens, pos, decoded_);
  AKV_CHECK(!state.empty() && seq.state_slot >= 0, "restore of a resume point without its snapshot");
  write_state_slot(backend_, kv_, seq.state_slot, state);
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
