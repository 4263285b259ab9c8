#include "kv/restorer.h"

#include <chrono>

#include "base/check.h"
#include "kv/disk_store.h"

namespace akv {

RestoreJob::RestoreJob(std::vector<Block> blocks, std::size_t block_bytes)
    : blocks_(std::move(blocks)), block_bytes_(block_bytes) {}

std::span<const std::byte> RestoreJob::raw(std::int32_t i) const {
  AKV_CHECK(i >= 0 && i < n_loaded(), "restore job block not loaded");
  return {bytes_.get() + static_cast<std::size_t>(i) * block_bytes_, block_bytes_};
}

Restorer::Restorer(DiskStore& disk, std::function<void()> on_done)
    : disk_(disk), on_done_(std::move(on_done)), thread_([this] { loop(); }) {}

Restorer::~Restorer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    for (const auto& job : queue_) job->cancel();
  }
  wake_.notify_all();
  thread_.join();
}

void Restorer::submit(std::shared_ptr<RestoreJob> job) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void Restorer::loop() {
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    std::shared_ptr<RestoreJob> job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    run(*job);
    if (on_done_) on_done_();
    lock.lock();
  }
}

void Restorer::run(RestoreJob& job) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto n = static_cast<std::int32_t>(job.blocks_.size());
  // Here, not on the engine thread: a long prefix is hundreds of megabytes of fresh pages.
  job.bytes_ = std::make_unique_for_overwrite<std::byte[]>(job.blocks_.size() * job.block_bytes_);
  for (std::int32_t i = 0; i < n && !job.cancelled_.load(std::memory_order_relaxed); ++i) {
    const RestoreJob::Block& b = job.blocks_[i];
    const std::span<std::byte> out{job.bytes_.get() + static_cast<std::size_t>(i) * job.block_bytes_,
                                   job.block_bytes_};
    if (!disk_.load(b.key, b.parent, b.tokens_hash, out)) break;
    job.n_loaded_.store(i + 1, std::memory_order_release);
  }
  job.seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  job.done_.store(true, std::memory_order_release);
}

}  // namespace akv
