// Stop sequences over streamed text: feed text deltas, get back the text that is safe to send
// (never a piece that could still become a stop sequence) and whether one matched. The match
// itself is never sent (api-notes §1.2).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace akv {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string text;                    // safe to emit now
    std::optional<std::string> matched;  // the stop sequence that matched; stop generating
  };
  Result feed(std::string_view delta);
  // End of generation: whatever was held back is plain text.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  std::size_t max_len_ = 0;
};

}  // namespace akv
