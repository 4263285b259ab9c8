// Background loads from the host and disk tiers (architecture.md §4): when a waiting request's
// prefix continues outside device memory, the KV manager hands the blocks it needs to the
// restorer, whose threads decode them from the host tier or read, verify and decode them from
// disk into memory of the job's own while the engine keeps stepping the other sequences; the
// request is admitted once its own blocks are in (KvManager::restore_pending), and the match
// then only copies them to the device.
// Several threads work on one job's blocks at once (each file is one read; keeping several in
// flight is what approaches the disk's bandwidth); jobs are served in arrival order.
// Thread-safe: submit from the engine thread.
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
class HostStore;

// One sequence's blocks to load, in chain order. A block that is missing or bad ends the job
// there (the request recomputes from that block on); `n_loaded` leading blocks are verified and
// decoded.
class RestoreJob {
 public:
  struct Block {
    Hash128 key, parent, tokens_hash;
    bool from_host = false;  // else from disk
  };
  RestoreJob(std::vector<Block> blocks, std::size_t block_bytes);

  std::span<const Block> blocks() const { return blocks_; }
  // Finished (every block loaded, or stopped at a bad one, or cancelled).
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Leading blocks ready to copy; final once done().
  std::int32_t n_loaded() const { return n_loaded_.load(std::memory_order_acquire); }
  // Block i's raw bytes (i < n_loaded()).
  std::span<const std::byte> raw(std::int32_t i) const;
  // The request went away: the restorer stops taking its blocks.
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }

 private:
  friend class Restorer;
  std::vector<Block> blocks_;
  std::size_t block_bytes_;
  std::unique_ptr<std::byte[]> bytes_;  // blocks_.size() * block_bytes_, allocated by the restorer
  // Under the restorer's mutex:
  std::int32_t next_ = 0;       // next block to hand to a thread
  std::int32_t limit_ = 0;      // blocks_.size(), or the first block that failed
  std::int32_t in_flight_ = 0;  // blocks being loaded
  std::vector<bool> loaded_;
  std::atomic<std::int32_t> n_loaded_{0};
  std::atomic<bool> done_{false}, cancelled_{false};
};

class Restorer {
 public:
  // `on_done` runs on a restorer thread after each job finishes (the engine wakes up). `host`
  // may be null (no host tier).
  Restorer(DiskStore* disk, HostStore* host, std::function<void()> on_done, int n_threads = 4);
  // Cancels what is queued and joins the threads.
  ~Restorer();
  Restorer(const Restorer&) = delete;
  Restorer& operator=(const Restorer&) = delete;

  void submit(std::shared_ptr<RestoreJob> job);

 private:
  // Takes the next block of the oldest job with one left; false when stopping.
  bool claim(std::unique_lock<std::mutex>& lock, std::shared_ptr<RestoreJob>& job,
             std::int32_t& index);
  void loop();
  // Records block `index` of `job` (loaded or not); true when that finished the job.
  bool settle(RestoreJob& job, std::int32_t index, bool ok);

  DiskStore* disk_;
  HostStore* host_;
  std::function<void()> on_done_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<RestoreJob>> queue_;  // jobs with blocks not yet handed out
  bool stop_ = false;
  std::vector<std::thread> threads_;  // last: start after everything above exists
};

}  // namespace akv
