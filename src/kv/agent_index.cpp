#include "kv/agent_index.h"

#include <algorithm>

namespace akv {

std::string AgentIndex::id_of(std::string_view tenant, std::string_view agent) {
  std::string id(tenant);
  id += '\n';  // never inside a tenant hash or a validated agent id
  id += agent;
  return id;
}

AgentRecord AgentIndex::record_turn(std::string_view tenant, std::string_view agent,
                                    AgentTurn turn) {
  std::lock_guard lock(mu_);
  AgentRecord& r = records_[id_of(tenant, agent)];
  if (r.agent.empty()) {
    r.tenant = std::string(tenant);
    r.agent = std::string(agent);
  }
  r.chain = std::move(turn.chain);
  r.states = std::move(turn.states);
  r.n_tokens = turn.n_tokens;
  ++r.n_requests;
  if (turn.hit) ++r.hits;
  if (turn.restored) ++r.restores;
  r.last_use_ms = turn.now_ms;
  return r;
}

void AgentIndex::load(AgentRecord record) {
  std::lock_guard lock(mu_);
  records_[id_of(record.tenant, record.agent)] = std::move(record);
}

std::optional<AgentRecord> AgentIndex::find(std::string_view tenant, std::string_view agent) const {
  std::lock_guard lock(mu_);
  auto it = records_.find(id_of(tenant, agent));
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

namespace {
void sort_most_recent_first(std::vector<AgentRecord>& records) {
  std::sort(records.begin(), records.end(), [](const AgentRecord& a, const AgentRecord& b) {
    return a.last_use_ms != b.last_use_ms ? a.last_use_ms > b.last_use_ms : a.agent < b.agent;
  });
}
}  // namespace

std::vector<AgentRecord> AgentIndex::list(std::string_view tenant) const {
  std::vector<AgentRecord> out;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, r] : records_)
      if (r.tenant == tenant) out.push_back(r);
  }
  sort_most_recent_first(out);
  return out;
}

std::vector<AgentRecord> AgentIndex::list_all() const {
  std::vector<AgentRecord> out;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, r] : records_) out.push_back(r);
  }
  sort_most_recent_first(out);
  return out;
}

std::optional<AgentRecord> AgentIndex::set_pinned(std::string_view tenant, std::string_view agent,
                                                  bool pinned) {
  std::lock_guard lock(mu_);
  auto it = records_.find(id_of(tenant, agent));
  if (it == records_.end()) return std::nullopt;
  it->second.pinned = pinned;
  return it->second;
}

std::optional<std::vector<Hash128>> AgentIndex::erase(std::string_view tenant,
                                                      std::string_view agent) {
  std::lock_guard lock(mu_);
  auto it = records_.find(id_of(tenant, agent));
  if (it == records_.end()) return std::nullopt;
  std::unordered_set<Hash128, Hash128Hasher> others;
  for (const auto& [id, r] : records_)
    if (&r != &it->second) {
      others.insert(r.chain.begin(), r.chain.end());
      others.insert(r.states.begin(), r.states.end());
    }
  std::vector<Hash128> mine;
  for (const Hash128& k : it->second.chain)
    if (!others.contains(k)) mine.push_back(k);
  for (const Hash128& k : it->second.states)
    if (!others.contains(k)) mine.push_back(k);
  records_.erase(it);
  return mine;
}

bool AgentIndex::is_pinned(std::string_view tenant, std::string_view agent) const {
  std::lock_guard lock(mu_);
  const auto it = records_.find(id_of(tenant, agent));
  return it != records_.end() && it->second.pinned;
}

bool AgentIndex::is_pinned_key(const Hash128& key) const {
  std::lock_guard lock(mu_);
  for (const auto& [id, r] : records_)
    if (r.pinned && std::find(r.chain.begin(), r.chain.end(), key) != r.chain.end()) return true;
  return false;
}

std::unordered_set<Hash128, Hash128Hasher> AgentIndex::pinned_keys() const {
  std::lock_guard lock(mu_);
  std::unordered_set<Hash128, Hash128Hasher> keys;
  for (const auto& [id, r] : records_)
    if (r.pinned) {
      keys.insert(r.chain.begin(), r.chain.end());
      keys.insert(r.states.begin(), r.states.end());
    }
  return keys;
}

void AgentIndex::set_resident(const Hash128& key, bool resident) {
  std::lock_guard lock(mu_);
  if (resident)
    resident_.insert(key);
  else
    resident_.erase(key);
}

std::int64_t AgentIndex::n_resident(const std::vector<Hash128>& chain) const {
  std::lock_guard lock(mu_);
  std::int64_t n = 0;
  for (const Hash128& k : chain) n += resident_.contains(k) ? 1 : 0;
  return n;
}

std::size_t AgentIndex::size() const {
  std::lock_guard lock(mu_);
  return records_.size();
}

}  // namespace akv
