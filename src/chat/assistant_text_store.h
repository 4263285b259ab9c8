// AssistantTextStore: the exact text the model generated for an assistant turn, so that the
// next request re-renders that turn byte-identically (architecture §6) instead of re-serialising
// it through the template (which would change whitespace, key order or thinking and break the
// KV prefix match). A bounded LRU shared by all requests of one model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "chat/chat_request.h"

namespace akv {

class AssistantTextStore {
 public:
  // Holds at most `max_entries` turns and `capacity_bytes` of raw text; the least recently used
  // turns are evicted first. A single text larger than capacity_bytes is not stored.
  explicit AssistantTextStore(std::size_t capacity_bytes = std::size_t{64} << 20,
                              std::size_t max_entries = 8192);

  // Records that the model produced `raw_text` for `turn` (the assistant message as sent to the
  // client: text, tool_use and thinking blocks). Empty raw text is ignored. Thread-safe.
  void remember(const ChatMessage& turn, std::string raw_text);

  // The raw text of a turn with the same canonical content, refreshing its LRU position.
  // Thread-safe.
  std::optional<std::string> find(const ChatMessage& turn);

  std::size_t n_entries() const;
  std::size_t n_bytes() const;

  // What identifies a turn: its text blocks (joined, surrounding whitespace trimmed) and each
  // tool call's name and input as sorted-key compact JSON, in order. Ids and thinking blocks
  // are left out (clients may drop thinking; ids do not change what the model wrote).
  static std::string canonical_content(const ChatMessage& turn);

 private:
  struct Key {
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return static_cast<std::size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull));
    }
  };
  struct Entry {
    Key key;
    std::string raw_text;
  };
  static Key key_of(const ChatMessage& turn);
  void evict_locked();

  const std::size_t capacity_bytes_;
  const std::size_t max_entries_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_;
  std::size_t n_bytes_ = 0;
};

}  // namespace akv
