// Counters of the HTTP connection layer (http_connections.h): written by its worker pool and
// connection loops, read by GET /metrics on any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace akv {

struct ConnectionCounters {
  std::atomic<int> busy_workers{0};
  std::atomic<int> waiting_connections{0};    // accepted, not yet picked up by a worker
  std::atomic<std::int64_t> cut_requests{0};  // headers or body past their deadline or size
};

}  // namespace akv
