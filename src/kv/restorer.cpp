#include "kv/restorer.h"

#include <algorithm>
#include <chrono>

#include "base/check.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"

namespace akv {

RestoreJob::RestoreJob(std::vector<Block> blocks, std::size_t block_bytes, Retention retention)
    : blocks_(std::move(blocks)),
      block_bytes_(block_bytes),
      retention_(retention),
      limit_(static_cast<std::int32_t>(blocks_.size())),
      loaded_(blocks_.size(), false) {}

RestoreJob::~RestoreJob() {
  for (const Hash128& key : host_pins_) host_->unpin(key);
  if (budget_ == nullptr) return;
  std::lock_guard lock(budget_->mu);
  budget_->used_bytes -= held_bytes_;
  if (block_bytes_ == budget_->buffer_bytes)  // kept for the next job (no fresh pages)
    for (std::unique_ptr<std::byte[]>& b : buffers_) budget_->kept.push_back(std::move(b));
}

void RestoreJob::want_state(std::vector<StateCandidate> candidates, std::vector<std::int32_t> tokens,
                            std::int32_t walk_end, std::int32_t block_size, std::int64_t n_floats) {
  state_candidates_ = std::move(candidates);
  state_tokens_ = std::move(tokens);
  walk_end_ = walk_end;
  block_size_ = block_size;
  state_floats_ = n_floats;
}

std::span<const std::byte> RestoreJob::raw(std::int32_t i) const {
  AKV_CHECK(i >= 0 && i < n_loaded() && static_cast<std::size_t>(i) < buffers_.size(), "restore job block not loaded");
  return {buffers_[static_cast<std::size_t>(i)].get(), block_bytes_};
}

int Restorer::default_threads() {
  const auto cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores * 3 / 4, 2, 16);
}

Restorer::Restorer(DiskStore* disk, std::function<void()> on_done, std::size_t max_bytes,
                   int n_threads, HostStore* host, bool device_decodes, std::function<void()> on_progress)
    : disk_(disk),
      host_(host),
      on_done_(std::move(on_done)),
      on_progress_(std::move(on_progress)),
      budget_(std::make_shared<RestoreBudget>()) {
  AKV_CHECK(disk_ != nullptr, "a restorer needs a disk tier to load from");
  if (host_ != nullptr)  // the file's payload as it is when the device decodes it: no CPU decode
    host_load_codec_ =
        device_decodes && host_->holds_codec(disk_->codec()) ? disk_->codec() : host_->codec();
  budget_->max_bytes = max_bytes;
  AKV_CHECK(n_threads >= 1, "a restorer needs a thread");
  for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this] { loop(); });
}

Restorer::~Restorer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void Restorer::submit(std::shared_ptr<RestoreJob> job) {
  if (job->blocks_.empty() && !job->wants_state()) {
    job->done_.store(true, std::memory_order_release);
    return;
  }
  job->submitted_ = std::chrono::steady_clock::now();
  job->host_ = host_;  // before any restorer thread sees it: the engine thread reads in_host()
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_all();
}

bool Restorer::claim(std::unique_lock<std::mutex>& lock, std::shared_ptr<RestoreJob>& job,
                     std::int32_t& index) {
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return false;
    std::shared_ptr<RestoreJob>& front = queue_.front();
    const bool cancelled = front->cancelled_.load(std::memory_order_relaxed);
    if (cancelled) front->limit_ = std::min(front->limit_, front->next_);
    // Here, not on the engine thread: a long prefix is hundreds of megabytes of fresh pages. A
    // job with a state block to load takes its memory even with no block to load.
    const bool needs_memory =
        !front->has_memory_ && (front->next_ < front->limit_ || (front->wants_state() && !cancelled));
    if (needs_memory && !take_memory(*front)) {
      // Memory comes back when a job is destroyed (on the engine thread): look again soon.
      wake_.wait_for(lock, std::chrono::milliseconds(5));
      continue;
    }
    if (front->next_ >=
        front->limit_) {  // nothing left to hand out: whoever loads its last block ends it
      std::shared_ptr<RestoreJob> drained = std::move(front);
      queue_.pop_front();
      if (take_finish(*drained)) {
        lock.unlock();
        finish(*drained);
        drained.reset();  // as in loop(): the owner's reference is the last when it hears
        if (on_done_) on_done_();
        lock.lock();
      }
      continue;
    }
    job = front;
    index = front->next_++;
    ++front->in_flight_;
    return true;
  }
}

bool Restorer::take_memory(RestoreJob& job) {
  std::lock_guard lock(budget_->mu);
  RestoreBudget& b = *budget_;
  const std::size_t state = job.state_bytes();
  std::size_t n = static_cast<std::size_t>(job.limit_);
  if (b.used_bytes + n * job.block_bytes_ + state > b.max_bytes) {
    if (b.used_bytes > 0) return false;  // wait for the jobs before it
    // Alone: its state, and its leading blocks that fit beside it (at least one).
    const std::size_t room = b.max_bytes > state ? b.max_bytes - state : 0;
    n = std::min(n, std::max<std::size_t>(1, room / job.block_bytes_));
    job.limit_ = static_cast<std::int32_t>(n);
  }
  job.held_bytes_ = n * job.block_bytes_ + state;
  b.used_bytes += job.held_bytes_;
  job.budget_ = budget_;
  job.has_memory_ = true;
  // Kept buffers beyond what the budget leaves beside the jobs' blocks and states go.
  const auto trim_kept = [&] {
    while (!b.kept.empty() && b.used_bytes + b.kept.size() * b.buffer_bytes > b.max_bytes) b.kept.pop_back();
  };
  if (host_ != nullptr) {  // the blocks go to host-tier slots: the budget bounds what they pin
    trim_kept();
    return true;
  }
  // Kept buffers first; new ones only past them, so kept + used stays within the budget.
  if (b.buffer_bytes != job.block_bytes_) {
    b.kept.clear();
    b.buffer_bytes = job.block_bytes_;
  }
  job.buffers_.reserve(n);
  while (job.buffers_.size() < n && !b.kept.empty()) {
    job.buffers_.push_back(std::move(b.kept.back()));
    b.kept.pop_back();
  }
  trim_kept();
  while (job.buffers_.size() < n) job.buffers_.push_back(std::make_unique_for_overwrite<std::byte[]>(job.block_bytes_));
  return true;
}

bool Restorer::load_into_host(const RestoreJob& job, std::int32_t index) {
  const RestoreJob::Block& b = job.blocks_[static_cast<std::size_t>(index)];
  const HostBlockMeta meta{.parent = b.parent, .tokens_hash = b.tokens_hash, .depth = b.depth,
                           .retention = job.retention_};
  const std::span<std::byte> slot = host_->reserve(b.key, meta, host_load_codec_);
  if (slot.empty()) {  // held already (demoted or loaded meanwhile), or no slot to be had
    if (!host_->touch(b.key, meta)) return false;
    return !host_->lend(b.key).empty();  // pinned for the job
  }
  if (!disk_->load_as(b.key, b.parent, b.tokens_hash, host_load_codec_, slot)) {
    host_->abandon(b.key);
    return false;
  }
  host_->publish(b.key);
  return !host_->lend(b.key).empty();  // pinned for the job (published: nothing erased it yet)
}

std::size_t Restorer::used_bytes() const {
  std::lock_guard lock(budget_->mu);
  return budget_->used_bytes;
}

std::size_t Restorer::kept_bytes() const {
  std::lock_guard lock(budget_->mu);
  return budget_->kept.size() * budget_->buffer_bytes;
}

bool Restorer::settle(RestoreJob& job, std::int32_t index, bool ok) {
  --job.in_flight_;
  if (ok) {
    job.loaded_[static_cast<std::size_t>(index)] = true;
    std::int32_t n = job.n_loaded_.load(std::memory_order_relaxed);
    while (n < job.limit_ && job.loaded_[static_cast<std::size_t>(n)]) ++n;
    job.n_loaded_.store(n, std::memory_order_release);
  } else {
    job.limit_ = std::min(job.limit_, index);  // the chain breaks here
  }
  return take_finish(job);
}

bool Restorer::take_finish(RestoreJob& job) {
  const bool finished = job.in_flight_ == 0 &&
                        (job.next_ >= job.limit_ || job.cancelled_.load(std::memory_order_relaxed));
  if (!finished || job.finishing_ || job.done()) return false;
  job.finishing_ = true;
  return true;
}

void Restorer::load_state(RestoreJob& job) {
  if (!job.wants_state() || job.cancelled_.load(std::memory_order_relaxed)) return;
  // The KV the sequence will have: every walked block, or up to the first one not loaded.
  const std::int32_t n_loaded = job.n_loaded();
  const std::int32_t covered = static_cast<std::size_t>(n_loaded) < job.blocks_.size()
                                   ? job.blocks_[static_cast<std::size_t>(n_loaded)].depth * job.block_size_
                                   : job.walk_end_;
  std::vector<const RestoreJob::StateCandidate*> usable;  // deepest first
  std::vector<Hash128> keys;
  for (auto it = job.state_candidates_.rbegin(); it != job.state_candidates_.rend(); ++it) {
    if (it->pos > covered) continue;
    usable.push_back(&*it);
    keys.push_back(it->key);
  }
  const std::vector<bool> stored = disk_->find_states(keys);  // one Redis round trip at most
  job.state_.resize(static_cast<std::size_t>(job.state_floats_));
  for (std::size_t i = 0; i < usable.size(); ++i) {
    if (!stored[i]) continue;
    const RestoreJob::StateCandidate& c = *usable[i];
    const Hash128 prefix = disk_->keyer().tokens_hash(std::span(job.state_tokens_).first(static_cast<std::size_t>(c.pos)));
    if (disk_->load_state(c.key, c.parent, prefix, job.state_)) {
      job.state_pos_ = c.pos;
      return;
    }
  }
  job.state_.clear();
}

void Restorer::finish(RestoreJob& job) {
  load_state(job);
  disk_->restore_time().observe(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - job.submitted_).count());
  job.done_.store(true, std::memory_order_release);
}

void Restorer::loop() {
  std::unique_lock lock(mu_);
  std::shared_ptr<RestoreJob> job;
  std::int32_t index = 0;
  while (claim(lock, job, index)) {
    lock.unlock();
    bool ok = false;
    if (host_ != nullptr) {
      ok = load_into_host(*job, index);
    } else {
      const RestoreJob::Block& b = job->blocks_[static_cast<std::size_t>(index)];
      const std::span<std::byte> out{job->buffers_[static_cast<std::size_t>(index)].get(), job->block_bytes_};
      ok = disk_->load(b.key, b.parent, b.tokens_hash, out);
    }
    lock.lock();
    if (ok && host_ != nullptr) job->host_pins_.push_back(job->blocks_[static_cast<std::size_t>(index)].key);
    const std::int32_t step = job->progress_step();
    const std::int32_t before = job->n_loaded() / step;
    const bool finished = settle(*job, index, ok);
    if (!finished && on_progress_ && job->n_loaded() / step > before) {
      lock.unlock();
      on_progress_();
      lock.lock();
    }
    if (finished) {
      // The finished job leaves the queue, and this thread lets go of it, before its owner hears
      // of it: the owner's reference is then the last, and dropping it returns the memory at once.
      std::erase(queue_, job);
      lock.unlock();
      finish(*job);
      job.reset();
      if (on_done_) on_done_();
      lock.lock();
    }
    job.reset();
  }
}

}  // namespace akv
