// RemoteStore: connections, the fleet's secret, reads and the queue. The writer thread and the
// budget's eviction: remote_store_io.cpp.
#include "kv/remote_store.h"

#include <hiredis/hiredis.h>

#include <cstring>

#include "base/check.h"
#include "base/error.h"
#include "base/log.h"
#include "kv/store_dir.h"

namespace akv {

namespace {

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::unique_ptr<RemoteStore> RemoteStore::open_or_throw(RemoteStoreOptions options) {
  return std::unique_ptr<RemoteStore>(new RemoteStore(std::move(options)));
}

RemoteStore::RemoteStore(RemoteStoreOptions options)
    : options_(std::move(options)), prefix_("akv:" + options_.fingerprint.hex() + ":") {
  AKV_CHECK(options_.value_bytes > 0, "remote store needs a block size");
  load_secret();
  log_info("KV remote tier: Redis at {}:{} db {}, budget {}", options_.url.host, options_.url.port, options_.url.db,
           options_.max_bytes > 0 ? std::to_string(options_.max_bytes >> 20) + " MiB" : "unlimited");
  writer_ = std::thread([this] { write_loop(); });
}

RemoteStore::~RemoteStore() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void RemoteStore::load_secret() {
  std::string error;
  std::unique_ptr<RedisConnection> conn = RedisConnection::connect_or_null(options_.url, options_.timeout_ms, error);
  if (conn == nullptr) throw Error(ErrorKind::Io, "--kv-remote: " + error);
  // The first replica's random secret wins; every other one reads it.
  const std::vector<std::byte> mine = encode_store_secret(random_key_secret());
  conn->append({"SET", "akv:secret", std::string_view(reinterpret_cast<const char*>(mine.data()), mine.size()), "NX"});
  conn->append({"GETRANGE", "akv:secret", "0", "4096"});
  const RedisReply set = conn->next();
  const RedisReply got = conn->next();
  if (set == nullptr || got == nullptr) throw Error(ErrorKind::Io, "--kv-remote: " + conn->error());
  if (reply_is_error(set.get()) || reply_is_error(got.get()))
    throw Error(ErrorKind::Io, "--kv-remote: Redis refused: " +
                                   std::string(reply_string(reply_is_error(set.get()) ? set.get() : got.get())));
  const std::string_view bytes = reply_string(got.get());
  const std::optional<KeySecret> secret =
      parse_store_secret(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
  if (!secret)
    throw Error(ErrorKind::BadFormat,
                "--kv-remote: the fleet's key secret in Redis (akv:secret) is damaged; delete it and the fleet's "
                "akv:* keys (they cannot be matched without it) to start afresh");
  secret_ = *secret;
  give_back(std::move(conn));
}

std::string RemoteStore::block_name(const Hash128& key) const {
  return prefix_ + "block:" + key.hex();
}

std::string RemoteStore::state_name(const Hash128& key) const {
  return prefix_ + "state:" + key.hex();
}

std::string RemoteStore::agent_name(const Hash128& agent_hash) const {
  return prefix_ + "agent:" + agent_hash.hex();
}

std::int64_t RemoteStore::now_unix_ms() const {
  if (options_.now_unix_ms) return options_.now_unix_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<RedisConnection> RemoteStore::take_connection() {
  {
    std::lock_guard lock(mu_);
    if (!pool_.empty()) {
      std::unique_ptr<RedisConnection> conn = std::move(pool_.back());
      pool_.pop_back();
      return conn;
    }
  }
  if (steady_ms() < unavailable_until_ms_.load(std::memory_order_relaxed)) {
    std::lock_guard lock(mu_);
    ++stats_.n_unavailable;
    return nullptr;
  }
  std::string error;
  std::unique_ptr<RedisConnection> conn = RedisConnection::connect_or_null(options_.url, options_.timeout_ms, error);
  if (conn == nullptr) on_failure(error);
  return conn;
}

void RemoteStore::give_back(std::unique_ptr<RedisConnection> conn) {
  if (conn == nullptr || conn->broken()) return;
  std::lock_guard lock(mu_);
  if (pool_.size() < 16) pool_.push_back(std::move(conn));
}

void RemoteStore::on_failure(const std::string& what) {
  unavailable_until_ms_.store(steady_ms() + options_.reconnect_ms, std::memory_order_relaxed);
  bool log = false;
  std::int64_t n_errors = 0;
  {
    std::lock_guard lock(mu_);
    ++stats_.n_errors;
    n_errors = stats_.n_errors;
    stats_.available = false;
    pool_.clear();  // they reached the same server: likely broken too
    const std::int64_t now = steady_ms();
    if (last_log_ms_ == 0 || now - last_log_ms_ >= options_.log_interval_ms) {
      last_log_ms_ = now;
      log = true;
    }
  }
  if (log)
    log_warn("KV remote tier: Redis at {}:{} unavailable ({}; {} errors so far); serving from the local tiers, "
             "retrying every {} ms",
             options_.url.host, options_.url.port, what, n_errors, options_.reconnect_ms);
}

void RemoteStore::on_success() {
  std::lock_guard lock(mu_);
  stats_.available = true;
}

bool RemoteStore::put_block(const Hash128& key, std::span<const std::byte> header,
                            std::span<const std::byte> payload) {
  AKV_CHECK(header.size() + payload.size() == options_.value_bytes, "remote put: block file size");
  return put_value(Job::Kind::Block, key, header, payload);
}

bool RemoteStore::put_state(const Hash128& key, std::span<const std::byte> header,
                            std::span<const std::byte> payload) {
  AKV_CHECK(options_.state_value_bytes > 0 && header.size() + payload.size() <= options_.state_value_bytes,
            "remote put: state block file size");
  return put_value(Job::Kind::State, key, header, payload);
}

bool RemoteStore::put_value(Job::Kind kind, const Hash128& key, std::span<const std::byte> header,
                            std::span<const std::byte> payload) {
  Job job;
  job.kind = kind;
  job.key = key;
  job.bytes.resize(header.size() + payload.size());
  std::memcpy(job.bytes.data(), header.data(), header.size());
  std::memcpy(job.bytes.data() + header.size(), payload.data(), payload.size());
  {
    std::lock_guard lock(mu_);
    if (queued_bytes_ + job.bytes.size() > options_.max_queue_bytes) {
      ++stats_.n_dropped;
      return false;
    }
    queued_bytes_ += job.bytes.size();
    ++queued_blocks_;
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return true;
}

void RemoteStore::put_manifest(const Hash128& agent_hash, std::vector<std::byte> bytes, std::int64_t last_use_ms) {
  Job job;
  job.kind = Job::Kind::Manifest;
  job.key = agent_hash;
  job.bytes = std::move(bytes);
  job.last_use_ms = last_use_ms;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void RemoteStore::erase(const Hash128& agent_hash, std::vector<Hash128> blocks) {
  Job job;
  job.kind = Job::Kind::Erase;
  job.key = agent_hash;
  job.blocks = std::move(blocks);
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

bool RemoteStore::get_block(const Hash128& key, std::span<std::byte> head, std::span<std::byte> tail) {
  AKV_CHECK(head.size() + tail.size() == options_.value_bytes, "get_block: not one block's bytes");
  return get_value(block_name(key), prefix_ + "blocks", key, head, tail, false);
}

bool RemoteStore::get_state(const Hash128& key, std::vector<std::byte>& out) {
  AKV_CHECK(options_.state_value_bytes > 0, "get_state: the model has no state blocks");
  out.resize(options_.state_value_bytes);
  return get_value(state_name(key), prefix_ + "states", key, out, {}, true, &out);
}

bool RemoteStore::get_value(const std::string& name, const std::string& recency, const Hash128& key,
                            std::span<std::byte> head, std::span<std::byte> tail, bool state,
                            std::vector<std::byte>* shorter) {
  std::unique_ptr<RedisConnection> conn = take_connection();
  if (conn == nullptr) return false;
  // GETRANGE bounds the reply: a longer value shows as one byte more than expected.
  const std::string last = std::to_string(head.size() + tail.size());
  const std::string now = std::to_string(now_unix_ms());
  conn->append({"GETRANGE", name, "0", last});
  conn->append({"ZADD", recency, "XX", now, key.hex()});
  RedisReply other;  // a reply that is not the value (an empty string when it is missing)
  const RedisConnection::BulkRead got = conn->next_bulk_into(head, tail, other);
  const bool read = got != RedisConnection::BulkRead::Failed;
  const RedisReply touched = read ? conn->next() : nullptr;
  if (!read || touched == nullptr || reply_is_error(other.get())) {
    on_failure(!read || touched == nullptr ? conn->error() : std::string(reply_string(other.get())));
    return false;
  }
  give_back(std::move(conn));
  on_success();
  std::lock_guard lock(mu_);
  if (got == RedisConnection::BulkRead::Filled) {
    ++(state ? stats_.n_states_loaded : stats_.n_loaded);
    return true;
  }
  const std::string_view value = reply_string(other.get());
  if (shorter != nullptr && !value.empty() && value.size() < head.size() + tail.size()) {
    shorter->resize(value.size());  // head (may be *shorter) is not used past here
    std::memcpy(shorter->data(), value.data(), value.size());
    ++(state ? stats_.n_states_loaded : stats_.n_loaded);
    return true;
  }
  if (value.empty())
    ++stats_.n_missing;
  else
    ++stats_.n_bad;
  return false;
}

std::vector<bool> RemoteStore::has_states(std::span<const Hash128> keys) {
  std::vector<bool> found(keys.size(), false);
  if (keys.empty()) return found;
  std::unique_ptr<RedisConnection> conn = take_connection();
  if (conn == nullptr) return found;
  for (const Hash128& k : keys) conn->append({"EXISTS", state_name(k)});
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const RedisReply r = conn->next();
    if (r == nullptr) {
      on_failure(conn->error());
      return std::vector<bool>(keys.size(), false);
    }
    found[i] = reply_integer(r.get(), 0) > 0;
  }
  give_back(std::move(conn));
  on_success();
  return found;
}

bool RemoteStore::get_block(const Hash128& key, std::vector<std::byte>& out) {
  out.resize(options_.value_bytes);  // kept between calls: neither zeroed nor regrown
  return get_block(key, out, {});
}

std::optional<std::vector<std::byte>> RemoteStore::get_manifest(const Hash128& agent_hash) {
  std::unique_ptr<RedisConnection> conn = take_connection();
  if (conn == nullptr) return std::nullopt;
  conn->append({"GETRANGE", agent_name(agent_hash), "0", std::to_string(kMaxManifestBytes - 1)});
  const RedisReply got = conn->next();
  if (got == nullptr || reply_is_error(got.get())) {
    on_failure(got == nullptr ? conn->error() : std::string(reply_string(got.get())));
    return std::nullopt;
  }
  give_back(std::move(conn));
  on_success();
  const std::string_view bytes = reply_string(got.get());
  if (bytes.empty()) return std::nullopt;
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

bool RemoteStore::flush(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return idle_.wait_until(lock, deadline, [&] { return queue_.empty() && !busy_; });
}

void RemoteStore::evict_now() {
  {
    std::lock_guard lock(mu_);
    evict_requested_ = true;
  }
  wake_.notify_one();
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return !evict_requested_ && queue_.empty() && !busy_; });
}

RemoteStoreStats RemoteStore::stats() const {
  std::lock_guard lock(mu_);
  RemoteStoreStats s = stats_;
  s.queued_blocks = queued_blocks_;
  s.queued_bytes = static_cast<std::int64_t>(queued_bytes_);
  return s;
}

}  // namespace akv
