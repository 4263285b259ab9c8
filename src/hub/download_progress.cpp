#include "hub/download_progress.h"

#include <fmt/format.h>

#include <cstdio>

#include "base/log.h"

namespace akv {

namespace {

std::string mib(std::int64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

std::string clock_text(double seconds) {
  const auto s = static_cast<std::int64_t>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60) : fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

DownloadProgress::DownloadProgress(std::string label, bool terminal)
    : label_(std::move(label)), terminal_(terminal), start_(std::chrono::steady_clock::now()) {
  reporter_ = std::thread([this] { loop(); });
}

DownloadProgress::~DownloadProgress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  reporter_.join();
  report(/*last=*/true);
}

void DownloadProgress::loop() {
  const auto period = terminal_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(10000);
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) report(/*last=*/false);
}

void DownloadProgress::report(bool last) {
  const std::int64_t total = total_.load();
  const std::int64_t done = std::min(done_.load(), total);
  if (total == 0) return;  // nothing to download: everything was in the cache
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
  const double fraction = static_cast<double>(done) / static_cast<double>(total);
  const std::string eta = rate > 0 ? clock_text(static_cast<double>(total - done) / rate) : "?";
  const std::string numbers = fmt::format("{:3.0f}% {} / {}, {}/s", 100 * fraction, mib(done), mib(total),
                                          mib(static_cast<std::int64_t>(rate)));
  if (terminal_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::fprintf(stderr, "\r%s [%s%s] %s, %s %s\x1b[K%s", label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, ' ').c_str(), numbers.c_str(), last ? "in" : "ETA",
                 last ? clock_text(seconds).c_str() : eta.c_str(), last ? "\n" : "");
    std::fflush(stderr);
  } else if (last) {
    if (done < total) log_info("{}: stopped at {}", label_, numbers);
    else log_info("{}: downloaded {} in {:.1f} s", label_, mib(done), seconds);
  } else {
    log_info("{}: {}, ETA {}", label_, numbers, eta);
  }
}

}  // namespace akv
