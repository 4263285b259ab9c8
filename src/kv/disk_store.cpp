#include "kv/disk_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <queue>
#include <utility>

#include "base/check.h"
#include "base/error.h"
#include "base/log.h"
#include "kv/disk_format.h"
#include "kv/store_dir.h"

namespace akv {

struct DiskStore::Job {
  enum class Kind { Block, Manifest, Erase, CollectGarbage } kind = Kind::Block;
  Hash128 key, parent, tokens_hash;
  std::vector<std::byte> raw;
  AgentRecord record;           // Manifest; Erase uses tenant and agent
  std::vector<Hash128> blocks;  // Erase
};

namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t system_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Recency survives restarts as the file's mtime; a failure only costs recency.
void set_mtime(int dir_fd, const std::string& name, std::int64_t unix_ms) {
  const timespec times[2] = {{.tv_sec = 0, .tv_nsec = UTIME_OMIT},
                             {.tv_sec = unix_ms / 1000, .tv_nsec = (unix_ms % 1000) * 1000000}};
  ::utimensat(dir_fd, name.c_str(), times, 0);
}

std::string errno_text() {
  return std::strerror(errno);
}

bool write_all(int fd, std::span<const std::byte> bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
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
  io_ = std::thread([this] { io_loop(); });
}

DiskStore::~DiskStore() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (io_.joinable()) io_.join();
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
    keyer_ = std::make_unique<BlockKeyer>(load_or_create_store_secret(options_.dir), options_.fingerprint);
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
    if (check == FileCheck::Ok &&
        (h.key != *key || h.codec != options_.codec ||
         h.n_tokens != static_cast<std::uint32_t>(options_.block_size) ||
         h.payload_bytes != payload ||
         static_cast<std::uint64_t>(st.st_size) != kBlockHeaderBytes + payload))
      check = FileCheck::Corrupt;
    switch (check) {
      case FileCheck::Ok:
        files_[*key] = {
            .bytes = st.st_size,
            .last_use_ms = std::int64_t{st.st_mtim.tv_sec} * 1000 + st.st_mtim.tv_nsec / 1000000,
            .parent = h.parent};
        ++stats_.n_blocks;
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
        manifests_[name] = {.chain = r.chain, .pinned = r.pinned};
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

namespace {
constexpr std::size_t kMaxSpareBuffers = 32;
}  // namespace

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

bool DiskStore::put(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                    std::vector<std::byte> raw) {
  AKV_CHECK(raw.size() == options_.shape.raw_bytes(), "put: raw block size");
  {
    std::lock_guard lock(mu_);
    const auto keep_buffer = [&] {
      if (spare_raw_.size() < kMaxSpareBuffers) spare_raw_.push_back(std::move(raw));
    };
    if (files_.contains(key) || pending_.contains(key)) {
      keep_buffer();
      return false;
    }
    if (now_ms() < paused_until_ms_ || queued_bytes_ + raw.size() > options_.max_queue_bytes) {
      ++stats_.n_dropped;
      keep_buffer();
      return false;
    }
    auto job = std::make_unique<Job>();
    job->kind = Job::Kind::Block;
    job->key = key;
    job->parent = parent;
    job->tokens_hash = tokens_hash;
    queued_bytes_ += raw.size();
    job->raw = std::move(raw);
    pending_.insert(key);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return true;
}

void DiskStore::put_manifest(const AgentRecord& record) {
  auto job = std::make_unique<Job>();
  job->kind = Job::Kind::Manifest;
  job->record = record;
  {
    std::lock_guard lock(mu_);
    manifests_[manifest_name(record.tenant, record.agent)] = {.chain = record.chain,
                                                              .pinned = record.pinned};
    queue_.push_back(std::move(job));
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
  {
    std::lock_guard lock(mu_);
    // Gone for readers at once; the files follow on the IO thread.
    forget_files(job->blocks);
    if (!agent.empty()) manifests_.erase(manifest_name(tenant, agent));
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
  if (!on_disk(key)) return false;
  // One file buffer per loading thread, reused: restores read many blocks of one size.
  thread_local std::vector<std::byte> bytes;
  const bool ok = read_file_into(block_path(key), bytes);
  BlockHeader h;
  const std::size_t payload = encoded_bytes(options_.codec, options_.shape);
  bool good = ok && parse_block_header(bytes, options_.fingerprint, h) == FileCheck::Ok &&
              h.key == key && h.parent == parent && h.tokens_hash == tokens_hash &&
              h.codec == options_.codec && h.payload_bytes == payload &&
              bytes.size() == kBlockHeaderBytes + payload;
  const std::span<const std::byte> body =
      good ? std::span(bytes).subspan(kBlockHeaderBytes) : std::span<const std::byte>{};
  good = good && payload_checksum(body) == h.payload_checksum;
  if (!good) {
    // A missing file (erased meanwhile) is not damage; anything else is.
    if (ok || ::access(block_path(key).c_str(), F_OK) == 0) drop_bad(key);
    return false;
  }
  decode_block(options_.codec, options_.shape, body, raw);
  const std::int64_t now = now_unix_ms();
  {
    std::lock_guard lock(mu_);
    ++stats_.n_loaded;
    if (auto it = files_.find(key); it != files_.end()) it->second.last_use_ms = now;
  }
  set_mtime(blocks_fd_, key.hex() + ".kvb", now);
  return true;
}

void DiskStore::drop_bad(const Hash128& key) {
  {
    std::lock_guard lock(mu_);
    forget_files({key});
    ++stats_.rejected_corrupt;
  }
  log_warn("KV disk tier: block {} is damaged; removed, its tokens will be recomputed", key.hex());
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

void DiskStore::flush() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

DiskStoreStats DiskStore::stats() const {
  std::lock_guard lock(mu_);
  DiskStoreStats s = stats_;
  s.paused = now_ms() < paused_until_ms_;
  s.max_bytes = options_.max_bytes;
  return s;
}

void DiskStore::io_loop() {
  using Clock = std::chrono::steady_clock;
  const bool gc_on = options_.orphan_age_s > 0 && options_.gc_interval_s > 0;
  const auto gc_every = std::chrono::seconds(std::max<std::int64_t>(options_.gc_interval_s, 1));
  Clock::time_point next_gc = Clock::now() + gc_every;
  std::unique_lock lock(mu_);
  while (true) {
    const auto ready = [&] { return stop_ || !queue_.empty(); };
    std::unique_ptr<Job> job;
    if (gc_on && !wake_.wait_until(lock, next_gc, ready)) {
      next_gc = Clock::now() + gc_every;
      job = std::make_unique<Job>();
      job->kind = Job::Kind::CollectGarbage;
    } else {
      if (!gc_on) wake_.wait(lock, ready);
      if (queue_.empty()) break;  // stop_ and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    busy_ = true;
    lock.unlock();
    run(*job);
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
  idle_.notify_all();
}

void DiskStore::run(Job& job) {
  switch (job.kind) {
    case Job::Kind::Block:
      write_block(job);
      return;
    case Job::Kind::Manifest: {
      const std::vector<std::byte> bytes = encode_manifest(options_.fingerprint, job.record);
      if (!write_durably(agents_fd_, manifest_name(job.record.tenant, job.record.agent), bytes, {}))
        on_write_error("agent manifest: " + errno_text());
      return;
    }
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
      return;
    }
    case Job::Kind::CollectGarbage:
      collect_orphans();
      return;
  }
}

void DiskStore::write_block(Job& job) {
  bool paused = false;
  {
    std::lock_guard lock(mu_);
    paused = now_ms() < paused_until_ms_;
  }
  bool written = false;
  const std::size_t file_bytes = kBlockHeaderBytes + encoded_bytes(options_.codec, options_.shape);
  const bool fits = !paused && make_room(static_cast<std::int64_t>(file_bytes));
  if (!paused && !fits) on_over_budget();
  if (fits) {
    std::vector<std::byte>& payload = payload_;
    payload.resize(encoded_bytes(options_.codec, options_.shape));
    encode_block(options_.codec, options_.shape, job.raw, payload);
    BlockHeader h{.fingerprint = options_.fingerprint,
                  .key = job.key,
                  .parent = job.parent,
                  .tokens_hash = job.tokens_hash,
                  .codec = options_.codec,
                  .n_tokens = static_cast<std::uint32_t>(options_.block_size),
                  .payload_bytes = payload.size(),
                  .payload_checksum = payload_checksum(payload)};
    const auto header = encode_block_header(h);
    written = write_durably(blocks_fd_, job.key.hex() + ".kvb", header, payload);
    if (!written) on_write_error("block: " + errno_text());
  }
  const std::int64_t now = now_unix_ms();
  if (written) set_mtime(blocks_fd_, job.key.hex() + ".kvb", now);
  {
    std::lock_guard lock(mu_);
    pending_.erase(job.key);
    queued_bytes_ -= job.raw.size();
    if (spare_raw_.size() < kMaxSpareBuffers) spare_raw_.push_back(std::move(job.raw));
    if (written) {
      const BlockFile f{
          .bytes = static_cast<std::int64_t>(file_bytes), .last_use_ms = now, .parent = job.parent};
      if (files_.emplace(job.key, f).second) {
        ++stats_.n_blocks;
        stats_.bytes += static_cast<std::int64_t>(file_bytes);
      }
      ++stats_.n_written;
    } else {
      ++stats_.n_dropped;
    }
  }
  if (written && options_.on_block_written) options_.on_block_written(job.key);
}

bool DiskStore::write_durably(int dir_fd, const std::string& name, std::span<const std::byte> a,
                              std::span<const std::byte> b) {
  const std::string tmp = name + ".tmp" + std::to_string(++tmp_serial_);
  const int fd = ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = write_all(fd, a) && write_all(fd, b) && ::fsync(fd) == 0;
  const int saved = errno;
  ok = (::close(fd) == 0) && ok;
  if (ok) ok = ::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) == 0 && ::fsync(dir_fd) == 0;
  if (!ok) {
    const int e = errno != 0 ? errno : saved;
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    errno = e;
  }
  return ok;
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

// --- Retention ----------------------------------------------------------------------------------
// Deletion order is a leaf-first LRU over the chains the block headers' parent keys form (the
// radix-tree order): a block is a candidate only once no stored block names it as parent, so a
// chain loses its tail before its head and the longest restorable prefixes stay. Among the
// candidates, blocks no manifest names go first, then the least recently used.

std::int64_t DiskStore::now_unix_ms() const {
  return options_.now_unix_ms ? options_.now_unix_ms() : system_unix_ms();
}

std::vector<Hash128> DiskStore::pick_victims(Sweep sweep, std::int64_t target_bytes) const {
  std::unordered_set<Hash128, Hash128Hasher> named, pinned;
  for (const auto& [name, m] : manifests_)
    for (const Hash128& k : m.chain) {
      named.insert(k);
      if (m.pinned) pinned.insert(k);
    }
  const std::int64_t cutoff_ms = now_unix_ms() - options_.orphan_age_s * 1000;
  const auto may_go = [&](const Hash128& key, const BlockFile& f) {
    return sweep == Sweep::Budget ? !pinned.contains(key)
                                  : !named.contains(key) && f.last_use_ms < cutoff_ms;
  };
  std::unordered_map<Hash128, std::int32_t, Hash128Hasher> n_children;
  for (const auto& [key, f] : files_)
    if (files_.contains(f.parent)) ++n_children[f.parent];

  struct Candidate {
    bool named;
    std::int64_t last_use_ms;
    Hash128 key;
    bool operator>(const Candidate& o) const {
      if (named != o.named) return named;
      if (last_use_ms != o.last_use_ms) return last_use_ms > o.last_use_ms;
      return key.hi != o.key.hi ? key.hi > o.key.hi : key.lo > o.key.lo;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> leaves;
  const auto offer = [&](const Hash128& key, const BlockFile& f) {
    if (may_go(key, f)) leaves.push({named.contains(key), f.last_use_ms, key});
  };
  for (const auto& [key, f] : files_)
    if (!n_children.contains(key)) offer(key, f);

  std::vector<Hash128> victims;
  std::int64_t bytes = stats_.bytes;
  while (!leaves.empty() && (sweep == Sweep::Orphans || bytes > target_bytes)) {
    const Hash128 key = leaves.top().key;
    leaves.pop();
    const BlockFile& f = files_.at(key);
    victims.push_back(key);
    bytes -= f.bytes;
    if (auto it = n_children.find(f.parent); it != n_children.end() && --it->second == 0)
      offer(f.parent, files_.at(f.parent));
  }
  return victims;
}

bool DiskStore::make_room(std::int64_t incoming) {
  if (options_.max_bytes <= 0) return true;
  std::vector<Hash128> victims;
  {
    std::lock_guard lock(mu_);
    if (stats_.bytes + incoming <= options_.max_bytes) return true;
    const auto low_bytes =
        static_cast<std::int64_t>(options_.low_water * static_cast<double>(options_.max_bytes));
    victims = pick_victims(Sweep::Budget, low_bytes - incoming);
    std::int64_t freed = 0;
    for (const Hash128& k : victims) freed += files_.at(k).bytes;
    if (stats_.bytes - freed + incoming > options_.max_bytes) return false;  // keep them all
    forget_files(victims);
    stats_.n_evicted += static_cast<std::int64_t>(victims.size());
  }
  unlink_blocks(victims);
  return true;
}

void DiskStore::collect_orphans() {
  if (options_.orphan_age_s <= 0) return;
  std::vector<Hash128> victims;
  {
    std::lock_guard lock(mu_);
    victims = pick_victims(Sweep::Orphans, 0);
    forget_files(victims);
    stats_.n_gc += static_cast<std::int64_t>(victims.size());
  }
  unlink_blocks(victims);
}

void DiskStore::forget_files(const std::vector<Hash128>& keys) {
  for (const Hash128& k : keys) {
    if (auto it = files_.find(k); it != files_.end()) {
      --stats_.n_blocks;
      stats_.bytes -= it->second.bytes;
      files_.erase(it);
    }
  }
}

// No directory fsync: a deletion lost in a crash is found by the next start-up's scan and
// counted against the budget again.
void DiskStore::unlink_blocks(const std::vector<Hash128>& keys) {
  for (const Hash128& k : keys) ::unlinkat(blocks_fd_, (k.hex() + ".kvb").c_str(), 0);
}

void DiskStore::on_over_budget() {
  bool first = false;
  {
    std::lock_guard lock(mu_);
    ++stats_.n_over_budget;
    first = now_ms() >= paused_until_ms_;
    paused_until_ms_ = now_ms() + options_.pause_after_error_ms;
  }
  if (first)
    log_warn(
        "KV disk tier {}: {} MiB budget full of pinned agents' blocks; spilling paused for {} ms, "
        "serving continues",
        options_.dir, options_.max_bytes >> 20, options_.pause_after_error_ms);
}

}  // namespace akv
