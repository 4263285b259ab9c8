// KvManager's state blocks: hybrid models' recurrent-state snapshots written behind to the disk
// tier (and from there to the remote tier) and loaded back from either, keyed like the KV block
// each ends on (kv_manager.h).
#include <algorithm>

#include "base/check.h"
#include "kv/disk_store.h"
#include "kv/kv_manager.h"

namespace akv {

void KvManager::put_state(KvSequence& seq, std::span<const std::int32_t> tokens, std::int32_t pos,
                          std::span<const float> state) {
  const std::int32_t bs = pool_.block_size();
  if (disk_ == nullptr || pos <= 0 || pos % bs != 0) return;
  const auto i = static_cast<std::size_t>(pos / bs - 1);
  if (i >= seq.keys_.size() || static_cast<std::size_t>(pos) > tokens.size()) return;
  const Hash128 key = keyer_->state_key(seq.keys_[i]);
  seq.state_key_ = key;
  seq.state_pos_ = pos;
  disk_->put_state(key, seq.keys_[i], keyer_->tokens_hash(tokens.first(static_cast<std::size_t>(pos))),
                   encode_state(state_codec_, state), state_codec_);
}

std::int32_t KvManager::load_state(const KvSequence& seq, std::span<const std::int32_t> tokens,
                                   std::int32_t floor, std::int32_t limit, std::span<float> state) {
  if (disk_ == nullptr) return 0;
  const std::int32_t bs = pool_.block_size();
  if (restorer_ != nullptr) {  // the background load's, if it brought one (never a read here)
    const std::int32_t pos = seq.loaded_state_pos_;
    if (pos <= floor || pos > limit || pos / bs > seq.n_indexed_ || seq.loaded_state_.size() != state.size()) return 0;
    std::copy(seq.loaded_state_.begin(), seq.loaded_state_.end(), state.begin());
    return pos;
  }
  const auto n_keys = static_cast<std::int32_t>(std::min<std::size_t>(
      seq.keys_.size(), static_cast<std::size_t>(std::max(seq.n_indexed_, 0))));
  const std::int32_t top = std::min({limit / bs, n_keys, static_cast<std::int32_t>(tokens.size()) / bs});
  // Candidates deepest first; which ones a tier holds is asked once (one Redis round trip).
  std::vector<std::int32_t> blocks;
  std::vector<Hash128> keys;
  for (std::int32_t b = top; b * bs > floor && b > 0; --b) {
    blocks.push_back(b);
    keys.push_back(keyer_->state_key(seq.keys_[static_cast<std::size_t>(b - 1)]));
  }
  const std::vector<bool> stored = disk_->find_states(keys);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (!stored[i]) continue;
    const std::int32_t b = blocks[i], pos = b * bs;
    const Hash128& block_key = seq.keys_[static_cast<std::size_t>(b - 1)];
    const Hash128 prefix_hash = keyer_->tokens_hash(tokens.first(static_cast<std::size_t>(pos)));
    if (disk_->load_state(keys[i], block_key, prefix_hash, state)) return pos;
  }
  return 0;
}

std::vector<Hash128> KvManager::state_keys_of(const KvSequence& seq) const {
  const std::int32_t bs = pool_.block_size();
  // Only a state whose KV block is still in the chain the agent records.
  const std::int32_t b = seq.state_pos_ / bs;
  if (b <= 0 || b > static_cast<std::int32_t>(seq.keys_.size()) ||
      keyer_->state_key(seq.keys_[static_cast<std::size_t>(b - 1)]) != seq.state_key_)
    return {};
  return {seq.state_key_};
}

}  // namespace akv
