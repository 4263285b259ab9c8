// Agent id -> the chain of block keys of that agent's last conversation state (prompt and
// generated tokens whose KV was computed, full blocks only) plus its stats. The agent id sets
// retention and shows up in the agents API; it does not partition the cache (blocks are shared
// by content). Keyed by (tenant, agent), so one tenant never sees another's agents.
// Thread-safe for reads (HTTP threads list and find agents). One writer: the engine thread
// records turns and residency and applies the agents API's pin, unpin, evict and delete
// (KvManager's agent hooks, kv_agents.cpp), so the index and the manifests change in one order.
// Every call holds one mutex briefly; nothing here does IO.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kv/block_key.h"

namespace akv {

struct AgentRecord {
  std::string tenant;  // namespace (hash of the API key); "" without auth
  std::string agent;
  std::vector<Hash128> chain;  // keys of its last state's full blocks, first block first
  // Hybrid models: keys of the state blocks (recurrent-state snapshots, block_key.h state_key)
  // of that chain, deepest last; retention treats them like the chain's blocks.
  std::vector<Hash128> states{};
  std::int64_t n_tokens = 0;   // tokens of its last state with KV (chain covers the full blocks)
  std::uint64_t n_requests = 0;
  std::uint64_t hits = 0;        // requests that found a cached prefix (any tier)
  std::uint64_t restores = 0;    // requests that loaded blocks from disk
  std::int64_t last_use_ms = 0;  // unix time
  bool pinned = false;
};

// One finished request of an agent, as the KV side saw it.
struct AgentTurn {
  std::vector<Hash128> chain;
  std::vector<Hash128> states{};
  std::int64_t n_tokens = 0;
  bool hit = false;
  bool restored = false;
  std::int64_t now_ms = 0;
};

class AgentIndex {
 public:
  // Updates (or creates) the agent's record with its new last state; returns a copy (for the
  // manifest).
  AgentRecord record_turn(std::string_view tenant, std::string_view agent, AgentTurn turn);
  // A record read back at start-up; replaces one with the same (tenant, agent).
  void load(AgentRecord record);

  std::optional<AgentRecord> find(std::string_view tenant, std::string_view agent) const;
  // The tenant's agents, most recently used first.
  std::vector<AgentRecord> list(std::string_view tenant) const;
  // Every tenant's agents, most recently used first.
  std::vector<AgentRecord> list_all() const;
  // Returns the updated record; nullopt for an unknown agent.
  std::optional<AgentRecord> set_pinned(std::string_view tenant, std::string_view agent,
                                        bool pinned);
  // Removes the record and returns the keys of its chain and states that no other agent's
  // record holds (those blocks may go); nullopt for an unknown agent.
  std::optional<std::vector<Hash128>> erase(std::string_view tenant, std::string_view agent);
  // True when the agent is known and pinned.
  bool is_pinned(std::string_view tenant, std::string_view agent) const;
  // True when some pinned agent's chain holds `key`.
  bool is_pinned_key(const Hash128& key) const;
  // Every key some pinned agent's chain holds (one pass over the records).
  std::unordered_set<Hash128, Hash128Hasher> pinned_keys() const;

  // Device residency of blocks by key (kept by the KV manager as blocks are indexed/evicted).
  void set_resident(const Hash128& key, bool resident);
  std::int64_t n_resident(const std::vector<Hash128>& chain) const;

  std::size_t size() const;

 private:
  static std::string id_of(std::string_view tenant, std::string_view agent);

  mutable std::mutex mu_;
  std::unordered_map<std::string, AgentRecord> records_;
  std::unordered_set<Hash128, Hash128Hasher> resident_;
};

}  // namespace akv
