// Background loads from the disk tier (architecture.md §4): when a waiting request's prefix
// continues on disk, the KV manager hands the blocks it needs to the restorer, whose thread
// reads, verifies and decodes them into host memory while the engine keeps stepping the other
// sequences; the request is admitted once its own blocks are in (KvManager::restore_pending),
// and the match then only copies them to the device.
// Thread-safe: submit from the engine thread; one worker thread does the IO.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "kv/block_key.h"

namespace akv {

class DiskStore;

// One sequence's blocks to load, in chain order. The restorer fills `raw` front to back;
// `n_loaded` leading blocks are verified and decoded. A block that is missing or bad ends the
// job there (the request recomputes from that block on).
class RestoreJob {
 public:
  struct Block {
    Hash128 key, parent, tokens_hash;
  };
  RestoreJob(std::vector<Block> blocks, std::size_t block_bytes);

  std::span<const Block> blocks() const { return blocks_; }
  // Finished (every block loaded, or stopped at a bad one, or cancelled).
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Leading blocks ready to copy; final once done().
  std::int32_t n_loaded() const { return n_loaded_.load(std::memory_order_acquire); }
  // Block i's raw bytes (i < n_loaded()).
  std::span<const std::byte> raw(std::int32_t i) const;
  // The request went away: the restorer stops at the next block.
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  // Seconds the load took (valid once done()).
  double seconds() const { return seconds_; }

 private:
  friend class Restorer;
  std::vector<Block> blocks_;
  std::size_t block_bytes_;
  std::unique_ptr<std::byte[]> bytes_;  // blocks_.size() * block_bytes_, allocated by the restorer
  std::atomic<std::int32_t> n_loaded_{0};
  std::atomic<bool> done_{false}, cancelled_{false};
  double seconds_ = 0.0;
};

class Restorer {
 public:
  // `on_done` runs on the restorer thread after each job finishes (the engine wakes up).
  Restorer(DiskStore& disk, std::function<void()> on_done);
  // Cancels what is queued and joins the thread.
  ~Restorer();
  Restorer(const Restorer&) = delete;
  Restorer& operator=(const Restorer&) = delete;

  void submit(std::shared_ptr<RestoreJob> job);

 private:
  void loop();
  void run(RestoreJob& job);

  DiskStore& disk_;
  std::function<void()> on_done_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<RestoreJob>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace akv
