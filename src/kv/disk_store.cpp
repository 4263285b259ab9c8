#include "kv/disk_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>

#include "base/check.h"
#include "base/error.h"
#include "base/log.h"
#include "kv/disk_format.h"
#include "kv/disk_store_internal.h"
#include "kv/durable_batch.h"
#include "kv/remote_store.h"
#include "kv/store_dir.h"

namespace akv {

using disk_store_detail::errno_text;
using disk_store_detail::kMaxFromRemote;
using disk_store_detail::kMaxSpareBuffers;
using disk_store_detail::now_ms;
using disk_store_detail::read_file_checksummed;
using disk_store_detail::read_split_file;
using disk_store_detail::set_mtime;

namespace {

std::int64_t system_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The whole file, or empty with ok=false.
// Reads the whole file into `out` (resized to it; its capacity is reused). False on any error.
bool read_file_into(const std::string& path, std::vector<std::byte>& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = false;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size >= 0) {
    out.resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ok = done == out.size();
  }
  ::close(fd);
  return ok;
}

std::vector<std::byte> read_all(const std::string& path, bool& ok) {
  std::vector<std::byte> out;
  ok = read_file_into(path, out);
  return out;
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

int open_dir_fd(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(ErrorKind::Io, "cannot open KV directory " + path + ": " + errno_text());
  return fd;
}

// What a manifest names for retention: its chain's blocks and its state blocks.
std::vector<Hash128> named_keys(const AgentRecord& r) {
  std::vector<Hash128> keys = r.chain;
  keys.insert(keys.end(), r.states.begin(), r.states.end());
  return keys;
}

}  // namespace

std::unique_ptr<DiskStore> DiskStore::open_or_throw(DiskStoreOptions options) {
  std::unique_ptr<DiskStore> store(new DiskStore(std::move(options)));
  return store;
}

DiskStore::DiskStore(DiskStoreOptions options) : options_(std::move(options)) {
  AKV_CHECK(options_.block_size > 0 && options_.shape.raw_bytes() > 0,
            "disk store needs a block shape");
  AKV_CHECK(options_.low_water > 0 && options_.low_water <= 1, "disk store low_water in (0, 1]");
  open_dir();
  scan_blocks();
  scan_manifests();
  collect_orphans();
  make_room(0);  // max_bytes may be lower than last time
  log_info(
      "KV disk tier {}: {} blocks ({} MiB of {}, codec {}), {} agents; not used: {} of another "
      "model or layout, {} of another format version, {} damaged (removed); deleted: {} unused "
      "blocks no agent names, {} over the budget",
      options_.dir, stats_.n_blocks, stats_.bytes >> 20,
      options_.max_bytes > 0 ? std::to_string(options_.max_bytes >> 20) + " MiB" : "unlimited",
      spill_codec_name(options_.codec), stats_.n_manifests, stats_.rejected_foreign,
      stats_.rejected_version, stats_.rejected_corrupt, stats_.n_gc, stats_.n_evicted);
  int n_encoders = options_.encode_threads;
  if (n_encoders < 0)
    n_encoders = codec_is_raw(options_.codec, options_.shape.dtype)
                     ? 0
                     : std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4);
  stats_.encode_threads = n_encoders;
  for (int i = 0; i < n_encoders; ++i) encoders_.emplace_back([this] { encode_loop(); });
  io_ = std::thread([this] { io_loop(); });
}

DiskStore::~DiskStore() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (io_.joinable()) io_.join();  // writes what is queued (the encoders still help)
  {
    std::lock_guard lock(mu_);
    stop_encoders_ = true;
  }
  encode_wake_.notify_all();
  for (std::thread& t : encoders_) t.join();
  for (int fd : {blocks_fd_, agents_fd_, lock_fd_})
    if (fd >= 0) ::close(fd);
}

void DiskStore::open_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* sub : {"", "/blocks", "/agents"}) {
    fs::create_directories(options_.dir + sub, ec);
    if (ec)
      throw Error(ErrorKind::Io,
                  "cannot create KV directory " + options_.dir + sub + ": " + ec.message());
  }
  const std::string lock_path = options_.dir + "/lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) throw Error(ErrorKind::Io, "cannot open " + lock_path + ": " + errno_text());
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    throw Error(ErrorKind::Io, "KV directory " + options_.dir + " is in use by another process");
  // The key secret: created once, kept with the blocks it names; a damaged one never destroys
  // them (store_dir.h). Before the folders are opened: it may move them aside.
  try {
    KeySecret secret{};
    if (options_.remote != nullptr) {
      secret = options_.remote->secret();
      adopt_store_secret(options_.dir, secret);
    } else {
      secret = load_or_create_store_secret(options_.dir);
    }
    keyer_ = std::make_unique<BlockKeyer>(secret, options_.fingerprint);
    blocks_fd_ = open_dir_fd(options_.dir + "/blocks");
    agents_fd_ = open_dir_fd(options_.dir + "/agents");
  } catch (const Error&) {
    // No destructor runs for a constructor that throws: let go of the lock here.
    for (int* fd : {&blocks_fd_, &agents_fd_, &lock_fd_})
      if (*fd >= 0) ::close(std::exchange(*fd, -1));
    throw;
  }
}

void DiskStore::scan_blocks() {
  const std::string folder = options_.dir + "/blocks/";
  DIR* d = ::opendir(folder.c_str());
  if (d == nullptr) throw Error(ErrorKind::Io, "cannot list " + folder + ": " + errno_text());
  const std::size_t payload = encoded_bytes(options_.codec, options_.shape);
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (name.find(".tmp") != std::string::npos) {  // a write that never reached its rename
      ::unlinkat(blocks_fd_, name.c_str(), 0);
      continue;
    }
    const std::optional<Hash128> key =
        ends_with(name, ".kvb") ? Hash128::from_hex(name.substr(0, 32)) : std::nullopt;
    if (!key || name.size() != 36) continue;  // not ours
    std::array<std::byte, kBlockHeaderBytes> head{};
    struct stat st {};
    const int fd = ::openat(blocks_fd_, name.c_str(), O_RDONLY | O_CLOEXEC);
    bool readable = fd >= 0 && ::fstat(fd, &st) == 0 &&
                    ::pread(fd, head.data(), head.size(), 0) == static_cast<ssize_t>(head.size());
    if (fd >= 0) ::close(fd);
    BlockHeader h;
    FileCheck check =
        readable ? parse_block_header(head, options_.fingerprint, h) : FileCheck::Corrupt;
    // A state block's size is the model's state (the fingerprint covers its config); a load
    // checks it against the size wanted.
    const bool state = h.kind == BlockKind::State;
    const std::uint64_t want_payload = state ? h.payload_bytes : payload;
    if (check == FileCheck::Ok &&
        (h.key != *key || (!state && h.codec != options_.codec) ||
         h.n_tokens != static_cast<std::uint32_t>(options_.block_size) ||
         h.payload_bytes != want_payload ||
         static_cast<std::uint64_t>(st.st_size) != kBlockHeaderBytes + want_payload))
      check = FileCheck::Corrupt;
    switch (check) {
      case FileCheck::Ok:
        files_[*key] = {
            .bytes = st.st_size,
            .last_use_ms = std::int64_t{st.st_mtim.tv_sec} * 1000 + st.st_mtim.tv_nsec / 1000000,
            .parent = h.parent,
            .state = state};
        ++stats_.n_blocks;
        if (state) ++stats_.n_states;
        stats_.bytes += st.st_size;
        break;
      default:
        reject(check, blocks_fd_, name);
        break;
    }
  }
  ::closedir(d);
}

void DiskStore::reject(FileCheck check, int dir_fd, const std::string& name) {
  switch (check) {
    case FileCheck::Ok:
      return;
    case FileCheck::ForeignModel:
      ++stats_.rejected_foreign;
      return;
    case FileCheck::BadVersion:
      ++stats_.rejected_version;
      return;
    case FileCheck::UnknownCodec:  // a newer writer's state block: not ours to delete
      ++stats_.rejected_version;
      log_warn("KV disk tier: {}/{} is a state block of a state codec unknown to this build (a newer "
               "writer's?); not used, left in place", options_.dir + "/blocks", name);
      return;
    case FileCheck::Corrupt:
      ++stats_.rejected_corrupt;
      ::unlinkat(dir_fd, name.c_str(), 0);  // damaged: never used, so removed
      return;
  }
}

void DiskStore::scan_manifests() {
  const std::string folder = options_.dir + "/agents/";
  DIR* d = ::opendir(folder.c_str());
  if (d == nullptr) throw Error(ErrorKind::Io, "cannot list " + folder + ": " + errno_text());
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (name.find(".tmp") != std::string::npos) {
      ::unlinkat(agents_fd_, name.c_str(), 0);
      continue;
    }
    if (!ends_with(name, ".agent")) continue;
    bool ok = false;
    const std::vector<std::byte> bytes = read_all(folder + name, ok);
    AgentRecord r;
    FileCheck check = ok ? parse_manifest(bytes, options_.fingerprint, r) : FileCheck::Corrupt;
    // Whole and checksummed but named under another key secret: not ours to delete.
    if (check == FileCheck::Ok && name != manifest_name(r.tenant, r.agent))
      check = FileCheck::ForeignModel;
    switch (check) {
      case FileCheck::Ok:
        manifests_[name] = {.chain = named_keys(r), .pinned = r.pinned, .written = true};
        loaded_.push_back(std::move(r));
        ++stats_.n_manifests;
        break;
      default:
        reject(check, agents_fd_, name);
        break;
    }
  }
  ::closedir(d);
}

std::vector<AgentRecord> DiskStore::take_loaded_manifests() {
  std::lock_guard lock(mu_);
  return std::move(loaded_);
}

std::string DiskStore::block_path(const Hash128& key) const {
  return options_.dir + "/blocks/" + key.hex() + ".kvb";
}

std::string DiskStore::manifest_name(const std::string& tenant, const std::string& agent) const {
  return keyer_->agent_hash(tenant, agent).hex() + ".agent";
}

bool DiskStore::has(const Hash128& key) const {
  std::lock_guard lock(mu_);
  return files_.contains(key) || pending_.contains(key);
}

bool DiskStore::on_disk(const Hash128& key) const {
  std::lock_guard lock(mu_);
  return files_.contains(key);
}

bool DiskStore::may_load(const Hash128& key) const {
  return options_.remote != nullptr || on_disk(key);
}

std::vector<std::byte> DiskStore::take_raw_buffer() {
  {
    std::lock_guard lock(mu_);
    if (!spare_raw_.empty()) {
      std::vector<std::byte> raw = std::move(spare_raw_.back());
      spare_raw_.pop_back();
      return raw;
    }
  }
  return std::vector<std::byte>(options_.shape.raw_bytes());
}

void DiskStore::keep_buffer_locked(std::vector<std::byte>& raw) {
  if (raw.size() == options_.shape.raw_bytes() && spare_raw_.size() < kMaxSpareBuffers)
    spare_raw_.push_back(std::move(raw));
}

std::unique_ptr<DiskStore::Job> DiskStore::block_job_locked(const Hash128& key,
                                                            const Hash128& parent,
                                                            const Hash128& tokens_hash,
                                                            std::vector<std::byte>& raw,
                                                            LentBlock lent, bool state) {
  auto job = std::make_unique<Job>();
  job->kind = Job::Kind::Block;
  job->key = key;
  job->parent = parent;
  job->tokens_hash = tokens_hash;
  job->state = state;
  queued_bytes_ += raw.size();
  ++queued_blocks_;
  if (!lent.bytes.empty()) ++queued_lent_;
  job->raw = std::move(raw);
  job->lent = std::move(lent);
  pending_.insert(key);
  if (needs_encode(*job)) {
    job->encode = Job::Encode::Waiting;
    ++n_encode_waiting_;
    encode_wake_.notify_one();
  }
  return job;
}

bool DiskStore::count_drop_locked(bool paused) {
  ++stats_.n_dropped;
  ++(paused ? stats_.n_dropped_paused : stats_.n_dropped_queue_full);
  // The first drop since the last report wakes the IO thread (it may be idle, paused).
  return stats_.n_dropped == logged_dropped_ + 1;
}

bool DiskStore::put(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                    std::vector<std::byte> raw) {
  AKV_CHECK(raw.size() == options_.shape.raw_bytes(), "put: raw block size");
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    if (files_.contains(key) || pending_.contains(key)) {
      keep_buffer_locked(raw);
      return false;
    }
    const bool paused = now_ms() < paused_until_ms_;
    if (paused || queued_bytes_ + raw.size() > options_.max_queue_bytes) {
      keep_buffer_locked(raw);
      if (!count_drop_locked(paused)) return false;
    } else {
      queue_.push_back(block_job_locked(key, parent, tokens_hash, raw));
      queued = true;
    }
  }
  wake_.notify_one();
  return queued;
}

bool DiskStore::put_lent(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                         LentBlock block) {
  AKV_CHECK(block.codec == options_.codec || codec_is_raw(block.codec, options_.shape.dtype),
            "put_lent: a block in another lossy codec");
  AKV_CHECK(block.bytes.size() == encoded_bytes(block.codec, options_.shape),
            "put_lent: encoded block size");
  bool queued = false, wake = true;
  {
    std::lock_guard lock(mu_);
    if (files_.contains(key) || pending_.contains(key)) {
      wake = false;
    } else if (const bool paused = now_ms() < paused_until_ms_;
               paused || queued_lent_ >= options_.max_lent_blocks) {
      wake = count_drop_locked(paused);
    } else {
      std::vector<std::byte> none;
      queue_.push_back(block_job_locked(key, parent, tokens_hash, none, std::move(block)));
      queued = true;
    }
  }
  if (!queued && block.release) block.release();  // outside the lock (LentBlock)
  if (wake) wake_.notify_one();
  return queued;
}

void DiskStore::limit_lent_blocks(std::size_t n) {
  std::lock_guard lock(mu_);
  options_.max_lent_blocks = std::min(options_.max_lent_blocks, n);
}

std::size_t DiskStore::n_lent_room() const {
  std::lock_guard lock(mu_);
  if (now_ms() < paused_until_ms_) return 0;
  return options_.max_lent_blocks - std::min(options_.max_lent_blocks, queued_lent_);
}

bool DiskStore::put_or_wait(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                            std::vector<std::byte> raw,
                            std::chrono::steady_clock::time_point deadline) {
  return put_waiting(key, parent, tokens_hash, std::move(raw), deadline, options_.max_queue_bytes, queue_);
}

bool DiskStore::put_waiting(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                            std::vector<std::byte> raw, std::chrono::steady_clock::time_point deadline,
                            std::size_t limit, std::deque<std::unique_ptr<Job>>& into) {
  AKV_CHECK(raw.size() == options_.shape.raw_bytes(), "disk tier: raw block size");
  {
    std::unique_lock lock(mu_);
    const auto settled = [&] {
      return files_.contains(key) || pending_.contains(key) || now_ms() < paused_until_ms_ ||
             queued_bytes_ + raw.size() <= limit;
    };
    const bool room = room_.wait_until(lock, deadline, settled);
    if (files_.contains(key) || pending_.contains(key)) {
      keep_buffer_locked(raw);
      return false;
    }
    const bool paused = now_ms() < paused_until_ms_;
    if (!room || paused) {
      ++stats_.n_dropped;
      ++(paused ? stats_.n_dropped_paused : stats_.n_dropped_queue_full);
      keep_buffer_locked(raw);
      return false;
    }
    into.push_back(block_job_locked(key, parent, tokens_hash, raw));
  }
  wake_.notify_one();
  return true;
}

std::size_t DiskStore::n_queue_room() const {
  std::lock_guard lock(mu_);
  if (now_ms() < paused_until_ms_ || queued_bytes_ >= options_.max_queue_bytes) return 0;
  return (options_.max_queue_bytes - queued_bytes_) / options_.shape.raw_bytes();
}

std::unique_ptr<DiskStore::Job> DiskStore::manifest_job_locked(const AgentRecord& record) {
  auto job = std::make_unique<Job>();
  job->kind = Job::Kind::Manifest;
  job->record = record;
  const std::string name = manifest_name(record.tenant, record.agent);
  manifests_[name] = {.chain = named_keys(record), .pinned = record.pinned};
  retries_.erase(name);  // this one supersedes a failed older one
  return job;
}

void DiskStore::put_manifest(const AgentRecord& record) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(manifest_job_locked(record));
  }
  wake_.notify_one();
}

void DiskStore::erase(const std::string& tenant, const std::string& agent,
                      std::vector<Hash128> blocks) {
  auto job = std::make_unique<Job>();
  job->kind = Job::Kind::Erase;
  job->record.tenant = tenant;
  job->record.agent = agent;
  job->blocks = std::move(blocks);
  job->remote_too = true;
  {
    std::lock_guard lock(mu_);
    // Gone for readers at once; the files follow on the IO thread.
    forget_files(job->blocks);
    if (!agent.empty()) {
      manifests_.erase(manifest_name(tenant, agent));
      retries_.erase(manifest_name(tenant, agent));
    }
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

std::int64_t DiskStore::stored_bytes(const std::vector<Hash128>& chain) const {
  std::lock_guard lock(mu_);
  std::int64_t n = 0;
  for (const Hash128& k : chain)
    if (auto it = files_.find(k); it != files_.end()) n += it->second.bytes;
  return n;
}

bool DiskStore::load(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                     std::span<std::byte> raw) {
  AKV_CHECK(raw.size() == options_.shape.raw_bytes(), "load: raw block size");
  return load_as(key, parent, tokens_hash, SpillCodec::Native, raw);
}

bool DiskStore::load_as(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                        SpillCodec codec, std::span<std::byte> out) {
  AKV_CHECK(out.size() == encoded_bytes(codec, options_.shape), "load: encoded block size");
  if (options_.before_load) options_.before_load(false);
  const bool local = on_disk(key);
  if (!local && options_.remote == nullptr) return false;
  const BlockExpect want{.fingerprint = options_.fingerprint,
                         .key = key,
                         .parent = parent,
                         .tokens_hash = tokens_hash,
                         .codec = options_.codec,
                         .payload_bytes = encoded_bytes(options_.codec, options_.shape)};
  // One file buffer per loading thread, reused: restores read many blocks of one size. A block
  // in `codec` is read with its payload straight into `out`, from a file or from Redis (no copy
  // through the buffer).
  thread_local std::vector<std::byte> bytes;
  const bool in_place = codec == options_.codec;
  bool ok = false;
  std::span<const std::byte> body;
  // A file's payload is checksummed piece by piece as it is read (disk_store_read.cpp).
  std::optional<std::uint64_t> sum;
  std::uint64_t read_sum = 0;
  if (in_place) {
    bytes.resize(kBlockHeaderBytes);
    ok = local ? read_split_file(block_path(key), bytes, out, read_sum) : options_.remote->get_block(key, bytes, out);
    if (!local && !ok) return false;  // not there, or Redis unavailable: a miss
    if (local) sum = read_sum;
    BlockHeader h;
    if (ok && parse_block_header(bytes, options_.fingerprint, h) == FileCheck::Ok && h.kind == BlockKind::Kv &&
        h.key == key && h.parent == parent && h.tokens_hash == tokens_hash && h.codec == options_.codec &&
        h.payload_bytes == out.size() && (sum ? *sum : payload_checksum(out)) == h.payload_checksum)
      body = out;
  } else {
    ok = local ? read_file_checksummed(block_path(key), kBlockHeaderBytes, bytes, read_sum)
               : options_.remote->get_block(key, bytes);
    if (!local && !ok) return false;  // not there, or Redis unavailable: a miss
    if (local) sum = read_sum;
    if (ok) body = verified_block_payload(bytes, want, sum);
  }
  if (body.empty()) {
    if (!local) {
      {
        std::lock_guard lock(mu_);
        ++stats_.rejected_corrupt;
      }
      log_warn("KV remote tier: block {} failed its check; not used, its tokens will be recomputed", key.hex());
      return false;
    }
    // A missing file (erased meanwhile) is not damage; anything else is.
    if (ok || ::access(block_path(key).c_str(), F_OK) == 0) drop_bad(key);
    return false;
  }
  if (!in_place && codec_is_raw(codec, options_.shape.dtype)) {
    decode_block(options_.codec, options_.shape, body, out);
  } else if (!in_place) {
    thread_local std::vector<std::byte> raw;
    raw.resize(options_.shape.raw_bytes());
    decode_block(options_.codec, options_.shape, body, raw);
    encode_block(codec, options_.shape, raw, out);
  }
  const std::int64_t now = now_unix_ms();
  {
    std::lock_guard lock(mu_);
    ++stats_.n_loaded;
    if (!local) {
      ++stats_.n_loaded_remote;
      if (from_remote_.size() >= kMaxFromRemote) from_remote_.clear();
      from_remote_.insert(key);
    }
    if (auto it = files_.find(key); it != files_.end()) it->second.last_use_ms = now;
  }
  if (local) set_mtime(blocks_fd_, key.hex() + ".kvb", now);
  return true;
}

void DiskStore::drop_bad(const Hash128& key) {
  {
    std::lock_guard lock(mu_);
    forget_files({key});
    ++stats_.rejected_corrupt;
  }
  log_warn("KV disk tier: block file {} failed its check (header, size or payload checksum); removed, its tokens "
           "will be recomputed",
           block_path(key));
  auto job = std::make_unique<Job>();
  job->kind = Job::Kind::Erase;
  job->blocks = {key};
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void DiskStore::collect_garbage() {
  auto job = std::make_unique<Job>();
  job->kind = Job::Kind::CollectGarbage;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

DiskStoreStats DiskStore::stats() const {
  std::lock_guard lock(mu_);
  DiskStoreStats s = stats_;
  s.paused = now_ms() < paused_until_ms_;
  s.max_bytes = options_.max_bytes;
  s.queued_blocks = queued_blocks_;
  s.queued_bytes = static_cast<std::int64_t>(queued_bytes_);
  return s;
}

std::int64_t DiskStore::now_unix_ms() const {
  return options_.now_unix_ms ? options_.now_unix_ms() : system_unix_ms();
}

}  // namespace akv
