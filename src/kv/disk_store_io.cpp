// DiskStore's IO thread: takes the queue's work in order (a run of block jobs is written as one
// durable batch), writes manifests (retrying failed ones), deletions and garbage collection,
// and reports dropped spills at most once per drop_log_interval_ms.
#include <algorithm>
#include <cerrno>

#include "base/check.h"
#include "base/log.h"
#include "kv/disk_format.h"
#include "kv/disk_store.h"
#include "kv/disk_store_internal.h"
#include "kv/durable_batch.h"
#include "kv/remote_store.h"

namespace akv {

using disk_store_detail::errno_text;
using disk_store_detail::now_ms;
using disk_store_detail::set_mtime;

namespace {
// One batch: enough blocks to share the data syncs' latency and one directory fsync, little
// enough that a drain past its deadline waits for one batch only (64 MiB: 0.6 s at 100 MB/s).
constexpr std::size_t kMaxBatchBlocks = 256;
constexpr std::size_t kMaxBatchBytes = std::size_t{64} << 20;

using Clock = std::chrono::steady_clock;
Clock::time_point steady_at(std::int64_t ms) {
  return Clock::time_point(std::chrono::milliseconds(ms));
}
}  // namespace

bool DiskStore::came_from_remote(const Hash128& key) {
  std::lock_guard lock(mu_);
  return from_remote_.erase(key) > 0;
}

bool DiskStore::idle_locked() const {
  return first_.empty() && queue_.empty() && !busy_ && retries_.empty();
}

bool DiskStore::take_work_locked(std::vector<std::unique_ptr<Job>>& batch) {
  batch.clear();
  std::deque<std::unique_ptr<Job>>& queue = first_.empty() ? queue_ : first_;  // a stop's first
  if (!queue.empty()) {
    // A block is ready to write once encoded (or when it needs none, or the IO thread encodes:
    // no workers). One a worker encodes is waited for; one none took yet is encoded here, alone.
    const auto ready = [&](const Job& job) {
      using E = Job::Encode;
      return job.kind != Job::Kind::Block || job.encode == E::None || job.encode == E::Done ||
             (job.encode == E::Waiting && encoders_.empty());
    };
    const Job& front = *queue.front();
    if (front.kind == Job::Kind::Block && front.encode == Job::Encode::Running) return false;
    const bool encode_here = !ready(front);
    std::size_t bytes = 0;
    do {
      bytes += queue.front()->raw.size();
      taken_from_queue_locked(*queue.front());
      batch.push_back(std::move(queue.front()));
      queue.pop_front();
    } while (!encode_here && batch.front()->kind == Job::Kind::Block && !queue.empty() &&
             queue.front()->kind == Job::Kind::Block && ready(*queue.front()) &&
             batch.size() < kMaxBatchBlocks && bytes + queue.front()->raw.size() <= kMaxBatchBytes);
    return true;
  }
  const std::int64_t now = now_ms();
  for (auto it = retries_.begin(); it != retries_.end(); ++it) {
    if (it->second.due_ms > now && !stop_ && !retry_now_) continue;
    auto job = std::make_unique<Job>();
    job->kind = Job::Kind::Manifest;
    job->record = std::move(it->second.record);
    job->n_attempts = it->second.n_attempts;
    retries_.erase(it);
    ++stats_.n_manifest_retries;
    batch.push_back(std::move(job));
    return true;
  }
  return false;
}

void DiskStore::io_loop() {
  const bool gc_on = options_.orphan_age_s > 0 && options_.gc_interval_s > 0;
  const auto gc_every = std::chrono::seconds(std::max<std::int64_t>(options_.gc_interval_s, 1));
  Clock::time_point next_gc = Clock::now() + gc_every;
  std::vector<std::unique_ptr<Job>> batch;
  std::unique_lock lock(mu_);
  while (true) {
    if (!take_work_locked(batch)) {
      // Queue empty (retries are taken at once while stopping), not a block being encoded.
      if (stop_ && first_.empty() && queue_.empty()) break;
      // Sleep until new work, the next collection, a retry or the next drop report is due.
      Clock::time_point until = gc_on ? next_gc : Clock::now() + std::chrono::hours(1);
      for (const auto& [name, r] : retries_) until = std::min(until, steady_at(r.due_ms));
      if (stats_.n_dropped > logged_dropped_)
        until = std::min(until, steady_at(last_drop_log_ms_ + options_.drop_log_interval_ms));
      wake_.wait_until(lock, until);
      if (!gc_on || Clock::now() < next_gc) {
        lock.unlock();
        log_drops();
        lock.lock();
        continue;
      }
      next_gc = Clock::now() + gc_every;
      batch.push_back(std::make_unique<Job>());
      batch.back()->kind = Job::Kind::CollectGarbage;
    }
    busy_ = true;
    lock.unlock();
    if (batch.front()->kind == Job::Kind::Block)
      write_blocks(batch);
    else
      run(*batch.front());
    batch.clear();
    log_drops();
    lock.lock();
    busy_ = false;
    ++n_work_done_;
    idle_.notify_all();  // flush and drain wait for idle, drop_lent for this batch
  }
  idle_.notify_all();
}

void DiskStore::run(Job& job) {
  switch (job.kind) {
    case Job::Kind::Block:
      AKV_CHECK(false, "block jobs are written in batches");
      return;
    case Job::Kind::Manifest:
      write_manifest(job);
      return;
    case Job::Kind::Erase: {
      if (!job.record.agent.empty())
        ::unlinkat(agents_fd_, manifest_name(job.record.tenant, job.record.agent).c_str(), 0);
      for (const Hash128& k : job.blocks) {
        bool still_stored = false;
        {
          std::lock_guard lock(mu_);
          still_stored = files_.contains(k) || pending_.contains(k);  // rewritten since
        }
        if (!still_stored) ::unlinkat(blocks_fd_, (k.hex() + ".kvb").c_str(), 0);
      }
      ::fsync(agents_fd_);
      ::fsync(blocks_fd_);
      if (job.remote_too && options_.remote != nullptr)
        options_.remote->erase(job.record.agent.empty() ? Hash128{}
                                                        : keyer_->agent_hash(job.record.tenant, job.record.agent),
                               job.blocks);
      return;
    }
    case Job::Kind::CollectGarbage:
      collect_orphans();
      return;
  }
}

void DiskStore::write_blocks(std::vector<std::unique_ptr<Job>>& batch) {
  if (options_.before_write) options_.before_write();
  const std::size_t payload_bytes = encoded_bytes(options_.codec, options_.shape);
  // A state block's file holds its bytes as they are.
  const auto file_bytes_of = [&](const Job& job) {
    return kBlockHeaderBytes + (job.state ? job.raw.size() : payload_bytes);
  };
  std::size_t batch_bytes = 0;
  for (const auto& job : batch) batch_bytes += file_bytes_of(*job);
  bool paused = false;
  {
    std::lock_guard lock(mu_);
    paused = now_ms() < paused_until_ms_;
  }
  // Room for the whole batch at once; when the blocks that must stay leave too little, block
  // by block until one does not fit (it pauses spilling like a write error).
  const bool batch_fits =
      !paused && make_room(static_cast<std::int64_t>(batch_bytes));
  DurableBatch files(blocks_fd_, tmp_serial_);
  std::vector<std::size_t> added;  // batch index of each file in `files`
  int error = 0;
  std::size_t n_tried = 0;
  bool over_budget = false;
  std::size_t added_bytes = 0;  // of the files in `files`
  for (; n_tried < batch.size() && !paused; ++n_tried) {
    const Job& job = *batch[n_tried];
    if (!batch_fits && !make_room(static_cast<std::int64_t>(added_bytes + file_bytes_of(job)))) {
      on_over_budget();  // counts this block; the rest of the batch finds spilling paused
      over_budget = true;
      break;
    }
    // Encoded by a worker; native: the raw bytes as they are; a lent block in the store's codec:
    // its bytes as they are; else encoded here (no workers, or they were behind).
    const bool lent = !job.lent.bytes.empty();
    std::span<const std::byte> payload =
        lent ? job.lent.bytes : std::span<const std::byte>(job.raw);
    if (job.encode == Job::Encode::Done) {
      payload = job.encoded;
    } else if (needs_encode(job)) {
      const auto t0 = std::chrono::steady_clock::now();
      payload_.resize(payload_bytes);
      encode_block(options_.codec, options_.shape, payload, payload_);  // from the raw form
      payload = payload_;
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
      std::lock_guard lock(mu_);
      ++stats_.n_encoded;
      ++stats_.n_encoded_on_io;
      stats_.encode_us += us;
    }
    const BlockHeader h{.kind = job.state ? BlockKind::State : BlockKind::Kv,
                        .fingerprint = options_.fingerprint,
                        .key = job.key,
                        .parent = job.parent,
                        .tokens_hash = job.tokens_hash,
                        .codec = options_.codec,
                        .state_codec = job.state_codec,
                        .n_tokens = static_cast<std::uint32_t>(options_.block_size),
                        .payload_bytes = payload.size(),
                        .payload_checksum = payload_checksum(payload)};
    const auto header = encode_block_header(h);
    if (options_.remote != nullptr && !came_from_remote(job.key)) {
      if (job.state)
        options_.remote->put_state(job.key, header, payload);
      else
        options_.remote->put_block(job.key, header, payload);
    }
    if (files.add(job.key.hex() + ".kvb", header, payload)) {
      added.push_back(n_tried);
      added_bytes += file_bytes_of(job);
    } else if (error == 0) {
      error = errno;
    }
  }
  int commit_error = 0;
  const std::vector<bool> ok = files.commit(commit_error);
  if (error == 0) error = commit_error;
  std::vector<bool> written(batch.size(), false);
  const std::int64_t now = now_unix_ms();
  for (std::size_t i = 0; i < ok.size(); ++i) {
    if (!ok[i]) continue;
    written[added[i]] = true;
    // The file's mtime is its write time already; an injected clock (tests) sets its own.
    if (options_.now_unix_ms) set_mtime(blocks_fd_, batch[added[i]]->key.hex() + ".kvb", now);
  }
  if (error != 0) {
    errno = error;
    on_write_error("block: " + errno_text());
  }
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Job& job = *batch[i];
      pending_.erase(job.key);
      queued_bytes_ -= job.raw.size();
      --queued_blocks_;
      if (!job.lent.bytes.empty()) --queued_lent_;
      keep_buffer_locked(job.raw);
      if (!job.encoded.empty() && spare_encoded_.size() < disk_store_detail::kMaxSpareBuffers)
        spare_encoded_.push_back(std::move(job.encoded));
      if (written[i]) {
        const BlockFile f{.bytes = static_cast<std::int64_t>(file_bytes_of(job)),
                          .last_use_ms = now,
                          .parent = job.parent,
                          .state = job.state};
        if (files_.emplace(job.key, f).second) {
          ++stats_.n_blocks;
          if (job.state) ++stats_.n_states;
          stats_.bytes += f.bytes;
        }
        ++stats_.n_written;
      } else {
        ++stats_.n_dropped;
        const bool the_over_budget_one = over_budget && i == n_tried;
        if (i >= n_tried && !the_over_budget_one) ++stats_.n_dropped_paused;
      }
    }
    ++stats_.n_batches;
  }
  room_.notify_all();
  if (options_.on_block_written)
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (written[i]) options_.on_block_written(batch[i]->key);
}

void DiskStore::write_manifest(Job& job) {
  const std::string name = manifest_name(job.record.tenant, job.record.agent);
  const std::vector<std::byte> bytes = encode_manifest(options_.fingerprint, job.record);
  const int fault = options_.manifest_write_fault ? options_.manifest_write_fault() : 0;
  if (fault != 0) errno = fault;
  const bool ok = fault == 0 && write_durably(agents_fd_, name, bytes, {}, tmp_serial_);
  const std::string what = ok ? "" : errno_text();
  const std::int32_t n_attempts = job.n_attempts + 1;
  bool lost = false;
  {
    std::lock_guard lock(mu_);
    if (ok) {
      retries_.erase(name);  // an older record's retry: this one is newer
      if (auto it = manifests_.find(name); it != manifests_.end()) it->second.written = true;
    } else if (manifests_.contains(name)) {  // not erased meanwhile
      if (n_attempts < options_.max_manifest_attempts) {
        const std::int64_t delay_ms = std::int64_t{options_.manifest_retry_ms}
                                      << std::min(n_attempts - 1, 20);
        retries_[name] = {.record = std::move(job.record),
                          .n_attempts = n_attempts,
                          .due_ms = now_ms() + delay_ms};
      } else {
        ++stats_.n_manifests_lost;
        manifests_[name].written = false;
        lost = true;
      }
    }
  }
  if (options_.remote != nullptr)
    options_.remote->put_manifest(keyer_->agent_hash(job.record.tenant, job.record.agent), bytes,
                                  job.record.last_use_ms);
  if (!ok) on_write_error("agent manifest: " + what);
  if (lost)
    log_warn(
        "KV disk tier {}: an agent's manifest could not be written in {} attempts ({}); that "
        "agent will not be known after a restart",
        options_.dir, n_attempts, what);
}

void DiskStore::log_drops() {
  DiskStoreStats s;
  std::int64_t n_new = 0;
  {
    std::lock_guard lock(mu_);
    if (stats_.n_dropped == logged_dropped_) return;
    const std::int64_t now = now_ms();
    if (last_drop_log_ms_ != 0 && now - last_drop_log_ms_ < options_.drop_log_interval_ms) return;
    n_new = stats_.n_dropped - logged_dropped_;
    logged_dropped_ = stats_.n_dropped;
    last_drop_log_ms_ = now;
    s = stats_;
    s.queued_blocks = queued_blocks_;
    s.queued_bytes = static_cast<std::int64_t>(queued_bytes_);
  }
  log_warn(
      "KV disk tier {}: {} blocks not written since the last report ({} in all: {} queue full, {} "
      "paused after an error, {} over the budget, {} at stop); {} blocks ({} MiB) queued",
      options_.dir, n_new, s.n_dropped, s.n_dropped_queue_full, s.n_dropped_paused,
      s.n_over_budget, s.n_dropped_at_stop, s.queued_blocks, s.queued_bytes >> 20);
}

void DiskStore::on_write_error(const std::string& what) {
  bool first = false;
  {
    std::lock_guard lock(mu_);
    ++stats_.n_write_errors;
    first = now_ms() >= paused_until_ms_;
    paused_until_ms_ = now_ms() + options_.pause_after_error_ms;
  }
  if (first)
    log_warn("KV disk tier {}: write failed ({}); spilling paused for {} ms, serving continues",
             options_.dir, what, options_.pause_after_error_ms);
}

}  // namespace akv
