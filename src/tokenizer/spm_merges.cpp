// SentencePiece scores -> ranked BPE merges.
#include "tokenizer/spm_merges.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "base/check.h"
#include "tokenizer/unicode.h"

namespace akv::tok {

std::vector<BpeMerge> merges_from_scores(std::span<const std::string> tokens,
                                         std::span<const float> scores) {
  AKV_CHECK(tokens.size() == scores.size(), "one score per token");
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) ids.emplace(tokens[id], static_cast<int32_t>(id));
  auto find = [&](std::string_view text) {
    auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  };

  std::vector<BpeMerge> merges;
  std::vector<BpeMerge> local;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string_view token = tokens[id];
    if (token.size() < 2 || find(token) != static_cast<int32_t>(id))
      continue;  // no split, or a repeated text
    local.clear();
    size_t split = 0;
    while (true) {
      split += static_cast<size_t>(utf8_char_len(static_cast<unsigned char>(token[split])));
      if (split >= token.size()) break;
      const int32_t left = find(token.substr(0, split));
      const int32_t right = left < 0 ? -1 : find(token.substr(split));
      if (right >= 0) local.push_back({left, right, static_cast<int32_t>(id)});
    }
    std::sort(local.begin(), local.end(), [](const BpeMerge& a, const BpeMerge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [&](const BpeMerge& a, const BpeMerge& b) {
    return scores[a.merged] > scores[b.merged];
  });
  return merges;
}

}  // namespace akv::tok
