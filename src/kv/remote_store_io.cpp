// RemoteStore's writer thread: pipelined batches of block, manifest and erase jobs in queue
// order (a manifest reaches Redis after the blocks queued before it), kept and retried while
// Redis is away; and the budget's eviction.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "base/log.h"
#include "kv/disk_format.h"
#include "kv/remote_store.h"
#include "kv/store_dir.h"

namespace akv {

namespace {

constexpr std::size_t kMaxBatchJobs = 64;
constexpr std::size_t kMaxBatchBytes = std::size_t{16} << 20;
constexpr long long kPage = 4096;  // sorted-set members per ZRANGE reply

std::string_view as_view(const std::vector<std::byte>& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void RemoteStore::write_loop() {
  std::unique_ptr<RedisConnection> conn;
  std::vector<Job> batch;
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty() || evict_requested_; });
    if (stop_ && queue_.empty()) break;
    std::size_t bytes = 0;
    while (!queue_.empty() && batch.size() < kMaxBatchJobs && (batch.empty() || bytes < kMaxBatchBytes)) {
      bytes += queue_.front().bytes.size();
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    const bool evict_asked = evict_requested_;
    busy_ = true;
    lock.unlock();

    const std::int64_t wait_ms = unavailable_until_ms_.load(std::memory_order_relaxed) - steady_ms();
    if (conn == nullptr && wait_ms <= 0) {
      std::string error;
      conn = RedisConnection::connect_or_null(options_.url, options_.timeout_ms, error);
      if (conn == nullptr)
        on_failure(error);
      else
        publish_secret(*conn);
    }
    bool ok = conn != nullptr && write_batch(*conn, batch);
    if (conn != nullptr && conn->broken()) conn.reset();
    if (ok && (evict_asked || over_budget(*conn))) evict(*conn);
    if (conn != nullptr && conn->broken()) conn.reset();

    lock.lock();
    busy_ = false;
    evict_requested_ = false;
    if (ok || stop_) {
      for (Job& job : batch) {
        if (job.kind != Job::Kind::Block) continue;
        queued_bytes_ -= job.bytes.size();
        --queued_blocks_;
        if (!ok) ++stats_.n_dropped;
      }
      batch.clear();
    } else {
      // Redis is away: keep the batch (in order) and try again once reconnecting is allowed.
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) queue_.push_front(std::move(*it));
      batch.clear();
      const std::int64_t ms = std::max<std::int64_t>(
          1, unavailable_until_ms_.load(std::memory_order_relaxed) - steady_ms());
      idle_.notify_all();
      wake_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stop_; });
    }
    idle_.notify_all();
  }
  // Stopping with Redis away: what is left is dropped.
  for (Job& job : queue_)
    if (job.kind == Job::Kind::Block) ++stats_.n_dropped;
  queue_.clear();
  queued_bytes_ = 0;
  queued_blocks_ = 0;
  idle_.notify_all();
}

// A Redis that restarted empty has lost the fleet's secret: the first replica to reconnect puts
// its own back, so replicas started later join the same key space (never replaces one).
void RemoteStore::publish_secret(RedisConnection& conn) {
  const std::vector<std::byte> bytes = encode_store_secret(secret_);
  conn.append({"SET", "akv:secret", as_view(bytes), "NX"});
  const RedisReply r = conn.next();
  if (r == nullptr) on_failure(conn.error());
}

bool RemoteStore::write_batch(RedisConnection& conn, std::vector<Job>& batch) {
  const std::string now = std::to_string(now_unix_ms());
  std::size_t n_commands = 0;
  std::int64_t n_blocks = 0, n_manifests = 0;
  for (const Job& job : batch) {
    switch (job.kind) {
      case Job::Kind::Block:
        // A block's bytes are a function of its key: one already there is the same block.
        conn.append({"SET", block_name(job.key), as_view(job.bytes), "NX"});
        conn.append({"ZADD", prefix_ + "blocks", now, job.key.hex()});
        n_commands += 2;
        ++n_blocks;
        break;
      case Job::Kind::Manifest:
        conn.append({"SET", agent_name(job.key), as_view(job.bytes)});
        conn.append({"ZADD", prefix_ + "agents", std::to_string(job.last_use_ms), job.key.hex()});
        n_commands += 2;
        ++n_manifests;
        break;
      case Job::Kind::Erase:
        if (!job.key.is_zero()) {
          conn.append({"DEL", agent_name(job.key)});
          conn.append({"ZREM", prefix_ + "agents", job.key.hex()});
          n_commands += 2;
        }
        for (const Hash128& k : job.blocks) {
          conn.append({"DEL", block_name(k)});
          conn.append({"ZREM", prefix_ + "blocks", k.hex()});
          n_commands += 2;
        }
        break;
    }
  }
  std::string refused;
  for (std::size_t i = 0; i < n_commands; ++i) {
    const RedisReply r = conn.next();
    if (r == nullptr) {
      on_failure(conn.error());
      return false;
    }
    if (reply_is_error(r.get()) && refused.empty()) refused = std::string(reply_string(r.get()));
  }
  if (!refused.empty()) {
    // Redis answered but refused (out of memory, read-only replica, ...): not retried.
    on_failure("Redis refused a write: " + refused);
    return true;
  }
  on_success();
  std::lock_guard lock(mu_);
  stats_.n_written += n_blocks;
  stats_.n_manifests += n_manifests;
  return true;
}

bool RemoteStore::over_budget(RedisConnection& conn) {
  if (options_.max_bytes <= 0) return false;
  conn.append({"ZCARD", prefix_ + "blocks"});
  const RedisReply r = conn.next();
  if (r == nullptr) {
    on_failure(conn.error());
    return false;
  }
  return reply_integer(r.get(), 0) * static_cast<long long>(options_.value_bytes) > options_.max_bytes;
}

// Past the budget: blocks no manifest names (least recently used first), then the chains of
// the least recently used unpinned agents (manifest first, a chain's tail before its head),
// down to low_water * max_bytes. Blocks a pinned agent names stay. Another replica may evict at
// the same time: deleting a block twice is harmless, and a manifest naming a deleted block
// restores its prefix up to it.
void RemoteStore::evict(RedisConnection& conn) {
  if (options_.max_bytes <= 0) return;
  const auto fail = [&] { on_failure(conn.error()); };
  // Every block, least recently used first; every agent, likewise (in pages: bounded replies).
  const auto members = [&](const std::string& set, std::vector<std::string>& out) {
    for (long long start = 0;; start += kPage) {
      conn.append({"ZRANGE", set, std::to_string(start), std::to_string(start + kPage - 1)});
      const RedisReply r = conn.next();
      if (r == nullptr) return false;
      if (r->type != REDIS_REPLY_ARRAY) return true;
      for (std::size_t i = 0; i < r->elements; ++i) out.emplace_back(reply_string(r->element[i]));
      if (r->elements < static_cast<std::size_t>(kPage)) return true;
    }
  };
  std::vector<std::string> blocks, agents;
  if (!members(prefix_ + "blocks", blocks) || !members(prefix_ + "agents", agents)) return fail();
  const long long vb = static_cast<long long>(options_.value_bytes);
  const auto target = static_cast<long long>(options_.low_water * static_cast<double>(options_.max_bytes)) / vb;
  if (static_cast<long long>(blocks.size()) * vb <= options_.max_bytes) return;
  std::size_t need = blocks.size() - static_cast<std::size_t>(std::max(0LL, target));

  struct Agent {
    std::string hash_hex;
    AgentRecord record;
  };
  std::vector<Agent> records;
  std::unordered_map<std::string, std::int32_t> n_naming;  // block hex -> manifests naming it
  std::unordered_set<std::string> pinned;
  for (const std::string& a : agents) {
    const std::optional<Hash128> h = Hash128::from_hex(a);
    if (!h) continue;
    conn.append({"GETRANGE", agent_name(*h), "0", std::to_string(kMaxManifestBytes - 1)});
    const RedisReply r = conn.next();
    if (r == nullptr) return fail();
    const std::string_view bytes = reply_string(r.get());
    Agent agent{.hash_hex = a, .record = {}};
    if (parse_manifest(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
                       options_.fingerprint, agent.record) != FileCheck::Ok)
      continue;  // gone or damaged: names nothing
    for (const Hash128& k : agent.record.chain) {
      ++n_naming[k.hex()];
      if (agent.record.pinned) pinned.insert(k.hex());
    }
    records.push_back(std::move(agent));
  }
  const std::unordered_set<std::string> stored(blocks.begin(), blocks.end());
  std::vector<std::string> victims, agent_victims;
  std::unordered_set<std::string> chosen;
  for (const std::string& b : blocks) {
    if (victims.size() >= need) break;
    if (!n_naming.contains(b)) {
      victims.push_back(b);
      chosen.insert(b);
    }
  }
  for (const Agent& a : records) {  // least recently used first
    if (victims.size() >= need) break;
    if (a.record.pinned) continue;
    agent_victims.push_back(a.hash_hex);
    for (auto it = a.record.chain.rbegin(); it != a.record.chain.rend() && victims.size() < need; ++it) {
      const std::string k = it->hex();
      if (--n_naming[k] == 0 && !pinned.contains(k) && stored.contains(k) && chosen.insert(k).second)
        victims.push_back(k);
    }
  }
  for (const std::string& a : agent_victims) {
    conn.append({"DEL", agent_name(*Hash128::from_hex(a))});
    conn.append({"ZREM", prefix_ + "agents", a});
  }
  for (const std::string& k : victims) {
    conn.append({"DEL", prefix_ + "block:" + k});
    conn.append({"ZREM", prefix_ + "blocks", k});
  }
  std::int64_t n_deleted = 0;
  for (std::size_t i = 0; i < 2 * (agent_victims.size() + victims.size()); ++i) {
    const RedisReply r = conn.next();
    if (r == nullptr) return fail();
    if (i >= 2 * agent_victims.size() && i % 2 == 0) n_deleted += reply_integer(r.get(), 0) > 0 ? 1 : 0;
  }
  std::lock_guard lock(mu_);
  stats_.n_evicted += n_deleted;
  stats_.n_agents_evicted += static_cast<std::int64_t>(agent_victims.size());
}

}  // namespace akv
