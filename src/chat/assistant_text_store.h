// AssistantTextStore: the exact text the model generated for an assistant turn, so that the
// next request re-renders that turn byte-identically (architecture §6) instead of re-serialising
// it through the template (which would change whitespace, key order or thinking and break the
// KV prefix match), and, when the caller has them, the prompt and generated token ids the KV
// cache holds for it (PromptBuilder splices them back). A bounded LRU shared by all requests of
// one model, partitioned by conversation (TurnOwner): a turn is found only by the tenant and
// agent that generated it, so a common reply ("Done.") never carries one conversation's raw
// text (hidden reasoning included) into another's prompt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/chat_request.h"

namespace akv {

// One generated assistant turn. The ids are empty when the caller had none (text only).
struct RememberedTurn {
  std::string raw_text;  // as generated: special tokens kept, end-of-turn token excluded
  // What the KV cache holds for the turn: prompt_text + raw_text, as prompt_ids + generated_ids
  // (the generated ids as sampled, which may differ from how the tokenizer encodes raw_text).
  std::string prompt_text;
  std::vector<std::int32_t> prompt_ids;
  std::vector<std::int32_t> generated_ids;

  bool has_ids() const { return !prompt_ids.empty() || !generated_ids.empty(); }
  std::size_t n_bytes() const {
    return raw_text.size() + prompt_text.size() +
           sizeof(std::int32_t) * (prompt_ids.size() + generated_ids.size());
  }
};

// Whose conversation a turn belongs to: the request identity (server/request_identity.h).
// Without an agent id there is no conversation identity (two conversations of one tenant may
// end turns with the same reply), so an anonymous request's turns are neither remembered nor
// found: its assistant turns re-render through the template (a shorter KV prefix match).
struct TurnOwner {
  std::string tenant{};  // "" without auth
  std::string agent{};   // "": anonymous
  bool identified() const { return !agent.empty(); }
  friend bool operator==(const TurnOwner&, const TurnOwner&) = default;
};

class AssistantTextStore {
 public:
  // Holds at most `max_entries` turns and `capacity_bytes` (texts + 4 bytes per id); the least
  // recently used turns are evicted first. A single turn larger than capacity_bytes is not
  // stored.
  explicit AssistantTextStore(std::size_t capacity_bytes = std::size_t{64} << 20,
                              std::size_t max_entries = 8192);

  // Records that the model produced `raw_text` for `turn` (the assistant message as sent to the
  // client: text, tool_use and thinking blocks) in `owner`'s conversation. Empty raw text and
  // anonymous owners are ignored. Thread-safe.
  void remember(const TurnOwner& owner, const ChatMessage& turn, std::string raw_text);
  // Same with the prompt and ids the KV cache holds (RememberedTurn).
  void remember(const TurnOwner& owner, const ChatMessage& turn, RememberedTurn remembered);

  // The raw text of a turn `owner` remembered with the same canonical content, refreshing its
  // LRU position; nullopt for an anonymous owner. Thread-safe.
  std::optional<std::string> find(const TurnOwner& owner, const ChatMessage& turn);
  // The whole remembered turn (shared, immutable), or null. Thread-safe.
  std::shared_ptr<const RememberedTurn> find_turn(const TurnOwner& owner, const ChatMessage& turn);

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
    TurnOwner owner;  // compared on lookup: the key's hash alone never joins two owners
    std::shared_ptr<const RememberedTurn> turn;
    std::size_t n_bytes = 0;
  };
  static Key key_of(const TurnOwner& owner, const ChatMessage& turn);
  void evict_locked();

  const std::size_t capacity_bytes_;
  const std::size_t max_entries_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_;
  std::size_t n_bytes_ = 0;
};

}  // namespace akv
