#include "server/agent_history.h"

#include <algorithm>

namespace akv {

void AgentHistory::record(const std::string& tenant, const std::string& agent, const TurnSample& turn) {
  if (agent.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series_[{tenant, agent}];
  s.turns.push_back(turn);
  if (s.turns.size() > kTurnsPerAgent) s.turns.pop_front();
  s.updated = ++n_records_;
  if (series_.size() > kMaxAgents) {
    auto oldest = std::min_element(series_.begin(), series_.end(),
                                   [](const auto& a, const auto& b) { return a.second.updated < b.second.updated; });
    series_.erase(oldest);
  }
}

std::vector<std::pair<std::string, std::vector<TurnSample>>> AgentHistory::of_tenant(const std::string& tenant) const {
  std::vector<std::pair<std::string, std::vector<TurnSample>>> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = series_.lower_bound({tenant, ""}); it != series_.end() && it->first.first == tenant; ++it)
    out.emplace_back(it->first.second, std::vector<TurnSample>(it->second.turns.begin(), it->second.turns.end()));
  return out;
}

}  // namespace akv
