#include "chat/assistant_text_store.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "chat/prompt_normalizer.h"

namespace akv {

namespace {

std::string_view trim_ws(std::string_view s) {
  const auto is_ws = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

AssistantTextStore::AssistantTextStore(std::size_t capacity_bytes, std::size_t max_entries)
    : capacity_bytes_(capacity_bytes), max_entries_(max_entries) {}

std::string AssistantTextStore::canonical_content(const ChatMessage& turn) {
  std::string out = "text\x1f";
  out += trim_ws(join_text_blocks(turn.blocks));
  for (const auto& b : turn.blocks) {
    if (b.type != BlockType::ToolUse) continue;
    out +=
        "\x1e"
        "call\x1f";
    out += b.tool_name;
    out += '\x1f';
    // nlohmann::json (not ordered_json) keeps object keys sorted: a canonical form.
    const nlohmann::json input =
        b.input.is_null() ? nlohmann::json::object() : nlohmann::json(b.input);
    out += input.dump();
  }
  return out;
}

AssistantTextStore::Key AssistantTextStore::key_of(const TurnOwner& owner, const ChatMessage& turn) {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  for (const std::string& part : {owner.tenant, owner.agent, canonical_content(turn)}) {
    const std::uint64_t n = part.size();  // length first: ("ab", "c") and ("a", "bc") differ
    XXH3_128bits_update(&state, &n, sizeof n);
    XXH3_128bits_update(&state, part.data(), part.size());
  }
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  return Key{h.low64, h.high64};
}

void AssistantTextStore::remember(const TurnOwner& owner, const ChatMessage& turn, std::string raw_text) {
  RememberedTurn remembered;
  remembered.raw_text = std::move(raw_text);
  remember(owner, turn, std::move(remembered));
}

void AssistantTextStore::remember(const TurnOwner& owner, const ChatMessage& turn, RememberedTurn remembered) {
  const std::size_t n_bytes = remembered.n_bytes() + owner.tenant.size() + owner.agent.size();
  if (!owner.identified() || remembered.raw_text.empty() || n_bytes > capacity_bytes_) return;
  const Key key = key_of(owner, turn);
  auto shared = std::make_shared<const RememberedTurn>(std::move(remembered));
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    n_bytes_ -= it->second->n_bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  n_bytes_ += n_bytes;
  lru_.push_front(Entry{key, owner, std::move(shared), n_bytes});
  index_[key] = lru_.begin();
  evict_locked();
}

std::optional<std::string> AssistantTextStore::find(const TurnOwner& owner, const ChatMessage& turn) {
  auto found = find_turn(owner, turn);
  if (!found) return std::nullopt;
  return found->raw_text;
}

std::shared_ptr<const RememberedTurn> AssistantTextStore::find_turn(const TurnOwner& owner, const ChatMessage& turn) {
  if (!owner.identified()) return nullptr;
  const Key key = key_of(owner, turn);
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end() || it->second->owner != owner) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->turn;
}

std::size_t AssistantTextStore::n_entries() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

std::size_t AssistantTextStore::n_bytes() const {
  std::lock_guard lock(mu_);
  return n_bytes_;
}

void AssistantTextStore::evict_locked() {
  while (!lru_.empty() && (n_bytes_ > capacity_bytes_ || lru_.size() > max_entries_)) {
    n_bytes_ -= lru_.back().n_bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

}  // namespace akv
