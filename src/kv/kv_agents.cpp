// KvManager's agent hooks: a finished request's turn, and the agents API's pin, unpin, evict and
// delete. All run on the engine thread, so the agent index, the manifests queued to the disk tier
// and the blocks' retention change in one order (there is no other writer).
#include <chrono>

#include "base/check.h"
#include "kv/agent_index.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "kv/kv_manager.h"

namespace akv {

void KvManager::remember_agent(const KvSequence& seq, std::string_view ns, std::string_view agent,
                               std::int64_t n_tokens, bool hit) {
  if (agents_ == nullptr || agent.empty() || !seq.open_) return;
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const AgentRecord r =
      agents_->record_turn(ns, agent,
                           {.chain = seq.keys_,
                            .states = state_keys_of(seq),
                            .n_tokens = n_tokens,
                            .hit = hit,
                            .restored = seq.n_restored_ + seq.n_host_restored_ > 0,
                            .now_ms = now});
  if (disk_ != nullptr) {
    spill_missing(seq);  // blocks dropped when the disk queue was full, before the manifest
    disk_->put_manifest(r);
  }
  // Pinned while the request ran: its new blocks are the agent's too.
  if (r.pinned) set_retention(r.chain, Retention::High);
}

std::optional<AgentRecord> KvManager::set_agent_pinned(std::string_view ns, std::string_view agent,
                                                       bool pinned) {
  if (agents_ == nullptr) return std::nullopt;
  std::optional<AgentRecord> r = agents_->set_pinned(ns, agent, pinned);
  if (!r) return std::nullopt;
  if (disk_ != nullptr) disk_->put_manifest(*r);
  if (pinned)
    set_retention(r->chain, Retention::High);
  else
    recompute_pinned_retention(r->chain);
  return r;
}

std::optional<AgentRecord> KvManager::evict_agent(std::string_view ns, std::string_view agent) {
  if (agents_ == nullptr) return std::nullopt;
  std::optional<AgentRecord> r = agents_->find(ns, agent);
  if (r) evict_keys(r->chain);
  return r;
}

std::optional<AgentRecord> KvManager::erase_agent(std::string_view ns, std::string_view agent) {
  if (agents_ == nullptr) return std::nullopt;
  std::optional<AgentRecord> r = agents_->find(ns, agent);
  if (!r) return std::nullopt;
  const std::optional<std::vector<Hash128>> own = agents_->erase(ns, agent);
  AKV_CHECK(own.has_value(), "an agent found a moment ago is gone: a second writer");
  evict_keys(*own);
  if (disk_ != nullptr) disk_->erase(r->tenant, r->agent, *own);
  // The blocks it shares with others stay; the ones it alone pinned are pinned no more.
  if (r->pinned) recompute_pinned_retention(r->chain);
  return r;
}

void KvManager::recompute_pinned_retention(std::span<const Hash128> keys) {
  const std::unordered_set<Hash128, Hash128Hasher> pinned = agents_->pinned_keys();
  std::vector<Hash128> high, normal;
  for (const Hash128& key : keys) (pinned.contains(key) ? high : normal).push_back(key);
  set_retention(normal, Retention::Normal);
  set_retention(high, Retention::High);
}

}  // namespace akv
