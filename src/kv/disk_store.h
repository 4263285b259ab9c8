// The disk tier: content-addressed KV blocks (one file per block key, so a prefix shared by many
// agents is stored once) and one small manifest per agent, under one directory:
//   <dir>/secret   the key secret (block_key.h)      <dir>/lock  held while a store is open
//   <dir>/blocks/<key>.kvb                           <dir>/agents/<agent hash>.agent
// Blocks in a codec that is not their raw form (int8, int4) are encoded ahead of the IO thread by
// a few encode workers, in queue order and within a bound of bytes; the IO thread only writes.
// Files are written by one IO thread in batches (durable_batch.h: temp files, one syncfs,
// renames, one directory fsync per batch), so a crash leaves either the old state or the
// new file whole. A manifest is written after the blocks queued before it (a graceful stop's
// queue goes ahead of the backlog: there an agent's manifest follows its own chain's blocks,
// disk_store_drain.cpp); a failed manifest write is retried (with a bound). Start-up scans
// both folders; a file with another fingerprint or version is never used (and left alone), a
// damaged one is removed; both are counted and logged. Payload checksums are verified on every
// load. A write error (disk full, ...) pauses spilling for a while with a warning; serving never
// waits for disk: a block that finds the queue full is dropped, counted and logged (at most
// every 10 s, from the IO thread).
// Retention: block files past `max_bytes` are evicted (disk_store_retention.cpp), blocks no
// manifest names are collected once unused for `orphan_age_s`; blocks of pinned agents stay.
// Thread-safe. put/put_manifest/erase never block on IO; load reads on the caller's thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/latency_histogram.h"
#include "kv/agent_index.h"
#include "kv/block_codec.h"
#include "kv/block_key.h"
#include "kv/disk_format.h"

namespace akv {

class RemoteStore;

// A block whose encoded bytes live elsewhere while it waits for the disk (a host-tier slot): lent
// to the disk tier, which reads them on the IO thread and then calls `release` once (written,
// dropped, or at destruction; never under the store's lock). The bytes must stay valid and
// unchanged until then. `codec` is the store's codec or one that keeps the raw form.
struct LentBlock {
  std::span<const std::byte> bytes;
  SpillCodec codec = SpillCodec::Native;
  std::function<void()> release;
};

struct DiskStoreOptions {
  std::string dir;
  Hash128 fingerprint;  // model_fingerprint(): also covers shape and codec
  SpillCodec codec = SpillCodec::Native;
  BlockShape shape;                                      // of one block's raw bytes
  std::int32_t block_size = 0;                           // tokens per block
  // Raw bytes waiting; more are dropped (a graceful stop's own blocks may take as much again).
  std::size_t max_queue_bytes = std::size_t{256} << 20;
  std::size_t max_lent_blocks = 8192;  // lent blocks waiting (they hold no memory of the store's)
  // Threads that encode blocks into a codec that is not their raw form (int8, int4), ahead of
  // the IO thread, which then only writes (disk_store_encode.cpp). -1: a quarter of the cores,
  // 1 to 4 (none when nothing needs encoding); 0: the IO thread encodes each block it writes.
  int encode_threads = -1;
  std::int32_t pause_after_error_ms = 30000;
  // Block file bytes kept (0: unlimited). Past it the IO thread deletes blocks down to
  // low_water * max_bytes: blocks no manifest names first, then least recently used (written or
  // loaded; the file's mtime across restarts), a chain's tail before its head, never a block a
  // pinned agent's manifest names. A write that cannot fit is dropped and spilling pauses.
  std::int64_t max_bytes = 0;
  double low_water = 0.9;
  // Blocks no manifest names and unused this long are deleted at start-up and every
  // gc_interval_s (<= 0: never).
  std::int64_t orphan_age_s = 24 * 3600;
  std::int64_t gc_interval_s = 600;
  // Unix time in ms for recency and age (file mtimes use it too); null: the system clock. Tests
  // inject one. Called on any thread.
  std::function<std::int64_t()> now_unix_ms;
  // Called on the IO thread once a block file is durable (after the directory fsync).
  std::function<void(const Hash128& key)> on_block_written;
  // Test hooks, called on the IO thread: before each batch of block writes (tests slow the disk
  // with it); before each manifest write (a nonzero errno it returns fails that write).
  std::function<void()> before_write;
  std::function<int()> manifest_write_fault;
  // Test hook, called on the loading thread before each load (`state`: of a state block); tests
  // slow the reads with it.
  std::function<void(bool state)> before_load;
  // A failed manifest write is tried again after manifest_retry_ms, doubled each time, up to
  // max_manifest_attempts writes in all (at once when the store stops or a drain runs out of
  // time); then it is given up, counted and logged.
  std::int32_t manifest_retry_ms = 1000;
  std::int32_t max_manifest_attempts = 5;
  std::int32_t drop_log_interval_ms = 10000;  // at most one "blocks dropped" warning per interval
  // The remote tier under this one (null: none; must outlive the store). Its secret becomes
  // this directory's (a store keyed by another is moved aside: store_dir.h adopt_store_secret);
  // every block file written here and every manifest is also queued for it; an agent's erase
  // reaches it too; load() reads a block it lacks from it, verified the same way.
  RemoteStore* remote = nullptr;
};

struct DiskStoreStats {
  std::int64_t n_blocks = 0;   // usable block files (state blocks included)
  std::int64_t n_states = 0;   // of n_blocks: state blocks
  std::int64_t bytes = 0;      // their total size
  std::int64_t max_bytes = 0;  // DiskStoreOptions::max_bytes (0: unlimited)
  std::int64_t n_manifests = 0;
  std::int64_t rejected_foreign = 0;  // another model, tokenizer, template, layout or codec
  std::int64_t rejected_version = 0;  // another format version, or a state codec this build lacks
  std::int64_t rejected_corrupt = 0;  // bad header, size or checksum (at start-up or on load)
  std::int64_t n_written = 0;
  std::int64_t n_loaded = 0;
  std::int64_t n_loaded_remote = 0;  // of n_loaded: read from the remote tier
  std::int64_t n_states_loaded_remote = 0;  // of n_loaded_remote: state blocks
  std::int64_t n_dropped = 0;  // blocks not spilled: any reason below or a failed write
  std::int64_t n_dropped_queue_full = 0;  // of n_dropped: the writes were behind
  std::int64_t n_dropped_paused = 0;      // of n_dropped: spilling paused after an error
  std::int64_t n_dropped_at_stop = 0;     // of n_dropped: still queued when a drain ran out of time
  std::int64_t n_write_errors = 0;        // failed block or manifest writes
  std::int64_t n_manifest_retries = 0;    // manifest writes tried again after a failure
  std::int64_t n_manifests_lost = 0;      // manifests given up after max_manifest_attempts
  std::int64_t n_batches = 0;             // batches of block writes (one directory fsync each)
  std::int64_t queued_blocks = 0;         // blocks waiting to be written (now)
  std::int64_t queued_bytes = 0;  // their raw bytes (max_queue_bytes; twice that during a stop)
  std::int64_t n_over_budget = 0;  // of n_dropped: max_bytes full of blocks that must stay
  std::int64_t n_evicted = 0;      // block files deleted to keep max_bytes
  std::int64_t n_gc = 0;           // block files no manifest names, deleted for age
  // Encoding into the store's codec (not the raw form): blocks encoded, of them those the IO
  // thread encoded itself (the encode workers were behind, or there are none), and the time
  // spent on them (summed over the threads).
  std::int64_t n_encoded = 0;
  std::int64_t n_encoded_on_io = 0;
  std::int64_t encode_us = 0;
  std::int32_t encode_threads = 0;  // encode workers running
  bool paused = false;
};

// What DiskStore::drain did.
struct DiskDrain {
  std::int64_t n_written = 0;          // block files written during the drain
  std::int64_t n_dropped = 0;          // blocks dropped during it (at the deadline or otherwise)
  std::int64_t n_manifests_lost = 0;   // manifests given up during it
  bool in_time = false;                // everything was written before the deadline
  // Afterwards: agents with a manifest, and of them those whose last manifest is written and
  // every block it names (chain and state blocks) is on disk: restored whole after a restart.
  std::int64_t n_agents = 0;
  std::int64_t n_agents_whole = 0;
};

class DiskStore {
 public:
  // Creates the folders if needed, takes the lock, scans, logs one line, starts the IO thread.
  // Throws Error{Io} when the directory cannot be created or is locked by another process.
  static std::unique_ptr<DiskStore> open_or_throw(DiskStoreOptions options);
  // Writes what is queued, then stops the IO thread.
  ~DiskStore();
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  const BlockKeyer& keyer() const { return *keyer_; }
  const BlockShape& shape() const { return options_.shape; }
  std::size_t encoded_block_bytes() const { return encoded_bytes(options_.codec, options_.shape); }

  // Agents whose manifests were read at start-up.
  std::vector<AgentRecord> take_loaded_manifests();

  // On disk, or queued to be.
  bool has(const Hash128& key) const;
  // On disk (durable).
  bool on_disk(const Hash128& key) const;
  // load() may find it: on disk, or a remote tier is attached (which may hold it; only a read
  // tells). Cheap: never asks the remote tier.
  bool may_load(const Hash128& key) const;
  // A buffer of the shape's raw size for put(), recycled from blocks already written when one
  // is spare (so spilling allocates nothing once warm); its contents are unspecified.
  std::vector<std::byte> take_raw_buffer();
  // Queues a block (raw bytes in the shape's layout) for encoding and writing. False when it
  // was dropped (paused after an error, or the queue is full) or is already stored/queued.
  // Never waits for IO.
  bool put(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
           std::vector<std::byte> raw);
  // Queues a block whose bytes stay where they are until written (LentBlock). False when it was
  // dropped (paused, or max_lent_blocks wait already) or is already stored/queued; `release`
  // has then run. Never waits for IO.
  bool put_lent(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                LentBlock block);
  // Lent blocks put_lent would accept now (0 while paused).
  std::size_t n_lent_room() const;
  // Lowers max_lent_blocks (the lender's memory they pin: a part of the host tier).
  void limit_lent_blocks(std::size_t n);
  // The lender goes away: drops the lent blocks still queued (counted as dropped at stop,
  // released) and waits for a batch being written, so no lent bytes are read after it returns.
  void drop_lent();
  SpillCodec codec() const { return options_.codec; }
  // put() that waits (until `deadline`) for room in the queue instead of dropping the block when
  // it is full. Never on the engine's serving path (benchmarks; a stop uses put_first_or_wait).
  bool put_or_wait(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                   std::vector<std::byte> raw, std::chrono::steady_clock::time_point deadline);
  // Blocks put() would accept now without dropping (queue room; 0 while paused).
  std::size_t n_queue_room() const;
  // Reads, verifies (header, key, parent, tokens hash, checksum) and decodes a block into `raw`.
  // False when it is missing (never written, evicted, collected) or bad; a bad file is counted
  // and removed. A good load makes the block most recently used (and touches its mtime). A
  // block not on disk is read from the remote tier when there is one (a bad one is counted in
  // rejected_corrupt and left there; Redis unavailable is a miss).
  bool load(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
            std::span<std::byte> raw);
  // State blocks (hybrid models' recurrent-state snapshots, disk_format.h): `key` is the keyer's
  // state_key of the KV block `parent` they end on, `prefix_hash` the keyed tokens hash of the
  // whole prefix. `bytes`: the state encoded with `codec` (state_codec.h), stored as they are
  // with the codec's id in the header. Queued and written like blocks (same batches, budget and
  // leaf-first retention: a state file names its KV block as parent, so it goes before that
  // block and never outlives it). Each written file also goes to the remote tier (its own key
  // domain there, RemoteStore::put_state). put_state: false when dropped (paused, queue full) or
  // already stored/queued; never waits for IO.
  bool put_state(const Hash128& key, const Hash128& parent, const Hash128& prefix_hash,
                 std::vector<std::byte> bytes, StateCodec codec = StateCodec::Exact);
  // Reads and verifies (header, kind, key, parent, prefix hash, size, checksum) a state block of
  // out.size() floats, in whatever codec its header names, from disk or, when not there, from
  // the remote tier, and decodes it into `out`. False when missing or bad; a bad file is counted
  // in rejected_corrupt and removed, a bad remote value is counted there and left (its tokens
  // are recomputed); one of a state codec this build does not know is counted in
  // rejected_version, logged with its file (or Redis) name, and left. Reads on the caller's
  // thread.
  bool load_state(const Hash128& key, const Hash128& parent, const Hash128& prefix_hash,
                  std::span<float> out);
  // load_state may find it: on disk, or a remote tier is attached. Cheap: never asks Redis.
  bool may_load_state(const Hash128& key) const { return may_load(key); }
  // For each state block key: on disk, or held by the remote tier (one round trip for those
  // not on disk; false while Redis is unavailable). load_state may still refuse one.
  std::vector<bool> find_states(std::span<const Hash128> keys);
  // load() into `out` encoded with `codec` (encoded_bytes of it): the file's payload as it is
  // when that is the store's codec, decoded when `codec` keeps the raw form, else re-encoded.
  bool load_as(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
               SpillCodec codec, std::span<std::byte> out);

  // Queues the agent's manifest (replacing its previous one) behind the blocks queued so far.
  // Its chain and pinned flag are what retention goes by: call it again after a pin changes.
  void put_manifest(const AgentRecord& record);
  // Queues removal of the agent's manifest and of the given block files.
  void erase(const std::string& tenant, const std::string& agent, std::vector<Hash128> blocks);
  // Bytes on disk of the chain's blocks.
  std::int64_t stored_bytes(const std::vector<Hash128>& chain) const;

  // Queues a collection of old blocks no manifest names (also runs every gc_interval_s).
  void collect_garbage();
  // Waits until the queue is empty and no manifest waits for a retry (tests).
  void flush();

  // Graceful stop (disk_store_drain.cpp). For shutdown, never on the engine's serving path.
  // The stop has a queue of its own, which the IO thread writes before the backlog (the queue
  // above, oldest first), in the order these calls fill it: agent by agent, most recently used
  // first, each agent's chain blocks (moved or put) and then its manifest, so a deadline drops
  // the backlog's blocks before the agents most likely to return.
  // Moves the block jobs with these keys from the backlog to the end of the stop's queue, in
  // the order given. Keys not in the backlog (written, being written, never queued, or moved
  // already) are skipped. Returns how many moved. Never waits for IO.
  std::int64_t write_first(std::span<const Hash128> keys);
  // put() onto the end of the stop's queue, waiting until `deadline` for room instead of
  // dropping: the queue may hold twice max_queue_bytes during a stop (the backlog's bound, and
  // as much again), and since the stop's queue is written first, room comes as its own blocks
  // are written, never behind the backlog. False when dropped (out of time, paused after an
  // error; counted like put's drops) or already stored/queued.
  bool put_first_or_wait(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                         std::vector<std::byte> raw,
                         std::chrono::steady_clock::time_point deadline);
  // put_manifest() onto the end of the stop's queue (behind the blocks queued there so far).
  void put_manifest_first(const AgentRecord& record);
  // Writes what is queued (the stop's queue first) until `deadline`; then drops the blocks
  // still queued (counted in n_dropped_at_stop) and writes the manifests and deletions left
  // (small), trying failed manifests once more at once. Returns when the queue is empty.
  DiskDrain drain(std::chrono::steady_clock::time_point deadline);
  DiskStoreStats stats() const;
  // How long background restores took, submit to done (the restorer observes; /metrics reads).
  LatencyHistogram& restore_time() { return restore_time_; }
  const LatencyHistogram& restore_time() const { return restore_time_; }

 private:
  LatencyHistogram restore_time_;
  struct Job;
  struct BlockFile {
    std::int64_t bytes = 0;
    std::int64_t last_use_ms = 0;  // unix ms: written, loaded, or the mtime found at start-up
    Hash128 parent;
    bool state = false;  // a state block
  };
  struct Manifest {
    std::vector<Hash128> chain;  // and its state blocks: retention names them alike
    bool pinned = false;
    bool written = false;  // on disk as last queued (a write since then succeeded, none was lost)
  };
  enum class Sweep { Budget, Orphans };
  explicit DiskStore(DiskStoreOptions options);
  void open_dir();
  void scan_blocks();
  void scan_manifests();
  // Counts a file that failed its check at start-up; a damaged one is deleted.
  void reject(FileCheck check, int dir_fd, const std::string& name);
  // Encode workers (disk_store_encode.cpp): each takes the oldest block waiting to be encoded
  // (the stop's queue first), within kMaxEncodedAheadBytes of encoded blocks not yet taken by
  // the IO thread, encodes it without the lock, releases a lent block's bytes at once and marks
  // it done for the IO thread.
  void encode_loop();
  Job* next_to_encode_locked();
  // The job is a block that must be encoded into the store's codec before it is written.
  bool needs_encode(const Job& job) const;
  // The IO thread took a block job out of the queue (caller holds mu_): the encode accounting.
  void taken_from_queue_locked(Job& job);
  // IO thread (disk_store_io.cpp).
  void io_loop();
  // Moves the next work into `batch`: consecutive block jobs from the front of the queue (one
  // durable batch), another job alone, or a manifest whose retry is due. False: none is ready.
  bool take_work_locked(std::vector<std::unique_ptr<Job>>& batch);
  bool idle_locked() const;
  // Whether the block was read from the remote tier (forgetting it): Redis has it already.
  bool came_from_remote(const Hash128& key);
  void run(Job& job);
  void write_blocks(std::vector<std::unique_ptr<Job>>& batch);
  void write_manifest(Job& job);
  void log_drops();
  void on_write_error(const std::string& what);
  // put_or_wait and put_first_or_wait: waits (until `deadline`) for the queued bytes to fit
  // `limit`, then appends the block's job to `into` (queue_ or first_).
  bool put_waiting(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash,
                   std::vector<std::byte> raw, std::chrono::steady_clock::time_point deadline,
                   std::size_t limit, std::deque<std::unique_ptr<Job>>& into);
  // A block job, counted as queued (caller holds mu_, checked room and pushes it to a queue).
  std::unique_ptr<Job> block_job_locked(const Hash128& key, const Hash128& parent,
                                        const Hash128& tokens_hash, std::vector<std::byte>& raw,
                                        LentBlock lent = {}, bool state = false);
  // A manifest job; the record becomes the agent's for retention (caller holds mu_ and pushes it).
  std::unique_ptr<Job> manifest_job_locked(const AgentRecord& record);
  // Takes the block jobs `which` selects out of both queues into `dropped`, counted as dropped
  // at stop (caller holds mu_ and destroys them without it: a lent block's release).
  void drop_blocks_locked(const std::function<bool(const Job&)>& which,
                          std::vector<std::unique_ptr<Job>>& dropped);
  // Counts a block put/put_lent could not queue (paused or full); true when the IO thread
  // should be woken to report it.
  bool count_drop_locked(bool paused);
  void keep_buffer_locked(std::vector<std::byte>& raw);
  void drop_bad(const Hash128& key);
  std::int64_t now_unix_ms() const;
  // Retention (disk_store_retention.cpp; IO thread, or the constructor before it starts).
  // Makes room for a new file of `incoming` bytes under max_bytes; false (nothing deleted) when
  // the blocks that must stay leave no room.
  bool make_room(std::int64_t incoming);
  // Deletes old blocks no manifest names.
  void collect_orphans();
  // Victims in deletion order (leaves first); Budget stops once `target_bytes` is reached.
  // Caller holds mu_.
  std::vector<Hash128> pick_victims(Sweep sweep, std::int64_t target_bytes) const;
  // Forgets the files at once (caller holds mu_); unlink_blocks deletes them (without mu_).
  void forget_files(const std::vector<Hash128>& keys);
  void unlink_blocks(const std::vector<Hash128>& keys);
  void on_over_budget();  // counts and pauses spilling like a write error
  std::string block_path(const Hash128& key) const;
  std::string manifest_name(const std::string& tenant, const std::string& agent) const;

  DiskStoreOptions options_;
  std::unique_ptr<BlockKeyer> keyer_;
  int lock_fd_ = -1, blocks_fd_ = -1, agents_fd_ = -1;
  std::vector<AgentRecord> loaded_;

  mutable std::mutex mu_;
  std::condition_variable wake_, idle_, room_;  // room_: the queue shrank (put_..._or_wait)
  std::deque<std::unique_ptr<Job>> queue_;  // the backlog, in arrival order
  std::deque<std::unique_ptr<Job>> first_;  // a graceful stop's queue: taken before queue_
  std::unordered_map<Hash128, BlockFile, Hash128Hasher> files_;
  std::unordered_map<std::string, Manifest> manifests_;  // by manifest file name
  std::unordered_set<Hash128, Hash128Hasher> pending_;
  // Blocks read from the remote tier and not written here since: a local write of one (a turn's
  // end spills the chain) does not send its bytes back to Redis. Bounded: cleared when large.
  std::unordered_set<Hash128, Hash128Hasher> from_remote_;
  std::size_t queued_bytes_ = 0;
  std::int64_t queued_blocks_ = 0;
  std::size_t queued_lent_ = 0;  // of queued_blocks_: lent
  struct ManifestRetry {
    AgentRecord record;
    std::int32_t n_attempts = 0;  // writes tried so far
    std::int64_t due_ms = 0;      // steady clock
  };
  std::unordered_map<std::string, ManifestRetry> retries_;  // by manifest file name
  bool retry_now_ = false;  // a drain ran out of time: retry at once
  std::vector<std::vector<std::byte>> spare_raw_;  // written blocks' buffers, for take_raw_buffer
  std::vector<std::vector<std::byte>> spare_encoded_;  // written blocks' encoded buffers
  // Encoding: block jobs waiting for an encoder, being encoded (of them lent), and the bytes of
  // encoded blocks the IO thread has not taken yet.
  std::int64_t n_encode_waiting_ = 0;
  std::int32_t n_encoding_ = 0, n_lent_encoding_ = 0;
  std::size_t encoded_ahead_bytes_ = 0;
  bool stop_encoders_ = false;
  std::condition_variable encode_wake_;  // a block to encode, room ahead, or the stop
  std::condition_variable encoded_;      // a lent block's encode finished (drop_lent waits)
  bool busy_ = false, stop_ = false;
  std::uint64_t n_work_done_ = 0;  // batches and jobs the IO thread finished (drop_lent waits)
  std::int64_t paused_until_ms_ = 0;
  DiskStoreStats stats_;
  // IO thread only.
  std::uint64_t tmp_serial_ = 0;
  std::vector<std::byte> payload_;  // the encoded block being written (non-native codecs)
  std::int64_t logged_dropped_ = 0, last_drop_log_ms_ = 0;  // written under mu_

  std::vector<std::thread> encoders_;
  std::thread io_;  // last: starts after everything above exists
};

}  // namespace akv
