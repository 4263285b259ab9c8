// DiskStore's encode workers: blocks in a codec that is not their raw form (int8, int4) are
// encoded here, ahead of the IO thread and in its order (the stop's queue, then the backlog), so
// the IO thread only writes. A worker owns a job while it encodes it (nothing drops, moves its
// bytes or writes it meanwhile); a lent block's bytes are released as soon as they are encoded.
// The encoded blocks the IO thread has not taken are bounded (kMaxEncodedAheadBytes); a block at
// the front of the queue that no worker took is encoded by the IO thread itself, so neither
// waits for the other in a circle.
#include <chrono>
#include <functional>
#include <utility>

#include "base/check.h"
#include "kv/disk_store.h"
#include "kv/disk_store_internal.h"

namespace akv {

using disk_store_detail::kMaxEncodedAheadBytes;

bool DiskStore::needs_encode(const Job& job) const {
  // A codec that keeps the raw form writes the raw bytes as they are.
  if (job.kind != Job::Kind::Block || job.state ||
      codec_is_raw(options_.codec, options_.shape.dtype))
    return false;
  // A lent block in the store's codec is written as it is; any other is in its raw form.
  return job.lent.bytes.empty() || job.lent.codec != options_.codec;
}

DiskStore::Job* DiskStore::next_to_encode_locked() {
  if (n_encode_waiting_ == 0) return nullptr;
  const std::size_t block = encoded_block_bytes();
  if (n_encoding_ > 0 && encoded_ahead_bytes_ + static_cast<std::size_t>(n_encoding_ + 1) * block >
                             kMaxEncodedAheadBytes)
    return nullptr;
  for (std::deque<std::unique_ptr<Job>>* q : {&first_, &queue_})
    for (std::unique_ptr<Job>& job : *q)
      if (job->encode == Job::Encode::Waiting) return job.get();
  return nullptr;
}

void DiskStore::taken_from_queue_locked(Job& job) {
  if (job.encode == Job::Encode::Waiting) --n_encode_waiting_;
  if (job.encode == Job::Encode::Done) {
    encoded_ahead_bytes_ -= job.encoded.size();
    encode_wake_.notify_one();  // room ahead
  }
}

void DiskStore::encode_loop() {
  using Clock = std::chrono::steady_clock;
  std::unique_lock lock(mu_);
  while (true) {
    Job* job = nullptr;
    encode_wake_.wait(lock,
                      [&] { return stop_encoders_ || (job = next_to_encode_locked()) != nullptr; });
    if (job == nullptr) return;
    job->encode = Job::Encode::Running;
    --n_encode_waiting_;
    ++n_encoding_;
    const bool lent = !job->lent.bytes.empty();
    if (lent) ++n_lent_encoding_;
    std::vector<std::byte> out;
    if (!spare_encoded_.empty()) {
      out = std::move(spare_encoded_.back());
      spare_encoded_.pop_back();
    }
    lock.unlock();
    const auto t0 = Clock::now();
    out.resize(encoded_block_bytes());
    encode_block(options_.codec, options_.shape,
                 lent ? job->lent.bytes : std::span<const std::byte>(job->raw), out);
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
    lock.lock();
    // A lent block becomes the store's own: its bytes are not read again, and it leaves the lent
    // count before its lender hears of it (as a written one does).
    std::function<void()> release;
    if (lent) {
      release = std::exchange(job->lent.release, nullptr);
      job->lent.bytes = {};
      --queued_lent_;
    }
    job->encoded = std::move(out);
    job->encode = Job::Encode::Done;  // the IO thread's from here: not touched again
    --n_encoding_;
    encoded_ahead_bytes_ += encoded_block_bytes();
    ++stats_.n_encoded;
    stats_.encode_us += us;
    wake_.notify_one();  // the IO thread may wait for this one
    if (lent) {
      lock.unlock();
      if (release) release();
      lock.lock();
      --n_lent_encoding_;
      encoded_.notify_all();
    }
  }
}

}  // namespace akv
