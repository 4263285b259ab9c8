#include "server/stop_matcher.h"

#include <algorithm>

namespace akv {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
  for (const std::string& s : stops_) max_len_ = std::max(max_len_, s.size());
}

StopMatcher::Result StopMatcher::feed(std::string_view delta) {
  Result r;
  if (stops_.empty()) {
    r.text = delta;
    return r;
  }
  pending_ += delta;
  // Earliest full match wins (ties: the longer stop sequence).
  std::size_t best_pos = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    const std::size_t pos = pending_.find(s);
    if (pos != std::string::npos && (pos < best_pos || (pos == best_pos && s.size() > best->size()))) {
      best_pos = pos;
      best = &s;
    }
  }
  if (best != nullptr) {
    r.text = pending_.substr(0, best_pos);
    r.matched = *best;
    pending_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop sequence.
  std::size_t hold = 0;
  for (const std::string& s : stops_) {
    for (std::size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n) {
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  r.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return r;
}

std::string StopMatcher::flush() {
  std::string rest = std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace akv
