// Background loads from the disk tier (architecture.md §4): when a waiting request's prefix
// continues on disk, the KV manager hands the blocks it needs to the restorer, whose threads
// read, verify and decode them into the job's block buffers while the engine keeps stepping the
// other sequences; the request is admitted once its own blocks are in
// (KvManager::restore_pending), and the match then only copies them to the device. (Host-tier
// blocks need no load: the match writes them to the device from their slots.)
// Several threads work on one job's blocks at once (default_threads(): from the cores; a thread
// reads a file in pieces and checksums each piece as it arrives, so from the page cache a load
// is one pass over memory, and several threads in flight approach a disk's bandwidth); jobs are
// served in arrival order.
// With a host tier, blocks are loaded into host-tier slots instead (page-locked on CUDA, so the
// match's batched write reads them in place, and the tier keeps them for later returns): each
// is published there and stays pinned by its job until the job is destroyed. When the device
// decodes (`device_decodes`: a GPU backend) and the disk's codec fits a host slot (int8 or int4
// files, a native host tier), the file's payload is read into the slot as it is, in the disk's
// codec, and decoded on the device by the match's write: no decode on the CPU, and half the
// bytes (int8) cross to the device. Published blocks are usable before the job is done: each
// quarter of it (`on_progress`) the engine writes the loaded leading blocks to the device.
// Memory is bounded across jobs (`max_bytes`): a job holds its loaded blocks (and its state
// block, if it wants one) until it is destroyed (after the match and the device's copies of
// them), and a job whose blocks and state together do not fit beside the others waits; alone,
// a job larger than the budget keeps its state and loads only its leading blocks that fit
// beside it (at least one; the rest is recomputed). Each block is loaded into a buffer of one
// block's size; a destroyed job's buffers are kept for the next jobs (no fresh pages, nothing
// to unmap on the engine thread), so buffers held by jobs and kept together stay within
// `max_bytes` too: a server keeps the most its restores ever held at once.
// A job may also carry a hybrid model's state block (RestoreJob::want_state): once its blocks
// are loaded, the restorer loads the deepest state block whose KV the sequence then has (the
// candidates the job's loaded blocks cover), from disk or Redis, verified; the job is done only
// after that, so the engine thread never reads a state block either.
// Thread-safe: submit from the engine thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "kv/block_codec.h"
#include "kv/block_key.h"
#include "kv/retention.h"

namespace akv {

class DiskStore;
class HostStore;
struct RestoreBudget;

// One sequence's blocks to load, in chain order. A block that is missing or bad ends the job
// there (the request recomputes from that block on); `n_loaded` leading blocks are verified and
// decoded.
class RestoreJob {
 public:
  struct Block {
    Hash128 key, parent, tokens_hash;
    std::int32_t depth = 0;  // index in its chain
  };
  // `retention`: of the blocks a host-tier load publishes.
  RestoreJob(std::vector<Block> blocks, std::size_t block_bytes,
             Retention retention = Retention::Normal);
  // Gives its block buffers back to the restorer (kept for the next jobs) and its bytes to the
  // budget (and unpins its host-tier blocks).
  ~RestoreJob();
  RestoreJob(const RestoreJob&) = delete;
  RestoreJob& operator=(const RestoreJob&) = delete;

  std::span<const Block> blocks() const { return blocks_; }
  // Finished (every block loaded, or stopped at a bad one, or cancelled).
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Leading blocks ready to copy; final once done().
  std::int32_t n_loaded() const { return n_loaded_.load(std::memory_order_acquire); }
  // Loaded blocks a step of progress (Restorer's on_progress, KvManager's early device restores):
  // a quarter of the job, 1 to 64.
  std::int32_t progress_step() const {
    return std::clamp(static_cast<std::int32_t>(blocks_.size()) / 4, 1, 64);
  }
  // Block i's raw bytes (i < n_loaded()); not with in_host().
  std::span<const std::byte> raw(std::int32_t i) const;
  // The loaded blocks are in the host tier (pinned there while the job lives), not in raw().
  // Set at submit: readable by the submitting thread before done().
  bool in_host() const { return host_ != nullptr; }
  // The request went away: the restorer stops taking its blocks.
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }

  // Hybrid models: a state block to load after the blocks (before submit). `candidates` in
  // chain order: state_key of the chain's block ending at `pos`, that block's key as parent.
  // The restorer tries them deepest first, only those at or below the KV the sequence has once
  // the blocks are loaded: `walk_end` when every block loaded, else the first missing block's
  // start. `tokens`: the prefix (at least up to the deepest candidate), for the prefix hash.
  // `n_floats`: the state's size.
  struct StateCandidate {
    Hash128 key, parent;
    std::int32_t pos = 0;
  };
  void want_state(std::vector<StateCandidate> candidates, std::vector<std::int32_t> tokens,
                  std::int32_t walk_end, std::int32_t block_size, std::int64_t n_floats);
  bool wants_state() const { return !state_candidates_.empty(); }
  // What the job's state counts in the restore budget: its decoded floats (0 without one).
  std::size_t state_bytes() const {
    return wants_state() ? static_cast<std::size_t>(state_floats_) * sizeof(float) : 0;
  }
  // Once done(): the position of the state block loaded (0: none), and its floats (taken).
  std::int32_t state_pos() const { return state_pos_; }
  std::vector<float> take_state() { return std::move(state_); }

 private:
  friend class Restorer;
  std::vector<Block> blocks_;
  std::size_t block_bytes_;
  Retention retention_;
  std::vector<std::unique_ptr<std::byte[]>> buffers_;  // limit_ of block_bytes_, from the restorer
  bool has_memory_ = false;             // buffers_ taken, or host-tier slots counted
  HostStore* host_ = nullptr;           // set at submit by a restorer that loads into the host tier
  std::vector<Hash128> host_pins_;      // under the restorer's mutex; unpinned at destruction
  std::shared_ptr<RestoreBudget> budget_;  // where buffers_ and the state are counted
  std::size_t held_bytes_ = 0;             // loaded blocks' bytes + state_bytes()
  // Under the restorer's mutex:
  std::int32_t next_ = 0;       // next block to hand to a thread
  std::int32_t limit_ = 0;      // blocks_.size(), or the first block that failed
  std::int32_t in_flight_ = 0;  // blocks being loaded
  std::vector<bool> loaded_;
  std::atomic<std::int32_t> n_loaded_{0};
  bool finishing_ = false;       // a thread is loading its state block before marking it done
  std::atomic<bool> done_{false}, cancelled_{false};
  // The state block (want_state): written by the finishing thread before done_.
  std::vector<StateCandidate> state_candidates_;
  std::vector<std::int32_t> state_tokens_;
  std::int32_t walk_end_ = 0, block_size_ = 0;
  std::int64_t state_floats_ = 0;
  std::vector<float> state_;
  std::int32_t state_pos_ = 0;
  std::chrono::steady_clock::time_point submitted_;  // for the restore-time histogram
};

// Bytes of loaded blocks and state blocks held by jobs, and the block buffers kept for the next
// jobs; shared with the jobs (which may outlive the restorer). used_bytes + kept buffers <=
// max_bytes, except for a job alone past the budget (its state and one block).
struct RestoreBudget {
  std::mutex mu;
  std::size_t max_bytes = 0, used_bytes = 0;
  std::size_t buffer_bytes = 0;  // of each kept buffer
  std::vector<std::unique_ptr<std::byte[]>> kept;
};

class Restorer {
 public:
  static constexpr std::size_t kDefaultMaxBytes = std::size_t{4} << 30;
  // Threads: three quarters of the cores, 2 to 16 (from cached files a load is bound by the
  // cores' copy and checksum rate; from a disk, reads in flight approach its bandwidth).
  static int default_threads();
  // `on_done` runs on a restorer thread after each job finishes (the engine wakes up).
  // `max_bytes`: loaded blocks and state blocks held across jobs at most (a job alone is always
  // allowed its state and one block).
  // `host`: load into the host tier's slots (null: into each job's block buffers).
  // `device_decodes`: host slots may keep the disk's codec (the device decodes them on restore).
  // `on_progress` (optional) runs on a restorer thread each time a job's loaded leading blocks
  // pass another RestoreJob::progress_step() before it is done (the engine wakes up and writes
  // them to the device ahead of the match: KvManager::restore_pending).
  Restorer(DiskStore* disk, std::function<void()> on_done,
           std::size_t max_bytes = kDefaultMaxBytes, int n_threads = default_threads(),
           HostStore* host = nullptr, bool device_decodes = false, std::function<void()> on_progress = {});
  // Cancels what is queued and joins the threads.
  ~Restorer();
  Restorer(const Restorer&) = delete;
  Restorer& operator=(const Restorer&) = delete;

  void submit(std::shared_ptr<RestoreJob> job);
  // Bytes held by jobs now, state blocks included (tests).
  std::size_t used_bytes() const;
  // Bytes of block buffers kept for the next jobs (tests).
  std::size_t kept_bytes() const;

 private:
  // Takes the next block of the oldest job with one left; false when stopping.
  bool claim(std::unique_lock<std::mutex>& lock, std::shared_ptr<RestoreJob>& job,
             std::int32_t& index);
  // Gives `job` its memory (its blocks' and its state's) if it fits the budget (truncating the
  // blocks of a job alone past it); false: wait.
  bool take_memory(RestoreJob& job);
  void loop();
  // Records block `index` of `job` (loaded or not); true when the caller is to finish the job.
  bool settle(RestoreJob& job, std::int32_t index, bool ok);
  // Loads block `index` of `job` into a host-tier slot (or finds it there), pinned; false when
  // it is missing or bad, or no slot can be had.
  bool load_into_host(const RestoreJob& job, std::int32_t index);
  // Whether `job` is to be finished now by the caller (caller holds mu_): nothing in flight or
  // left to hand out, and no thread finishing it. Marks it as being finished.
  bool take_finish(RestoreJob& job);
  // Without mu_: loads the job's state block (if it wants one), marks it done and observes its
  // time in the disk tier's restore-time histogram. The caller then drops its reference and runs
  // on_done.
  void finish(RestoreJob& job);
  void load_state(RestoreJob& job);

  DiskStore* disk_;
  HostStore* host_;
  SpillCodec host_load_codec_ = SpillCodec::Native;  // what a block is loaded into a host slot as
  std::function<void()> on_done_, on_progress_;
  std::shared_ptr<RestoreBudget> budget_;
  std::mutex mu_;  // before budget_->mu when both are held
  std::condition_variable wake_;
  std::deque<std::shared_ptr<RestoreJob>> queue_;  // jobs with blocks not yet handed out
  bool stop_ = false;
  std::vector<std::thread> threads_;  // last: start after everything above exists
};

}  // namespace akv
