// Snapshots of hybrid models' recurrent state (every linear layer's conv and delta-rule state of
// one sequence, StateLayout::slot_floats) at token positions, content-addressed by the token
// prefix they summarise: key = XXH3-128(namespace, tokens[0, pos)). A request whose prefix has a
// snapshot resumes from it (with the KV of the same prefix) instead of recomputing from token 0.
// Host memory, least recently used first out under a byte budget; kept in a state codec
// (kv/state_codec.h: exact f32 by default, bf16 halves the bytes). Engine thread only.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/scheduler.h"
#include "kv/block_key.h"
#include "kv/state_codec.h"

namespace akv {

class StateSnapshots {
 public:
  explicit StateSnapshots(std::int64_t max_bytes, StateCodec codec = StateCodec::Exact)
      : max_bytes_(max_bytes), codec_(codec) {}

  // Stores the state after tokens[0, pos) in namespace ns (replacing an equal key), encoded in
  // the store's codec (exact: the vector itself, no copy), then drops the least recently used
  // snapshots beyond the budget (counted in encoded bytes). A snapshot larger than the whole
  // budget is not kept.
  void put(std::string_view ns, std::span<const std::int32_t> tokens, std::int32_t pos,
           std::vector<float> state);
  // The deepest snapshot position p <= limit whose prefix tokens[0, p) equals the tokens it was
  // taken over (same namespace), or 0 when none; marks it recently used.
  std::int32_t deepest(std::string_view ns, std::span<const std::int32_t> tokens,
                       std::int32_t limit);
  // The state at a position deepest() returned for these tokens: the stored floats (exact) or
  // their decoding into `scratch` (valid until the next put or erase, or scratch's next use);
  // empty if absent.
  std::span<const float> find(std::string_view ns, std::span<const std::int32_t> tokens,
                              std::int32_t pos, std::vector<float>& scratch) const;
  bool contains(std::string_view ns, std::span<const std::int32_t> tokens, std::int32_t pos) const;
  StateCodec codec() const { return codec_; }

  std::int64_t bytes() const { return bytes_; }
  std::size_t size() const { return lru_.size(); }

 private:
  struct Entry {
    Hash128 key;
    std::string ns;
    std::int32_t pos = 0;
    std::vector<float> exact;         // StateCodec::Exact
    std::vector<std::byte> encoded;   // other codecs
    std::int64_t bytes() const {
      return static_cast<std::int64_t>(exact.size() * sizeof(float) + encoded.size());
    }
  };
  static Hash128 key_of(std::string_view ns, std::span<const std::int32_t> tokens,
                        std::int32_t pos);
  void erase(std::list<Entry>::iterator it);

  std::int64_t max_bytes_;
  StateCodec codec_;
  std::int64_t bytes_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<Hash128, std::list<Entry>::iterator, Hash128Hasher> index_;
};

// The scheduler's StateResume over a snapshot store: resume points are the snapshots' positions,
// restoring writes the snapshot into the sequence's state slot. read() copies a running
// sequence's slot (its state at n_computed) to the host; keep() stores such a copy. With a KV
// manager whose tiers include a disk, keep() also writes the snapshot there as a state block
// (KvManager::put_state, and from the disk to Redis), and a resume point deeper than any
// snapshot in memory is looked for there (then kept in memory too): after a restart, once this
// store let it go, or on a replica that never saw the agent. With the KV manager's restorer the
// state block is loaded in the background with the prefix's KV (held_point tells how deep
// memory reaches already); without one, resume_point reads it.
class SnapshotResume final : public StateResume {
 public:
  SnapshotResume(StateSnapshots& snapshots, Backend& backend, KvStorage& kv,
                 KvManager* tiers = nullptr)
      : snapshots_(snapshots), backend_(backend), kv_(kv), tiers_(tiers) {
    if (tiers_ != nullptr) {
      tiers_->set_state_floats(kv_.state.slot_floats());
      tiers_->set_state_codec(snapshots_.codec());  // state blocks as the snapshots
    }
  }
  std::int32_t resume_point(const Sequence& seq, std::int32_t matched) override;
  void restore(const Sequence& seq, std::int32_t pos) override;
  std::int32_t held_point(const Sequence& seq) override;
  // state = seq's slot (resized to StateLayout::slot_floats).
  void read(const Sequence& seq, std::vector<float>& state);
  // Stores `state`, the state of seq after tokens[0, pos).
  void keep(Sequence& seq, std::int32_t pos, std::vector<float> state);

 private:
  StateSnapshots& snapshots_;
  Backend& backend_;
  KvStorage& kv_;
  KvManager* tiers_;
  std::vector<float> loaded_;   // a state block read from disk
  std::vector<float> decoded_;  // a snapshot decoded for restore()
};

}  // namespace akv
