#include "chat/encode_memo_store.h"

namespace akv {

std::string EncodeMemoStore::key_of(const TurnOwner& owner) {
  // Length-prefixed: no tenant and agent pair can spell another's key.
  return std::to_string(owner.tenant.size()) + ':' + owner.tenant + owner.agent;
}

std::vector<std::int32_t> EncodeMemoStore::encode(const TurnOwner& owner, const EncodeFn& encode) {
  if (!owner.identified() || capacity_bytes_ == 0) return encode(nullptr);
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(mu_);
    std::string key = key_of(owner);
    if (auto it = by_key_.find(key); it != by_key_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      slot = *it->second;
    } else {
      slot = std::make_shared<Slot>();
      slot->key = key;
      lru_.push_front(slot);
      by_key_.emplace(std::move(key), lru_.begin());
    }
  }
  std::vector<std::int32_t> ids;
  std::size_t bytes = 0;
  {
    std::lock_guard hold(slot->mu);
    ids = encode(&slot->memo);
    bytes = slot->memo.n_bytes();
  }
  std::lock_guard lock(mu_);
  const auto it = by_key_.find(slot->key);
  if (it == by_key_.end() || *it->second != slot) return ids;  // dropped meanwhile
  n_bytes_ = n_bytes_ - slot->n_bytes + bytes;
  slot->n_bytes = bytes;
  evict_over_capacity();
  return ids;
}

void EncodeMemoStore::evict_over_capacity() {
  while (n_bytes_ > capacity_bytes_ && !lru_.empty()) {
    const std::shared_ptr<Slot>& victim = lru_.back();
    n_bytes_ -= victim->n_bytes;
    by_key_.erase(victim->key);
    lru_.pop_back();
  }
}

std::size_t EncodeMemoStore::n_bytes() const {
  std::lock_guard lock(mu_);
  return n_bytes_;
}

std::size_t EncodeMemoStore::n_memos() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

}  // namespace akv
