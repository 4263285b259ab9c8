// Download progress for people and logs: on a terminal one line redrawn in place (bar,
// bytes, rate, ETA); otherwise a plain log line every 10 s and at the end. Thread-safe:
// downloads add bytes from any thread; a reporter thread draws.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace akv {

class DownloadProgress {
 public:
  // `label`: what is downloaded ("Qwen/Qwen3-0.6B"). `terminal`: stderr is a terminal.
  DownloadProgress(std::string label, bool terminal);
  ~DownloadProgress();  // stops the reporter and prints the last line
  DownloadProgress(const DownloadProgress&) = delete;
  DownloadProgress& operator=(const DownloadProgress&) = delete;

  void add_total(std::int64_t bytes) { total_ += bytes; }
  void add(std::int64_t bytes) { done_ += bytes; }  // negative when a restart drops bytes

 private:
  void report(bool last);
  void loop();

  const std::string label_;
  const bool terminal_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<std::int64_t> total_{0};
  std::atomic<std::int64_t> done_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread reporter_;
};

}  // namespace akv
