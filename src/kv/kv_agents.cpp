// KvManager's agent hooks: a finished request's turn, the agents API's pin, unpin, evict and
// delete, and a graceful stop's writing of the agents' chains (most recently used first). All run
// on the engine thread (the stop's after the engine has stopped), so the agent index, the
// manifests queued to the disk tier and the blocks' retention change in one order (there is no
// other writer).
#include <chrono>
#include <vector>

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

AgentSpill KvManager::spill_agents_to_disk(std::chrono::steady_clock::time_point deadline) {
  AgentSpill out;
  if (disk_ == nullptr || agents_ == nullptr) return out;
  finish_tier_reads();
  for (const AgentRecord& agent : agents_->list_all()) {  // most recently used first
    const AgentSpill one = spill_chain_first(agent, deadline);
    out.n_moved += one.n_moved;
    out.n_queued += one.n_queued;
    out.n_missing += one.n_missing;
    out.n_late += one.n_late;
    out.n_agents += one.n_agents;
  }
  return out;
}

AgentSpill KvManager::spill_chain_first(const AgentRecord& agent,
                                        std::chrono::steady_clock::time_point deadline) {
  AgentSpill out;
  bool all_on_disk = true;
  std::vector<Hash128> run;  // queued blocks of the chain, moved ahead together (in chain order)
  const auto n_chain = static_cast<std::int64_t>(agent.chain.size());
  for (std::int64_t i = 0; i < n_chain; ++i) {
    const Hash128& key = agent.chain[i];
    if (disk_->on_disk(key)) continue;
    all_on_disk = false;
    if (disk_->has(key)) {
      run.push_back(key);
      continue;
    }
    out.n_moved += disk_->write_first(run);
    run.clear();
    std::vector<std::byte> raw = disk_->take_raw_buffer();
    TierMeta meta;
    if (!read_for_disk(key, raw, meta)) {
      out.n_missing += n_chain - i;
      break;
    }
    if (!disk_->put_first_or_wait(key, meta.parent, meta.tokens_hash, std::move(raw), deadline) &&
        !disk_->has(key)) {
      out.n_late += n_chain - i;
      break;
    }
    ++out.n_queued;
  }
  out.n_moved += disk_->write_first(run);
  out.n_moved += disk_->write_first(agent.states);  // a hybrid model's state blocks, if queued
  if (!all_on_disk) {
    disk_->put_manifest_first(agent);  // right behind its blocks
    out.n_agents = 1;
  }
  return out;
}

void KvManager::recompute_pinned_retention(std::span<const Hash128> keys) {
  const std::unordered_set<Hash128, Hash128Hasher> pinned = agents_->pinned_keys();
  std::vector<Hash128> high, normal;
  for (const Hash128& key : keys) (pinned.contains(key) ? high : normal).push_back(key);
  set_retention(normal, Retention::Normal);
  set_retention(high, Retention::High);
}

}  // namespace akv
