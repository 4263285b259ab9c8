// Hands engine events from the engine thread to the HTTP thread that serves the request.
// push() never blocks (the engine thread must not wait on a client); pop_for() waits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "engine/request.h"

namespace akv {

class EventQueue {
 public:
  void push(const EngineEvent& e) {
    {
      std::lock_guard lock(mu_);
      events_.push_back(e);
    }
    cv_.notify_one();
  }

  // The next event, or nullopt after `timeout` without one.
  std::optional<EngineEvent> pop_for(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [this] { return !events_.empty(); })) return std::nullopt;
    EngineEvent e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EngineEvent> events_;
};

}  // namespace akv
