#include "app/drain.h"

#include "base/log.h"

namespace akv {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(100);
}  // namespace

Drainer::Drainer(ServingContext& ctx, DiskStore* disk, RemoteStore* remote, double flush_timeout_s)
    : ctx_(ctx), disk_(disk), remote_(remote), flush_timeout_s_(flush_timeout_s) {
  thread_ = std::thread([this] { loop(); });
}

Drainer::~Drainer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Drainer::request() {
  {
    std::lock_guard lock(mu_);
    requested_ = true;
  }
  ctx_.state.store(ServeState::Draining);  // at once: the caller's answer says so
  wake_.notify_all();
}

void Drainer::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, kPoll, [&] { return stop_ || requested_; });
    if (signalled_.load(std::memory_order_relaxed)) {
      requested_ = true;
      ctx_.state.store(ServeState::Draining);
    }
    if (stop_ || !requested_) continue;
    lock.unlock();
    drain();
    return;
  }
}

void Drainer::drain() {
  const auto t0 = Clock::now();
  log_info("draining: /health answers 503; waiting for {} requests in flight", ctx_.in_flight.load());
  const auto stopping = [&] {
    std::lock_guard lock(mu_);
    return stop_;
  };
  while (ctx_.in_flight.load() > 0) {
    if (stopping()) return;
    std::this_thread::sleep_for(kPoll);
  }
  // Their spills: the engine's queue empties while it idles, into the disk tier, then Redis.
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(flush_timeout_s_));
  const bool disk_done = disk_ == nullptr || wait_for_disk(deadline);
  const bool remote_done = remote_ == nullptr || remote_->flush(deadline);
  ctx_.state.store(ServeState::Drained);
  log_info("drained in {:.1f} s{}{}", std::chrono::duration<double>(Clock::now() - t0).count(),
           disk_done ? "" : " (the disk tier's queue was not empty at --kv-flush-timeout-s)",
           remote_done ? "" : " (the remote tier's queue was not written at --kv-flush-timeout-s)");
}

bool Drainer::wait_for_disk(Clock::time_point deadline) {
  DiskStoreStats before = disk_->stats();
  while (Clock::now() < deadline) {
    {
      std::lock_guard lock(mu_);
      if (stop_) return false;  // the server is stopping: its graceful stop flushes
    }
    std::this_thread::sleep_for(kPoll);
    const DiskStoreStats now = disk_->stats();
    // Settled: nothing queued, and nothing written or dropped during the last poll.
    if (now.queued_blocks == 0 && now.n_written == before.n_written && now.n_dropped == before.n_dropped)
      return true;
    before = now;
  }
  return false;
}

}  // namespace akv
