#include "tokenizer/encode_memo.h"

namespace akv {

std::string EncodeMemo::key(std::string_view segment, bool at_input_start) {
  std::string k;
  k.reserve(segment.size() + 1);
  k += at_input_start ? '1' : '0';
  k += segment;
  return k;
}

void EncodeMemo::begin() {
  last_hits_ = last_hit_ids_ = 0;
}

bool EncodeMemo::find(std::string_view segment, bool at_input_start, std::vector<std::int32_t>& ids) {
  const auto it = entries_.find(key(segment, at_input_start));
  if (it == entries_.end()) return false;
  it->second.idle = -1;
  ids.insert(ids.end(), it->second.ids.begin(), it->second.ids.end());
  ++last_hits_;
  last_hit_ids_ += it->second.ids.size();
  return true;
}

void EncodeMemo::put(std::string_view segment, bool at_input_start, std::vector<std::int32_t> ids) {
  std::string k = key(segment, at_input_start);
  const std::size_t bytes = k.size() + sizeof(std::int32_t) * ids.size();
  const auto [it, added] = entries_.try_emplace(std::move(k), Entry{std::move(ids), -1});
  if (added) n_bytes_ += bytes;
  else it->second.idle = -1;
}

void EncodeMemo::end() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    e.idle = e.idle < 0 ? 0 : e.idle + 1;
    if (e.idle > kMaxIdleEncodes) {
      n_bytes_ -= it->first.size() + sizeof(std::int32_t) * e.ids.size();
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace akv
