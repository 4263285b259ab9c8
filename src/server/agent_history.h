// The recent turns of each agent, for the dashboard's TTFT history (GET /v1/dashboard).
// Per-agent series stay out of Prometheus (cardinality). Written by the HTTP thread that
// finishes a request, read by the dashboard endpoint; a mutex guards it (short copies only).
// Bounded: kTurnsPerAgent turns per agent, kMaxAgents agents (the least recently updated go).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace akv {

struct TurnSample {
  std::int64_t unix_ms = 0;
  double ttft_ms = 0;  // submit -> first token (queueing + restore + prefill)
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_tokens = 0;
  std::int64_t output_tokens = 0;
};

class AgentHistory {
 public:
  static constexpr std::size_t kTurnsPerAgent = 32;
  static constexpr std::size_t kMaxAgents = 4096;

  // Any thread. An anonymous request (agent "") is not recorded.
  void record(const std::string& tenant, const std::string& agent, const TurnSample& turn);
  // The tenant's agents and their turns, oldest turn first.
  std::vector<std::pair<std::string, std::vector<TurnSample>>> of_tenant(const std::string& tenant) const;

 private:
  struct Series {
    std::deque<TurnSample> turns;
    std::uint64_t updated = 0;  // the record() count at its last update
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, Series> series_;
  std::uint64_t n_records_ = 0;
};

}  // namespace akv
