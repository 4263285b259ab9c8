// DiskStore's retention: block files past the budget are deleted in a leaf-first LRU over the
// chains the block headers' parent keys form (the radix-tree order): a block is a candidate only
// once no stored block names it as parent, so a chain loses its tail before its head and the
// longest restorable prefixes stay. Among the candidates, blocks no manifest names go first,
// then the least recently used. Old blocks no manifest names are collected by age.
#include <unistd.h>

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "base/log.h"
#include "kv/disk_store.h"
#include "kv/disk_store_internal.h"

namespace akv {

using disk_store_detail::now_ms;

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
      if (it->second.state) --stats_.n_states;
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
