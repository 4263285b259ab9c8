// The BPE model of HF tokenizer.json ("model": {"type": "BPE"}): vocab, ranked merges,
// byte_fallback / unk handling, ignore_merges, and a word cache. Encodes one pre-tokenized
// word at a time with a priority-queue merge over a linked list of symbols (O(n log n)).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace akv::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// How a BpeModel handles characters and words (the "model" flags of tokenizer.json).
struct BpeOptions {
  int32_t unk_id = -1;  // -1: characters the vocab cannot represent are dropped
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
};

// A merge of two adjacent symbols into `merged`; its index in the merge list is its rank.
struct BpeMerge {
  int32_t left, right, merged;
};

class BpeModel {
 public:
  // Parses the "model" object. Throws Error{BadFormat} naming `where` and the field (a merge
  // whose parts or result are not in the vocab, a non-integer id, ...).
  static std::unique_ptr<BpeModel> parse_or_throw(const nlohmann::json& model, const std::string& where);

  // From the token text of each id (an empty text is not looked up; of two equal texts the
  // lower id is found) and the merges in rank order. Throws Error{BadFormat} naming `where`
  // for a merge or unk id outside the vocab.
  static std::unique_ptr<BpeModel> build_or_throw(std::vector<std::string> tokens, std::span<const BpeMerge> merges,
                                                  const BpeOptions& options, const std::string& where);

  // Appends the ids of one word. Thread-safe (the cache is behind a mutex).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  // The plain reference path: no cache, an O(n^2) loop that merges the lowest-ranked adjacent
  // pair until none is left. Same output as encode_word; tests and benchmarks compare the two.
  void encode_word_reference(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> find(std::string_view token) const;
  // The token text of `id`, or nullptr if the vocab has no such id.
  const std::string* token_of(int32_t id) const;
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  int32_t unk_id() const { return unk_id_; }
  // The most bytes of a word one id can stand for, so encode_word(w) appends at least
  // w.size() / max_bytes_per_id() ids; 0 when unbounded (fused unknown characters).
  size_t max_bytes_per_id() const { return max_bytes_per_id_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Merge* find_merge(int32_t a, int32_t b) const;
  // byte_ids_ and max_bytes_per_id_, once the vocab and flags are set.
  void index_vocab();
  void encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;

  StringIdMap vocab_;
  std::vector<std::string> id_to_token_;  // "" with has_id_ false for gaps
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // ids of "<0xXX>" tokens, -1 if absent
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  size_t max_bytes_per_id_ = 0;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;

  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kMaxCacheEntries = 100000;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace akv::tok
