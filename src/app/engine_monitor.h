// A periodic engine line for the log while the engine is busy (running and waiting sequences,
// batch size, step time, KV blocks), so a person watching a slow generation can see why.
// Silent while idle; never per token.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/engine.h"

namespace akv {

class EngineMonitor {
 public:
  EngineMonitor(const Engine& engine, std::chrono::seconds interval);
  ~EngineMonitor();  // stops and joins the thread
  EngineMonitor(const EngineMonitor&) = delete;
  EngineMonitor& operator=(const EngineMonitor&) = delete;

 private:
  void loop();

  const Engine& engine_;
  std::chrono::seconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace akv
