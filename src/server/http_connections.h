// cpp-httplib's server with our own connection loop: every read of a request runs against a
// deadline (request line and headers, then the body), so a client that trickles bytes is cut,
// and the worker pool counts busy workers and connections waiting for one (GET /metrics).
// Request parsing, routing and replies stay cpp-httplib's (Server::process_request).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>

#include "server/connection_counters.h"

namespace akv {

struct ConnectionLimits {
  int workers = 80;                                // threads; each serves one connection at a time
  std::chrono::milliseconds read_idle{10000};      // most silence between two reads of a request
  std::chrono::milliseconds header_timeout{10000}; // request line + headers, from their first byte
  std::chrono::milliseconds body_timeout{30000};   // the body, from the end of the headers
  std::size_t max_header_bytes = 256 << 10;        // request line + headers
  std::chrono::milliseconds keep_alive{5000};      // an idle connection's wait for its next request
  std::chrono::milliseconds write_idle{600000};    // most time a write waits for the client
};

class DeadlineHttpServer final : public httplib::Server {
 public:
  // `after_request` runs on the worker thread once each request's reply is written (or failed).
  DeadlineHttpServer(const ConnectionLimits& limits, ConnectionCounters& counters, std::function<void()> after_request);

 private:
  // Called by cpp-httplib's accept loop on a worker thread for each accepted socket: serves
  // its keep-alive requests through process_request, then closes it.
  bool process_and_close_socket(socket_t sock) override;
  bool wait_for_request(socket_t sock, bool between_requests, bool& yielded) const;
  bool take_yield() const;

  ConnectionLimits limits_;
  ConnectionCounters& counters_;
  std::function<void()> after_request_;
  mutable std::atomic<int> yielding_{0};  // idle connections closing for a waiting one
};

}  // namespace akv
