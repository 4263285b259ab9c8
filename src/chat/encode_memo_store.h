// One EncodeMemo (tokenizer/encode_memo.h) per conversation, so that PromptBuilder re-encodes
// only the turns that changed when a client sends its conversation again with a new turn (a
// next turn whose reply was cut by max_tokens or edited, which the remembered-turn splice does
// not cover). Keyed by TurnOwner: tenant and agent, so one conversation's text never serves
// another's; anonymous owners get none. A bounded LRU over conversations by bytes. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/assistant_text_store.h"
#include "tokenizer/encode_memo.h"

namespace akv {

class EncodeMemoStore {
 public:
  // Holds memos of at most `capacity_bytes` in all (0: none); the least recently used
  // conversation's memo is dropped first.
  explicit EncodeMemoStore(std::size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  using EncodeFn = std::function<std::vector<std::int32_t>(EncodeMemo* memo)>;
  // Returns encode(memo) with `owner`'s memo (made when missing), held for the call so that
  // two requests of one conversation take turns; encode(nullptr) for an anonymous owner or a
  // zero capacity. Afterwards the store drops other conversations' memos while over capacity
  // (this one too, when it alone is larger).
  std::vector<std::int32_t> encode(const TurnOwner& owner, const EncodeFn& encode);

  std::size_t n_bytes() const;
  std::size_t n_memos() const;

 private:
  struct Slot {
    std::mutex mu;  // held while an encode uses the memo
    EncodeMemo memo;
    std::string key;
    std::size_t n_bytes = 0;  // as last accounted (under the store's mutex)
  };
  static std::string key_of(const TurnOwner& owner);
  void evict_over_capacity();  // under mu_

  const std::size_t capacity_bytes_;
  mutable std::mutex mu_;
  std::list<std::shared_ptr<Slot>> lru_;  // most recent first
  std::unordered_map<std::string, std::list<std::shared_ptr<Slot>>::iterator> by_key_;
  std::size_t n_bytes_ = 0;
};

}  // namespace akv
