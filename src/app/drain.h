// Drain mode for a fleet (docs/fleet.md): POST /admin/drain or SIGUSR1 makes /health answer 503
// "draining" at once (the load balancer stops sending new agents), waits for the requests in
// flight to end, then for the spills they left to reach the disk tier and the remote tier
// (bounded by the flush timeout), and then answers "drained". The process keeps running (a
// request that still arrives is served); stop it with SIGTERM once drained.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "kv/disk_store.h"
#include "kv/remote_store.h"
#include "server/serving.h"

namespace akv {

class Drainer {
 public:
  // disk and remote may be null. Starts a thread that waits for a request.
  Drainer(ServingContext& ctx, DiskStore* disk, RemoteStore* remote, double flush_timeout_s);
  ~Drainer();  // joins the thread (a drain under way is cut short)
  Drainer(const Drainer&) = delete;
  Drainer& operator=(const Drainer&) = delete;

  // Starts the drain (once; later calls do nothing). Any thread.
  void request();
  // The same from a signal handler (async-signal-safe: sets a flag the thread polls).
  void request_from_signal() { signalled_.store(true, std::memory_order_relaxed); }

 private:
  void loop();
  void drain();
  // Waits until the disk tier's queue is empty and its writes settled; false at the deadline.
  bool wait_for_disk(std::chrono::steady_clock::time_point deadline);

  ServingContext& ctx_;
  DiskStore* disk_;
  RemoteStore* remote_;
  double flush_timeout_s_;
  std::atomic<bool> signalled_{false};
  std::mutex mu_;
  std::condition_variable wake_;
  bool requested_ = false, stop_ = false;
  std::thread thread_;  // last
};

}  // namespace akv
