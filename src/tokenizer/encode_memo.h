// The ids of long text segments (the text between added tokens) a caller encoded before, so that
// encoding a conversation again with a new turn re-encodes only the segments that changed. A
// segment's ids depend only on its text and on whether it starts the input (Tokenizer encodes
// each segment alone), so reusing them gives exactly encode()'s ids. One memo per conversation;
// not thread-safe (its owner serializes the encodes that use it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace akv {

class EncodeMemo {
 public:
  // Shorter segments are encoded every time (cheaper than remembering them).
  static constexpr std::size_t kMinSegmentBytes = 256;
  // A segment no encode used for this many encodes in a row is forgotten.
  static constexpr int kMaxIdleEncodes = 2;

  // Bytes held (segment texts and 4 per id).
  std::size_t n_bytes() const { return n_bytes_; }
  std::size_t n_segments() const { return entries_.size(); }
  // Segments of the last encode found here, and their ids.
  std::size_t last_hits() const { return last_hits_; }
  std::size_t last_hit_ids() const { return last_hit_ids_; }

  // For Tokenizer: one encode is begin(), find()/put() per long segment, end().
  void begin();
  // Appends the segment's remembered ids to `ids`; false when it has none.
  bool find(std::string_view segment, bool at_input_start, std::vector<std::int32_t>& ids);
  // Remembers a segment's complete ids.
  void put(std::string_view segment, bool at_input_start, std::vector<std::int32_t> ids);
  // Forgets the segments idle for more than kMaxIdleEncodes encodes.
  void end();

 private:
  struct Entry {
    std::vector<std::int32_t> ids;
    int idle = 0;  // encodes since it was last used; -1: used by the current one
  };
  static std::string key(std::string_view segment, bool at_input_start);
  std::unordered_map<std::string, Entry> entries_;  // key(): a flag byte + the segment
  std::size_t n_bytes_ = 0;
  std::size_t last_hits_ = 0, last_hit_ids_ = 0;
};

}  // namespace akv
