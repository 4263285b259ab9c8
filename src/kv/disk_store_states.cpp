// DiskStore's state blocks (a hybrid model's recurrent state at a block boundary): queued for the
// IO thread like KV blocks, loaded from disk or the remote tier with their header's codec, and
// looked up in both tiers at once.
#include <unistd.h>

#include <optional>

#include "base/log.h"
#include "kv/disk_format.h"
#include "kv/disk_store.h"
#include "kv/disk_store_internal.h"
#include "kv/remote_store.h"
#include "kv/state_codec.h"

namespace akv {

using disk_store_detail::kMaxFromRemote;
using disk_store_detail::now_ms;
using disk_store_detail::read_file_checksummed;
using disk_store_detail::set_mtime;

bool DiskStore::put_state(const Hash128& key, const Hash128& parent, const Hash128& prefix_hash,
                          std::vector<std::byte> bytes, StateCodec codec) {
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    if (files_.contains(key) || pending_.contains(key)) return false;
    const bool paused = now_ms() < paused_until_ms_;
    if (paused || queued_bytes_ + bytes.size() > options_.max_queue_bytes) {
      if (!count_drop_locked(paused)) return false;
    } else {
      queue_.push_back(block_job_locked(key, parent, prefix_hash, bytes, {}, /*state=*/true));
      queue_.back()->state_codec = codec;
      queued = true;
    }
  }
  wake_.notify_one();
  return queued;
}

bool DiskStore::load_state(const Hash128& key, const Hash128& parent, const Hash128& prefix_hash,
                           std::span<float> out) {
  if (options_.before_load) options_.before_load(true);
  const bool local = on_disk(key);
  if (!local && options_.remote == nullptr) return false;
  std::vector<std::byte> bytes;
  bool ok = false;
  std::optional<std::uint64_t> sum;  // a file's payload checksum, computed as it was read
  if (local) {
    std::uint64_t read_sum = 0;
    ok = read_file_checksummed(block_path(key), kBlockHeaderBytes, bytes, read_sum);
    if (ok) sum = read_sum;
  } else {
    // Any codec's value, up to the largest (exact) one.
    if (options_.remote->state_value_bytes() != kBlockHeaderBytes + out.size_bytes()) return false;
    ok = options_.remote->get_state(key, bytes);
    if (!ok) return false;  // not there, or Redis unavailable: a miss
  }
  // The header names the codec, and so the payload's size.
  BlockHeader h;
  const FileCheck check = ok ? parse_block_header(bytes, options_.fingerprint, h) : FileCheck::Corrupt;
  if (check == FileCheck::UnknownCodec) {
    {
      std::lock_guard lock(mu_);
      ++stats_.rejected_version;
    }
    log_warn("KV {} tier: state block {} has state codec id {:#010x}, unknown to this build (a newer "
             "writer's?); not used, left in place, its tokens will be recomputed",
             local ? "disk" : "remote", local ? block_path(key) : key.hex(), h.codec_id);
    return false;
  }
  const BlockExpect want{.fingerprint = options_.fingerprint,
                         .key = key,
                         .parent = parent,
                         .tokens_hash = prefix_hash,
                         .codec = SpillCodec::Native,
                         .state_codec = h.state_codec,
                         .payload_bytes = encoded_state_bytes(h.state_codec, static_cast<std::int64_t>(out.size())),
                         .kind = BlockKind::State};
  const std::span<const std::byte> body = ok ? verified_block_payload(bytes, want, sum) : std::span<const std::byte>{};
  if (body.empty()) {
    if (!local) {
      {
        std::lock_guard lock(mu_);
        ++stats_.rejected_corrupt;
      }
      log_warn("KV remote tier: state block {} failed its check; not used, its tokens will be recomputed", key.hex());
      return false;
    }
    if (ok || ::access(block_path(key).c_str(), F_OK) == 0) drop_bad(key);
    return false;
  }
  decode_state(h.state_codec, body, out);
  const std::int64_t now = now_unix_ms();
  {
    std::lock_guard lock(mu_);
    ++stats_.n_loaded;
    if (!local) {
      ++stats_.n_loaded_remote;
      ++stats_.n_states_loaded_remote;
      if (from_remote_.size() >= kMaxFromRemote) from_remote_.clear();
      from_remote_.insert(key);
    }
    if (auto it = files_.find(key); it != files_.end()) it->second.last_use_ms = now;
  }
  if (local) set_mtime(blocks_fd_, key.hex() + ".kvb", now);
  return true;
}

std::vector<bool> DiskStore::find_states(std::span<const Hash128> keys) {
  std::vector<bool> found(keys.size(), false);
  std::vector<Hash128> ask;  // not on disk: the remote tier's
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    found[i] = on_disk(keys[i]);
    if (!found[i] && options_.remote != nullptr) {
      ask.push_back(keys[i]);
      where.push_back(i);
    }
  }
  if (ask.empty()) return found;
  const std::vector<bool> remote = options_.remote->has_states(ask);
  for (std::size_t j = 0; j < ask.size(); ++j) found[where[j]] = remote[j];
  return found;
}

}  // namespace akv
