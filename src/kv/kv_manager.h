// The scheduler's only view of KV memory (architecture.md §3): match a sequence against the
// prefix cache, allocate blocks for the positions it is about to compute, commit (index) the
// blocks it has filled, release it. Owns the block pool and the prefix index; the scheduler
// never sees tiers or device pointers, only `KvSequence::block_table()` for the runner.
// Engine thread only. None of these calls allocate memory except PrefixIndex's hash map and a
// sequence's first growth of its block vector.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "kv/agent_index.h"
#include "kv/block_key.h"
#include "kv/block_pool.h"
#include "kv/host_store.h"
#include "kv/prefix_index.h"
#include "kv/retention.h"
#include "kv/state_codec.h"

namespace akv {

class DiskStore;
class RestoreJob;
class Restorer;

// The blocks one sequence holds, in position order. Owned by the engine's sequence; only
// KvManager changes it.
class KvSequence {
 public:
  std::span<const std::int32_t> block_table() const { return blocks_; }
  std::int32_t n_blocks() const { return static_cast<std::int32_t>(blocks_.size()); }
  bool is_open() const { return open_; }
  // Blocks this sequence loaded from the disk / host tier (over its life, preemptions included).
  std::int32_t n_restored_blocks() const { return n_restored_; }
  std::int32_t n_host_restored_blocks() const { return n_host_restored_; }

 private:
  friend class KvManager;
  std::vector<BlockId> blocks_;
  ChainKey tail_key_;           // key of blocks_[n_indexed_ - 1], or the namespace root
  std::int32_t n_indexed_ = 0;  // leading blocks that are in the prefix index
  bool open_ = false;
  // With tiers attached: tier keys (block_key.h) of blocks_[0, n_indexed_) and their root.
  std::vector<Hash128> keys_;
  Hash128 root_key_;
  std::int32_t n_restored_ = 0, n_host_restored_ = 0;
  Retention retention_ = Retention::Normal;
  // A background disk load for this sequence's prefix (restore_pending), until match uses it.
  std::shared_ptr<RestoreJob> restore_;
  bool restore_planned_ = false;
  std::int32_t n_early_restored_ = 0;  // of restore_'s leading blocks, written to the device ahead
  // Hybrid models: the state block that load brought (its position; 0: none), until release.
  std::vector<float> loaded_state_;
  std::int32_t loaded_state_pos_ = 0;
  // Hybrid models: the state block put_state wrote last for this sequence (its agent's record
  // names it) and its position; zero/0: none.
  Hash128 state_key_;
  std::int32_t state_pos_ = 0;
};

// Moves one block's KV between device memory and host bytes in Backend::read_kv_block's layout.
struct KvBlockIo {
  std::function<void(BlockId, std::span<std::byte>)> read;
  std::function<void(BlockId, std::span<const std::byte>)> write;
  // Deferred reads (Backend::start_read_kv_block, finish_reads): the block's bytes at the
  // start call, in the span once finish_reads returns. Empty: `read` at once, nothing to finish.
  std::function<void(BlockId, std::span<std::byte>)> start_read = nullptr;
  std::function<void()> finish_reads = nullptr;
  // A deferred read encoded with a codec (Backend::start_read_kv_block_encoded), finished by
  // finish_reads: demotions with a quantizing host codec go straight into their slot. Empty:
  // a raw read, encoded by the host tier at the finish.
  std::function<void(BlockId, SpillCodec, std::span<std::byte>)> start_read_encoded = nullptr;
  // Many start_read_encoded in one call (Backend::start_read_kv_blocks_encoded: one encode
  // launch on the CUDA backend). Empty: start_read_encoded once per block.
  std::function<void(std::span<const BlockId>, SpillCodec, std::span<const std::span<std::byte>>)>
      start_reads_encoded = nullptr;
  // Restores from encoded host bytes (Backend::write_kv_blocks): returns a fence, and the bytes
  // stay untouched until writes_done(fence). Empty: decode on the host and `write` each block.
  std::function<std::uint64_t(std::span<const EncodedKvBlock>)> write_blocks = nullptr;
  std::function<bool(std::uint64_t)> writes_done = nullptr;
  std::size_t block_bytes = 0;
  static KvBlockIo for_backend(Backend& backend, KvStorage& kv);
};

// What KvManager::spill_agents_to_disk queued and what it could not.
struct AgentSpill {
  std::int64_t n_agents = 0;   // agents with blocks not on disk yet (manifest queued again)
  std::int64_t n_moved = 0;    // chain blocks already queued, moved ahead of the backlog
  std::int64_t n_queued = 0;   // blocks queued for the disk (read from device or host memory)
  std::int64_t n_missing = 0;  // chain blocks from the first one no tier held (recomputed later)
  std::int64_t n_late = 0;     // chain blocks not queued: out of time or spilling paused
};

// Engine-thread time spent moving KV between tiers, cumulative (where a slow tier path shows).
// Each includes the others it causes (a restore's evictions, an eviction's finish).
struct KvTierTimes {
  double evict_s = 0;    // evictions: starting demotions and the copies of waiting spills
  double finish_s = 0;   // waiting for started copies out of the device and handing them over
  double restore_s = 0;  // restoring a prefix from the host tier and disk (match)
  double spill_s = 0;    // draining the disk spill queue between steps
};

struct KvUsage {
  std::int32_t n_blocks = 0;
  std::int32_t n_free = 0;    // on the free list
  std::int32_t n_cached = 0;  // unreferenced but indexed: evictable, reusable by a match
  std::int32_t n_used = 0;    // referenced by at least one sequence
  KvTierTimes tier;
};

// The tiers below device memory; any may be null. All must outlive the manager.
struct KvTiers {
  AgentIndex* agents = nullptr;
  HostStore* host = nullptr;
  DiskStore* disk = nullptr;
  Restorer* restorer = nullptr;  // loads from `disk` in the background; null: match loads
  // With a host tier and no disk: copy each newly indexed block into the host tier behind the
  // steps (the spill queue), so that evicting it later copies nothing. For a device backend,
  // where a returning agent's restore would otherwise first demote every block it takes; the
  // CPU backend's pool is host memory already (a second copy would only take room).
  bool host_write_through = false;
};

class KvManager {
 public:
  // Copies every layer's KV of block src into block dst (copy-on-write).
  using CopyBlockFn = std::function<void(BlockId src, BlockId dst)>;
  static CopyBlockFn backend_copier(Backend& backend, KvStorage& kv);

  KvManager(std::int32_t n_blocks, std::int32_t block_size, CopyBlockFn copy,
            ChainHashFn hash = xxh3_chain_hash);
  // With spills lent from the host tier, drops those the disk has not written yet
  // (DiskStore::drop_lent): a graceful stop writes them first (spill_agents_to_disk, drain).
  ~KvManager();
  KvManager(const KvManager&) = delete;
  KvManager& operator=(const KvManager&) = delete;

  // Opens `seq` (which holds nothing) in namespace `ns` and shares the longest cached prefix of
  // `tokens`: whole blocks by reference, then whole blocks the host and disk tiers hold (copied
  // into blocks of its own), then a partially matching block by copy. Returns how many leading
  // tokens now have their KV in seq's blocks; always < tokens.size(), so the caller still
  // computes at least the last token (its logits are needed). The blocks seq computes or
  // matches get at least `retention`.
  std::int32_t match(KvSequence& seq, std::span<const std::int32_t> tokens, std::string_view ns,
                     Retention retention = Retention::Normal);
  // Before match, for a sequence that holds nothing: true while the blocks of its prefix that
  // device memory lacks are being loaded from the host tier and the disk in the background (the
  // first call starts the load); call it again later. False when there is nothing (more) to wait
  // for: match now. Always false without a restorer.
  // Hybrid models (set_state_floats): `state_floor` >= 0 is the deepest position whose state the
  // caller holds already; the same load then also brings the deepest state block past it that
  // the disk or Redis may hold and the prefix's KV covers (load_state hands it over), so the
  // sequence waits until both are in. A load for a state block alone is started too.
  // While a load into the host tier runs, each call that finds another
  // RestoreJob::progress_step() of its leading blocks loaded writes them to the device ahead of
  // the match (a match of those tokens, released at once: they stay cached, counted for seq as
  // restored), so the device copies overlap the load and the match writes only the rest.
  bool restore_pending(KvSequence& seq, std::span<const std::int32_t> tokens, std::string_view ns,
                       std::int32_t state_floor = -1);
  // restore_pending was called for seq since it was last released: a later call only polls.
  bool restore_planned(const KvSequence& seq) const { return seq.restore_planned_; }
  // Grows seq's blocks to cover positions [0, n_positions), evicting cached blocks if needed.
  // All or nothing: false (and no change) when not enough blocks are free or evictable.
  bool allocate(KvSequence& seq, std::int32_t n_positions);
  // Indexes seq's blocks that are full within the first `n_computed` tokens (prompt and
  // generated alike), so a later request extending these tokens reuses them. A block equal to
  // one indexed earlier is swapped for it (the shared copy is kept once).
  void commit(KvSequence& seq, std::span<const std::int32_t> tokens, std::int32_t n_computed);
  // Drops seq's references; indexed blocks stay cached (evictable), others become free. Also
  // drops a pending background load. Fine on a sequence that holds nothing.
  void release(KvSequence& seq);

  // --- tiers and agents (optional; kv_tiers.cpp) ---------------------------------------------
  // Attaches the tiers; call once, before any match. With a disk tier, every newly indexed
  // block is copied out and queued for writing (commit). With a host tier, a block evicted from
  // the device is copied there first (straight into its host slot when the host codec keeps the
  // raw form). Match continues a device prefix hit with blocks from the host tier (written from
  // their slots by one io.write_blocks call, the slots pinned until its fence passes), then
  // from disk (loaded by the restorer once restore_pending started it; synchronously here only
  // without a restorer), and indexes them like computed ones.
  // The copies out of device memory (demotions, spills) are started where a block leaves or is
  // indexed and finished once at the end of match, allocate and commit, so a restore into a full
  // pool does not wait for the GPU per block; between calls nothing is pending.
  void attach_tiers(KvTiers tiers, KvBlockIo io);
  // Write-behind to the disk tier (or, with a host tier and no disk, write-through to the host
  // tier): commit queues each newly indexed block here instead of
  // copying it out at once (a 16K-token prompt is 1,000 blocks of 2 MiB for an 8B model: copying
  // them inside its steps would double its prefill), and the engine drains the queue between
  // steps, at most `max_blocks` per call (the copies of one call finished before it returns).
  // A queued block that is evicted first is copied out at eviction. Returns blocks spilled.
  std::int32_t spill_queued(std::int32_t max_blocks);
  // Blocks waiting in that queue, and whether spill_queued would copy any now (the disk queue
  // has room: while it has none, the engine waits for it rather than copying blocks to drop).
  std::size_t n_spills_queued() const { return spill_queue_.size(); }
  bool spills_ready() const { return !spill_queue_.empty() && spill_room() > 0; }
  // --- state blocks of hybrid models (kv_states.cpp) -------------------------------------------
  // A recurrent-state snapshot at the end of seq's block pos / block_size - 1 is a state block
  // keyed like that KV block (BlockKeyer::state_key of its tier key: tenant, model and prefix
  // included), stored in the state codec (exact unless set_state_codec). Its host copy is the
  // engine's snapshot store; the disk tier gets it here, written behind. Both do nothing
  // without a disk tier.
  // The size of one state (StateLayout::slot_floats; 0: the model has none, the default).
  void set_state_floats(std::int64_t n) { state_floats_ = n; }
  // How put_state encodes state blocks (--kv-state-codec; exact by default). Loads decode the
  // codec each block's header names.
  void set_state_codec(StateCodec codec) { state_codec_ = codec; }
  // Queues the state after tokens[0, pos) of seq (pos a multiple of the block size, its blocks
  // indexed) for the disk; an agent recorded from seq later names it.
  void put_state(KvSequence& seq, std::span<const std::int32_t> tokens, std::int32_t pos,
                 std::span<const float> state);
  // The deepest position p with floor < p <= limit, a multiple of the block size within seq's
  // indexed blocks, whose state block the disk (or the remote tier under it) holds and that
  // loads and verifies; `state` (its size is the state's) then holds it. 0 when none. The state
  // block is keyed by seq's KV block at p, so it is only found with the KV of the same prefix.
  // With a restorer it never reads: only the state block seq's background load brought
  // (restore_pending with a state floor) is used. Without one it reads the disk and Redis on
  // the caller's thread (tests).
  std::int32_t load_state(const KvSequence& seq, std::span<const std::int32_t> tokens,
                          std::int32_t floor, std::int32_t limit, std::span<float> state);
  // --- agents (kv_agents.cpp): the one writer of the agent index and the manifests ----------
  // Records a finished request of `agent` in namespace `ns`: seq's indexed chain becomes the
  // agent's last state (n_tokens of it have KV); queues its manifest. A pinned agent's new
  // chain gets High retention. Call before release.
  // With a disk tier, first queues (as far as the disk queue has room, at most 64 MiB a call)
  // the chain's blocks the disk lacks, dropped when its queue was full, so the manifest follows
  // them.
  void remember_agent(const KvSequence& seq, std::string_view ns, std::string_view agent,
                      std::int64_t n_tokens, bool hit);
  // The agents API's changes; each returns the agent's record after it (for delete: as it was),
  // nullopt for an unknown agent (or without an agent index).
  // Pin: persisted in the manifest, the chain's blocks High in device memory and the host tier.
  // Unpin: persisted; each block of the chain goes back to Normal unless another pinned agent's
  // chain holds it (then it stays High).
  std::optional<AgentRecord> set_agent_pinned(std::string_view ns, std::string_view agent,
                                              bool pinned);
  // Drops the chain's unreferenced device blocks and host copies (evict_keys); disk stays.
  std::optional<AgentRecord> evict_agent(std::string_view ns, std::string_view agent);
  // Forgets the agent: its manifest and the blocks no other agent's chain names leave every
  // tier (device blocks a running sequence holds stay until released); blocks it pinned and
  // others share get their retention recomputed as for unpin.
  std::optional<AgentRecord> erase_agent(std::string_view ns, std::string_view agent);
  // Drops the blocks with these keys from device memory where no sequence holds them (last key
  // first, so a chain's tail goes before its head), and from the host tier; their disk copies
  // stay. Returns how many device blocks were dropped.
  std::int32_t evict_keys(std::span<const Hash128> keys);
  // Sets the retention of the blocks with these keys in device memory and the host tier
  // (pinning or unpinning an agent's chain).
  void set_retention(std::span<const Hash128> keys, Retention retention);
  // Graceful stop, once nothing else calls the manager (kv_agents.cpp): agent by agent, most
  // recently used first, puts the chain's blocks not on disk onto the disk tier's stop queue,
  // ahead of its write-behind backlog (DiskStore::write_first for those queued already, in
  // chain order; the others read from device memory or the host tier, put_first_or_wait,
  // waiting for room until `deadline`), then the agent's manifest right behind them. A chain
  // stops at its first block no tier holds.
  AgentSpill spill_agents_to_disk(std::chrono::steady_clock::time_point deadline);

  std::int32_t block_size() const { return pool_.block_size(); }
  // Blocks an allocate may still obtain (free + evictable).
  std::int32_t n_available() const { return pool_.n_free() + index_.n_evictable(); }
  KvUsage usage() const;
  // Tests inspect it. attach_tiers takes its evict listener (a host tier would chain there).
  PrefixIndex& index() { return index_; }
  const BlockPool& pool() const { return pool_; }

 private:
  BlockId take_block();         // free or evicted; ref count 1. Caller checked n_available().
  void acquire(BlockId block);  // one more reference to an existing block
  void drop(BlockId block);     // one reference less; at 0 cached if indexed, else freed

  // Tiers (kv_tiers.cpp). What the tiers need to know of an indexed device block.
  struct TierMeta {
    Hash128 key, parent, tokens_hash;
    std::int32_t depth = 0;  // index in its chain
  };
  std::int32_t restore_from_tiers(KvSequence& seq, std::span<const std::int32_t> tokens,
                                  std::int32_t matched, std::int32_t limit);
  // Where a block to restore comes from: seq's background load (raw bytes), the host tier
  // (its slot, pinned) or a synchronous disk load into buffer_ (no restorer).
  enum class TierSource { None, Job, Host, DiskNow };
  // The encoded bytes of the block with `meta` (searching seq's background load from `cursor`
  // on) and their codec; empty with None.
  std::span<const std::byte> find_in_tiers(KvSequence& seq, const TierMeta& meta,
                                           TierSource& from, SpillCodec& codec,
                                           std::int32_t& cursor);
  // Writes restore_batch_ through io_.write_blocks and keeps what it reads until its fence.
  void flush_restores(const std::shared_ptr<RestoreJob>& job);
  // Unpins the host blocks and drops the loads of restores whose fence has passed.
  void release_restores();
  void note_key(BlockId block, const TierMeta& meta);
  // Both start a copy out of the device; finish_tier_reads() waits for them and hands the bytes
  // to the host tier and the disk tier.
  void on_device_evict(BlockId block);
  void spill(BlockId block, const TierMeta& meta);
  // Whether the host tier holds `block`'s bytes, is receiving them, or now starts copying them
  // into a slot (demote_into_slot); false when it can do none of these.
  bool copy_to_host(BlockId block, const TierMeta& meta);
  HostBlockMeta host_meta_of(BlockId block, const TierMeta& meta) const;
  // Whether demotions copy straight into a reserved host slot (the host codec keeps the raw
  // form, or the backend encodes on the way out).
  bool host_slot_demotions() const;
  // Starts copying `block` into a reserved host slot for `key`; false when slots are not used
  // (host_slot_demotions) or none can be had. `to_disk`: lend it to the disk tier once there.
  bool demote_into_slot(BlockId block, const Hash128& key, const HostBlockMeta& meta, bool to_disk);
  // Queues the host tier's copy of a block for the disk (DiskStore::put_lent), pinned until
  // the disk tier has written or dropped it.
  void lend_to_disk(const Hash128& key, const Hash128& parent, const Hash128& tokens_hash);
  // Spills the disk queue would take now (lent blocks when the host tier feeds the disk); with
  // a host tier and no disk, no bound (host_writes_through).
  std::size_t spill_room() const;
  // KvTiers::host_write_through with a host tier, no disk tier and slot demotions: a spill is a
  // copy into the host tier (the same copy as a demotion, with the block kept on the device).
  bool host_writes_through() const;
  void queue_spill(BlockId block);
  // Spills seq's indexed blocks the disk lacks, up to the disk queue's room (remember_agent).
  void spill_missing(const KvSequence& seq);
  // Reads the block with `key` from device memory or the host tier into `raw` (shutdown);
  // false when neither holds it.
  bool read_for_disk(const Hash128& key, std::span<std::byte> raw, TierMeta& meta);
  // One agent of spill_agents_to_disk (kv_agents.cpp); n_agents is 1 when its manifest was queued.
  AgentSpill spill_chain_first(const AgentRecord& agent,
                               std::chrono::steady_clock::time_point deadline);
  void finish_tier_reads();
  // Starts the encoded reads demote_into_slot queued (one io_.start_reads_encoded call). Called
  // before anything writes a device block (copy_, io_.write, io_.write_blocks) and by
  // finish_tier_reads, so a queued block is read as it was at its eviction.
  void start_encoded_reads();
  bool demoting(const Hash128& key) const;
  // The state blocks an agent recorded from seq names (kv_states.cpp).
  std::vector<Hash128> state_keys_of(const KvSequence& seq) const;
  // Agents (kv_agents.cpp): High where a pinned agent's chain holds the key, else Normal.
  void recompute_pinned_retention(std::span<const Hash128> keys);

  BlockPool pool_;
  PrefixIndex index_;
  CopyBlockFn copy_;

  AgentIndex* agents_ = nullptr;
  HostStore* host_ = nullptr;
  DiskStore* disk_ = nullptr;
  Restorer* restorer_ = nullptr;
  std::int64_t state_floats_ = 0;  // set_state_floats
  StateCodec state_codec_ = StateCodec::Exact;
  KvBlockIo io_;
  std::unique_ptr<BlockKeyer> own_keyer_;  // without a disk tier (no secret to share)
  const BlockKeyer* keyer_ = nullptr;      // non-null once tiers are attached
  std::vector<TierMeta> block_meta_;  // [n_blocks] of an indexed block, with tiers (key 0: none)
  bool demote_on_evict_ = true;       // evict_keys turns it off: those blocks leave memory
  bool host_write_through_ = false;   // KvTiers::host_write_through
  // With both tiers, when the host copy is exact or in the disk's codec: spills go through the
  // host tier (write-through) and the disk writes the host copy (DiskStore::put_lent).
  bool host_feeds_disk_ = false;
  std::unordered_map<Hash128, BlockId, Hash128Hasher> by_key_;
  std::vector<std::byte> buffer_;  // one raw block on its way in
  // Copies started and not yet finished. A demotion copies into its reserved host slot, or into
  // demote_buffers_ (kept for reuse, so demoting allocates nothing once warm) when the host tier
  // encodes it; a spill owns its disk buffer. At most max_pending_ buffered demotions and
  // spills (64 MiB of blocks each): past that they are finished early.
  struct PendingDemotion {
    Hash128 key;
    HostBlockMeta meta;
    std::int32_t buffer = -1;  // into demote_buffers_; -1: copied straight into a reserved slot
    bool to_disk = false;      // a write-through spill: lent to the disk tier once published
  };
  struct PendingSpill {
    TierMeta meta;
    std::vector<std::byte> raw;
  };
  std::vector<PendingDemotion> demoting_;
  std::vector<std::vector<std::byte>> demote_buffers_;
  std::size_t n_demote_buffers_ = 0;  // of demote_buffers_ in use by demoting_
  std::vector<PendingSpill> spilling_;
  // Encoded demotions queued and not started yet (start_encoded_reads): their blocks and slots.
  std::vector<BlockId> encode_blocks_;
  std::vector<std::span<std::byte>> encode_slots_;
  std::size_t max_pending_ = 1;
  // Indexed blocks waiting to be spilled (spill_queued), oldest first; spill_queued_[b] marks
  // block b as waiting with block_meta_[b]'s key.
  std::deque<BlockId> spill_queue_;
  std::vector<bool> spill_waiting_;
  // Restores whose host bytes the device may still be reading: the host blocks they pinned and
  // the background load they read from, released once the fence has passed (oldest first).
  struct PendingRestore {
    std::uint64_t fence = 0;
    std::vector<Hash128> pinned;
    std::shared_ptr<RestoreJob> job;
  };
  std::deque<PendingRestore> restoring_;
  // restore_from_tiers' scratch: the chain's blocks to restore, their host slots (pinned up
  // front; empty: not in the host tier), the batch being built and the keys it pinned.
  // restore_pending's early device restore of a running load's leading blocks (kv_tiers.cpp).
  void restore_early(KvSequence& seq, std::span<const std::int32_t> tokens, std::string_view ns);
  std::vector<TierMeta> restore_metas_;
  std::vector<std::span<const std::byte>> restore_slots_;
  std::vector<SpillCodec> restore_codecs_;  // of restore_slots_
  std::vector<EncodedKvBlock> restore_batch_;
  std::vector<Hash128> restore_pins_;
  KvTierTimes tier_times_;
};

}  // namespace akv
