// The remote tier, under the disk tier: the disk tier's block files and agent manifests, byte
// for byte, in a Redis every replica of a fleet reaches (docs/fleet.md). Keys in Redis:
//   akv:secret                      the fleet's key secret (store_dir.h's file format)
//   akv:<fingerprint>:block:<key>   a block file (disk_format.h: header + payload)
//   akv:<fingerprint>:agent:<hash>  an agent manifest (disk_format.h), hash = keyed (tenant, agent)
//   akv:<fingerprint>:blocks        sorted set: block key -> last use (unix ms)
//   akv:<fingerprint>:agents        sorted set: agent hash -> the manifest's last use
//   akv:<fingerprint>:state:<key>   a state block file (hybrid models' recurrent-state snapshot,
//                                   disk_format.h; key = BlockKeyer::state_key of its KV block)
//   akv:<fingerprint>:states        sorted set: state key -> last use (unix ms)
// Block keys chain from a root keyed by the secret, the model fingerprint and the tenant
// (block_key.h), so tenants and models never share a block; the fingerprint in every name keeps
// another model's replicas out of these keys altogether, and the header is checked on each read.
// Writes go behind, on one writer thread (pipelined batches); reads run on the caller's thread
// (the restorer's) over a small pool of connections, each bounded to the expected size.
// Redis down, slow or refusing: the operation counts as "not cached" (a miss), is counted, and
// is logged at most every log_interval_ms; connections are retried every reconnect_ms. The
// writer keeps its queue while Redis is away (up to max_queue_bytes; past it blocks are dropped).
// Budget: past max_bytes the writer deletes blocks no manifest names (least recently used
// first), then the blocks of the least recently used unpinned agents (their manifests first);
// never a block a pinned agent's manifest names. State blocks count in the budget and go
// before KV blocks: unnamed ones first, an agent's before its chain. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kv/block_key.h"
#include "kv/redis_client.h"

namespace akv {

struct RemoteStoreOptions {
  RedisUrl url;
  Hash128 fingerprint;             // model_fingerprint(): the same as the disk tier's
  std::size_t value_bytes = 0;     // one block file's bytes (kBlockHeaderBytes + payload)
  // One state block file's bytes (kBlockHeaderBytes + the model's state); 0: the model has no
  // recurrent state (put_state/get_state are then never called).
  std::size_t state_value_bytes = 0;
  std::int64_t max_bytes = 0;      // block bytes kept in Redis for this fingerprint (0: unlimited)
  double low_water = 0.9;          // eviction goes down to low_water * max_bytes
  std::size_t max_queue_bytes = std::size_t{256} << 20;  // waiting writes; more are dropped
  std::int32_t timeout_ms = 2000;        // connect and each round trip
  std::int32_t reconnect_ms = 1000;      // after a failure, no connection is tried for this long
  std::int32_t log_interval_ms = 10000;  // at most one "Redis unavailable" warning per interval
  // Unix time in ms (recency); null: the system clock. Tests inject one.
  std::function<std::int64_t()> now_unix_ms;
};

struct RemoteStoreStats {
  std::int64_t n_written = 0;        // blocks written (new or already there)
  std::int64_t n_loaded = 0;         // blocks read
  std::int64_t n_missing = 0;        // reads that found no block
  std::int64_t n_bad = 0;            // reads of the wrong size (the caller counts bad checksums)
  std::int64_t n_errors = 0;         // failed connections and round trips
  std::int64_t n_unavailable = 0;    // operations skipped while Redis was unavailable
  std::int64_t n_dropped = 0;        // blocks not written: queue full, or at stop
  std::int64_t n_manifests = 0;      // manifests written
  std::int64_t n_evicted = 0;        // blocks deleted for the budget
  std::int64_t n_agents_evicted = 0; // manifests deleted for the budget
  std::int64_t n_states_written = 0; // state blocks written (of the queued blocks below)
  std::int64_t n_states_loaded = 0;  // state blocks read
  std::int64_t n_states_evicted = 0; // state blocks deleted for the budget
  std::int64_t queued_blocks = 0;    // waiting to be written (now; state blocks included)
  std::int64_t queued_bytes = 0;
  bool available = true;             // the last operation reached Redis
};

class RemoteStore {
 public:
  // Connects and reads the fleet's key secret (creating it when Redis has none). Throws
  // Error{Io} when Redis cannot be reached or refuses, Error{BadFormat} for a damaged secret.
  static std::unique_ptr<RemoteStore> open_or_throw(RemoteStoreOptions options);
  // Writes what is queued while Redis answers (each round trip bounded by timeout_ms), drops
  // the rest, stops the writer.
  ~RemoteStore();
  RemoteStore(const RemoteStore&) = delete;
  RemoteStore& operator=(const RemoteStore&) = delete;

  const KeySecret& secret() const { return secret_; }
  const Hash128& fingerprint() const { return options_.fingerprint; }
  std::size_t value_bytes() const { return options_.value_bytes; }
  std::size_t state_value_bytes() const { return options_.state_value_bytes; }

  // Queues a block file's bytes (header, then payload; copied). False when dropped (queue full).
  bool put_block(const Hash128& key, std::span<const std::byte> header, std::span<const std::byte> payload);
  // Queues a state block file's bytes (header, then payload; copied; at most state_value_bytes
  // in all: a bf16 state is smaller) under its own name (akv:<fp>:state:<key>). False when
  // dropped (queue full).
  bool put_state(const Hash128& key, std::span<const std::byte> header, std::span<const std::byte> payload);
  // Queues an agent's manifest bytes (replacing its previous one) behind the blocks queued so far.
  void put_manifest(const Hash128& agent_hash, std::vector<std::byte> bytes, std::int64_t last_use_ms);
  // Queues the removal of an agent's manifest (a zero hash: none) and of these blocks (KV or
  // state blocks: both names are removed).
  void erase(const Hash128& agent_hash, std::vector<Hash128> blocks);
  // Reads block `key`'s value_bytes straight from the connection into `head` and then `tail`
  // (their sizes add up to value_bytes; a restore passes a small header buffer and the payload's
  // destination, so the payload is never copied in user space) and marks it used. False when
  // it is missing, of another size (at most value_bytes + 1 bytes are read), or Redis is
  // unavailable; the spans' bytes are then unspecified. The caller verifies the bytes
  // (disk_format.h). Any thread.
  bool get_block(const Hash128& key, std::span<std::byte> head, std::span<std::byte> tail);
  // get_block into `out`, resized to value_bytes.
  bool get_block(const Hash128& key, std::vector<std::byte>& out);
  // A state block's value into `out` (resized to its size: at most state_value_bytes, less for a
  // state codec smaller than exact; at most state_value_bytes + 1 bytes are read), marked used.
  // False when missing, empty, larger, or Redis is unavailable. The caller verifies the bytes.
  bool get_state(const Hash128& key, std::vector<std::byte>& out);
  // For each key, whether Redis holds that state block (one round trip; all false while Redis
  // is unavailable). Any thread.
  std::vector<bool> has_states(std::span<const Hash128> keys);
  // The agent's manifest bytes (at most kMaxManifestBytes); nullopt when missing or unavailable.
  std::optional<std::vector<std::byte>> get_manifest(const Hash128& agent_hash);
  // Waits until the queue is written; false at the deadline (what is left stays queued).
  bool flush(std::chrono::steady_clock::time_point deadline);
  // Runs the budget's eviction now (the writer also runs it after writes past the budget).
  void evict_now();
  RemoteStoreStats stats() const;

  static constexpr std::size_t kMaxManifestBytes = std::size_t{16} << 20;

 private:
  struct Job {
    enum class Kind { Block, State, Manifest, Erase } kind = Kind::Block;
    Hash128 key;                  // block key, or agent hash (zero: none)
    std::vector<std::byte> bytes;
    std::int64_t last_use_ms = 0;
    std::vector<Hash128> blocks;  // Erase
  };
  explicit RemoteStore(RemoteStoreOptions options);
  void load_secret();
  std::string block_name(const Hash128& key) const;
  std::string state_name(const Hash128& key) const;
  // put_block/put_state: queues a block-like job of these bytes. False when dropped.
  bool put_value(Job::Kind kind, const Hash128& key, std::span<const std::byte> header,
                 std::span<const std::byte> payload);
  // get_block/get_state: reads `name`'s value (head.size() + tail.size() bytes; with `shorter`,
  // a shorter non-empty value is accepted into it) and marks `key` used in the sorted set
  // `recency`.
  bool get_value(const std::string& name, const std::string& recency, const Hash128& key,
                 std::span<std::byte> head, std::span<std::byte> tail, bool state,
                 std::vector<std::byte>* shorter = nullptr);
  std::string agent_name(const Hash128& agent_hash) const;
  std::int64_t now_unix_ms() const;
  // A connection from the pool (or a new one); null while Redis is unavailable.
  std::unique_ptr<RedisConnection> take_connection();
  void give_back(std::unique_ptr<RedisConnection> conn);
  // Counts and logs a failure; Redis counts as unavailable for reconnect_ms.
  void on_failure(const std::string& what);
  void on_success();
  // Writer thread (remote_store_io.cpp).
  void write_loop();
  void publish_secret(RedisConnection& conn);
  bool write_batch(RedisConnection& conn, std::vector<Job>& batch);
  void evict(RedisConnection& conn);
  bool over_budget(RedisConnection& conn);

  RemoteStoreOptions options_;
  std::string prefix_;  // akv:<fingerprint>:
  KeySecret secret_{};
  std::atomic<std::int64_t> unavailable_until_ms_{0};  // steady ms

  mutable std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<Job> queue_;
  std::size_t queued_bytes_ = 0;
  std::int64_t queued_blocks_ = 0;
  bool busy_ = false, stop_ = false, evict_requested_ = false;
  std::vector<std::unique_ptr<RedisConnection>> pool_;  // idle reader connections
  RemoteStoreStats stats_;
  std::int64_t last_log_ms_ = 0;

  std::thread writer_;  // last: starts after everything above exists
};

}  // namespace akv
