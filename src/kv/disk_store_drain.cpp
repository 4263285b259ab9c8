// DiskStore's graceful stop: the stop's own queue, written ahead of the write-behind backlog
// (each agent's chain blocks and manifest, most recently used agent first), the drain bounded by
// a deadline, and the lent blocks a lender takes back.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "base/check.h"
#include "kv/disk_store.h"
#include "kv/disk_store_internal.h"

namespace akv {

using disk_store_detail::now_ms;

std::int64_t DiskStore::write_first(std::span<const Hash128> keys) {
  std::lock_guard lock(mu_);
  std::unordered_set<Hash128, Hash128Hasher> wanted;
  for (const Hash128& k : keys)
    if (pending_.contains(k)) wanted.insert(k);
  if (wanted.empty()) return 0;
  // One pass takes the wanted block jobs out of the backlog, the others keep their order.
  std::unordered_map<Hash128, std::unique_ptr<Job>, Hash128Hasher> moved;
  std::size_t n_kept = 0;
  for (std::size_t i = 0; i < queue_.size(); ++i) {
    std::unique_ptr<Job>& job = queue_[i];
    if (job->kind == Job::Kind::Block && wanted.contains(job->key))
      moved.emplace(job->key, std::move(job));
    else if (n_kept++ != i)
      queue_[n_kept - 1] = std::move(job);
  }
  queue_.resize(n_kept);
  for (const Hash128& k : keys)
    if (auto it = moved.find(k); it != moved.end() && it->second != nullptr)
      first_.push_back(std::move(it->second));
  return static_cast<std::int64_t>(moved.size());
}

bool DiskStore::put_first_or_wait(const Hash128& key, const Hash128& parent,
                                  const Hash128& tokens_hash, std::vector<std::byte> raw,
                                  std::chrono::steady_clock::time_point deadline) {
  // The backlog holds at most max_queue_bytes and is written after the stop's queue: room
  // beside it comes as the stop's own blocks are written, never waiting for the backlog.
  return put_waiting(key, parent, tokens_hash, std::move(raw), deadline, 2 * options_.max_queue_bytes, first_);
}

void DiskStore::put_manifest_first(const AgentRecord& record) {
  {
    std::lock_guard lock(mu_);
    first_.push_back(manifest_job_locked(record));
  }
  wake_.notify_one();
}

void DiskStore::drop_blocks_locked(const std::function<bool(const Job&)>& which,
                                   std::vector<std::unique_ptr<Job>>& dropped) {
  for (std::deque<std::unique_ptr<Job>>* q : {&first_, &queue_}) {
    std::size_t n_kept = 0;
    for (std::size_t i = 0; i < q->size(); ++i) {
      std::unique_ptr<Job>& job = (*q)[i];
      // A block being encoded is its worker's until done; it is written after that.
      if (job->kind != Job::Kind::Block || job->encode == Job::Encode::Running || !which(*job)) {
        if (n_kept++ != i) (*q)[n_kept - 1] = std::move(job);
        continue;
      }
      pending_.erase(job->key);
      taken_from_queue_locked(*job);
      queued_bytes_ -= job->raw.size();
      --queued_blocks_;
      if (!job->lent.bytes.empty()) --queued_lent_;
      ++stats_.n_dropped;
      ++stats_.n_dropped_at_stop;
      keep_buffer_locked(job->raw);
      dropped.push_back(std::move(job));
    }
    q->resize(n_kept);
  }
}

void DiskStore::drop_lent() {
  std::vector<std::unique_ptr<Job>> dropped;  // destroyed unlocked (their release)
  {
    std::unique_lock lock(mu_);
    drop_blocks_locked([](const Job& job) { return !job.lent.bytes.empty(); }, dropped);
    // A lent block being encoded releases its bytes when done (it is then the store's own).
    encoded_.wait(lock, [&] { return n_lent_encoding_ == 0; });
    if (busy_) {  // the batch in flight may read lent bytes: wait for it
      const std::uint64_t n = n_work_done_;
      idle_.wait(lock, [&] { return n_work_done_ != n; });
    }
  }
  dropped.clear();
}

void DiskStore::flush() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return idle_locked(); });
}

DiskDrain DiskStore::drain(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  const DiskStoreStats before = stats_;
  DiskDrain d;
  d.in_time = idle_.wait_until(lock, deadline, [&] { return idle_locked(); });
  if (!d.in_time) {
    // Out of time: the blocks still queued are dropped; the batch being written finishes, and
    // the (small) manifests and deletions left are written, failed manifests retried at once.
    std::vector<std::unique_ptr<Job>> dropped;  // destroyed unlocked (a lent block's release)
    drop_blocks_locked([](const Job&) { return true; }, dropped);
    lock.unlock();
    dropped.clear();
    lock.lock();
    retry_now_ = true;
    wake_.notify_all();
    room_.notify_all();
    idle_.wait(lock, [&] { return idle_locked(); });
    retry_now_ = false;
  }
  d.n_written = stats_.n_written - before.n_written;
  d.n_dropped = stats_.n_dropped - before.n_dropped;
  d.n_manifests_lost = stats_.n_manifests_lost - before.n_manifests_lost;
  for (const auto& [name, m] : manifests_) {
    ++d.n_agents;
    if (m.written && std::all_of(m.chain.begin(), m.chain.end(),
                                 [&](const Hash128& k) { return files_.contains(k); }))
      ++d.n_agents_whole;
  }
  return d;
}

}  // namespace akv
