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
        if (job.kind != Job::Kind::Block && job.kind != Job::Kind::State) continue;
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
    if (job.kind == Job::Kind::Block || job.kind == Job::Kind::State) ++stats_.n_dropped;
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
  std::int64_t n_blocks = 0, n_states = 0, n_manifests = 0;
  for (const Job& job : batch) {
    switch (job.kind) {
      case Job::Kind::Block:
        // A block's bytes are a function of its key: one already there is the same block.
        conn.append({"SET", block_name(job.key), as_view(job.bytes), "NX"});
        conn.append({"ZADD", prefix_ + "blocks", now, job.key.hex()});
        n_commands += 2;
        ++n_blocks;
        break;
      case Job::Kind::State:  // keyed by its KV block's key and prefix: same bytes for a key
        conn.append({"SET", state_name(job.key), as_view(job.bytes), "NX"});
        conn.append({"ZADD", prefix_ + "states", now, job.key.hex()});
        n_commands += 2;
        ++n_states;
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
        for (const Hash128& k : job.blocks) {  // a KV or a state block: both names go
          conn.append({"DEL", block_name(k)});
          conn.append({"ZREM", prefix_ + "blocks", k.hex()});
          conn.append({"DEL", state_name(k)});
          conn.append({"ZREM", prefix_ + "states", k.hex()});
          n_commands += 4;
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
  stats_.n_states_written += n_states;
  stats_.n_manifests += n_manifests;
  return true;
}

bool RemoteStore::over_budget(RedisConnection& conn) {
  if (options_.max_bytes <= 0) return false;
  conn.append({"ZCARD", prefix_ + "blocks"});
  conn.append({"ZCARD", prefix_ + "states"});
  const RedisReply blocks = conn.next();
  const RedisReply states = blocks != nullptr ? conn.next() : nullptr;
  if (states == nullptr) {
    on_failure(conn.error());
    return false;
  }
  return reply_integer(blocks.get(), 0) * static_cast<long long>(options_.value_bytes) +
             reply_integer(states.get(), 0) * static_cast<long long>(options_.state_value_bytes) >
         options_.max_bytes;
}

// Past the budget: state blocks no manifest names, then KV blocks no manifest names (least
// recently used first), then the least recently used unpinned agents (manifest first, then
// their state blocks, then their chain's tail before its head), down to low_water * max_bytes.
// Blocks a pinned agent names stay. Another replica may evict at the same time: deleting a
// block twice is harmless, and a manifest naming a deleted block restores its prefix up to it.
void RemoteStore::evict(RedisConnection& conn) {
  if (options_.max_bytes <= 0) return;
  const auto fail = [&] { on_failure(conn.error()); };
  // Every block and state block, least recently used first; every agent, likewise (in pages:
  // bounded replies).
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
  std::vector<std::string> blocks, states, agents;
  if (!members(prefix_ + "blocks", blocks) || !members(prefix_ + "states", states) ||
      !members(prefix_ + "agents", agents))
    return fail();
  const auto vb = static_cast<long long>(options_.value_bytes);
  const auto sb = static_cast<long long>(options_.state_value_bytes);
  const long long stored = static_cast<long long>(blocks.size()) * vb + static_cast<long long>(states.size()) * sb;
  if (stored <= options_.max_bytes) return;
  const long long need =
      stored - static_cast<long long>(options_.low_water * static_cast<double>(options_.max_bytes));

  struct Agent {
    std::string hash_hex;
    AgentRecord record;
  };
  std::vector<Agent> records;
  std::unordered_map<std::string, std::int32_t> n_naming;  // block or state hex -> manifests naming it
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
    for (const auto* keys : {&agent.record.chain, &agent.record.states})
      for (const Hash128& k : *keys) {
        ++n_naming[k.hex()];
        if (agent.record.pinned) pinned.insert(k.hex());
      }
    records.push_back(std::move(agent));
  }
  const std::unordered_set<std::string> stored_blocks(blocks.begin(), blocks.end());
  const std::unordered_set<std::string> stored_states(states.begin(), states.end());
  struct Victim {
    std::string hex;
    bool state = false;
  };
  std::vector<Victim> victims;
  std::vector<std::string> agent_victims;
  std::unordered_set<std::string> chosen;
  long long freed = 0;
  const auto take = [&](const std::string& k, bool state) {
    victims.push_back({k, state});
    freed += state ? sb : vb;
  };
  for (const auto& [set, state] : {std::pair{&states, true}, std::pair{&blocks, false}})
    for (const std::string& k : *set) {
      if (freed >= need) break;
      if (!n_naming.contains(k) && chosen.insert(k).second) take(k, state);
    }
  for (const Agent& a : records) {  // least recently used first
    if (freed >= need) break;
    if (a.record.pinned) continue;
    agent_victims.push_back(a.hash_hex);
    // Its state blocks first: each ends on a block of its chain and is useless without it.
    const auto drop = [&](const std::vector<Hash128>& keys, const std::unordered_set<std::string>& in, bool state) {
      for (auto it = keys.rbegin(); it != keys.rend() && freed < need; ++it) {
        const std::string k = it->hex();
        if (--n_naming[k] == 0 && !pinned.contains(k) && in.contains(k) && chosen.insert(k).second) take(k, state);
      }
    };
    drop(a.record.states, stored_states, true);
    drop(a.record.chain, stored_blocks, false);
  }
  for (const std::string& a : agent_victims) {
    conn.append({"DEL", agent_name(*Hash128::from_hex(a))});
    conn.append({"ZREM", prefix_ + "agents", a});
  }
  for (const Victim& v : victims) {
    conn.append({"DEL", prefix_ + (v.state ? "state:" : "block:") + v.hex});
    conn.append({"ZREM", prefix_ + (v.state ? "states" : "blocks"), v.hex});
  }
  std::int64_t n_deleted = 0, n_states_deleted = 0;
  for (std::size_t i = 0; i < 2 * (agent_victims.size() + victims.size()); ++i) {
    const RedisReply r = conn.next();
    if (r == nullptr) return fail();
    if (i < 2 * agent_victims.size() || i % 2 != 0 || reply_integer(r.get(), 0) <= 0) continue;
    ++(victims[(i - 2 * agent_victims.size()) / 2].state ? n_states_deleted : n_deleted);
  }
  std::lock_guard lock(mu_);
  stats_.n_evicted += n_deleted;
  stats_.n_states_evicted += n_states_deleted;
  stats_.n_agents_evicted += static_cast<std::int64_t>(agent_victims.size());
}

}  // namespace akv
