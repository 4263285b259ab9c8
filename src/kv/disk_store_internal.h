// Private to disk_store.cpp and disk_store_io.cpp: the IO thread's job and small helpers.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kv/disk_store.h"

namespace akv {

// Destroyed outside the store's lock: a lent block's release runs in the destructor.
struct DiskStore::Job {
  Job() = default;
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  ~Job() {
    if (lent.release) lent.release();
  }
  enum class Kind { Block, Manifest, Erase, CollectGarbage } kind = Kind::Block;
  Hash128 key, parent, tokens_hash;
  std::vector<std::byte> raw;  // a block's raw bytes (a state block's encoded bytes), empty when lent
  bool state = false;          // Block: a state block (disk_format.h), written as it is
  StateCodec state_codec = StateCodec::Exact;  // a state block's codec, named in its header
  LentBlock lent;  // empty once encoded: its bytes were released then
  // Block: None: written as it is (native, state, or lent in the store's codec); Waiting for an
  // encode worker; Running (a worker encodes it: nobody else touches the job); Done: `encoded`
  // holds the payload.
  enum class Encode : std::uint8_t { None, Waiting, Running, Done } encode = Encode::None;
  std::vector<std::byte> encoded;
  AgentRecord record;           // Manifest; Erase uses tenant and agent
  std::int32_t n_attempts = 0;  // Manifest: writes tried before this one
  std::vector<Hash128> blocks;  // Erase
  bool remote_too = false;      // Erase: an agent's (not a damaged local file's): the remote tier's too
};

namespace disk_store_detail {

inline constexpr std::size_t kMaxSpareBuffers = 32;
// Keys loaded from the remote tier that are remembered (DiskStore::from_remote_), at most.
inline constexpr std::size_t kMaxFromRemote = std::size_t{1} << 20;
// Encoded blocks the IO thread has not taken yet, at most (the encode workers wait past it).
inline constexpr std::size_t kMaxEncodedAheadBytes = std::size_t{64} << 20;

// Steady clock, ms (pauses, retries, log intervals).
inline std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline std::string errno_text() {
  return std::strerror(errno);
}

// Block file reads for loads (disk_store_read.cpp): the payload in pieces of kReadPieceBytes,
// each checksummed (payload_checksum) right after it is read, while it is in the cache.
inline constexpr std::size_t kReadPieceBytes = std::size_t{256} << 10;
// Reads a file of exactly header.size() + payload.size() bytes: the first part into `header`,
// the rest straight into `payload` (a load's destination: no copy through a buffer);
// `payload_sum` = payload_checksum(payload). False when it cannot be read or has another size.
bool read_split_file(const std::string& path, std::span<std::byte> header, std::span<std::byte> payload,
                     std::uint64_t& payload_sum);
// Reads the whole file into `out` (resized; its capacity is reused); `payload_sum` =
// payload_checksum of its bytes past `header_bytes`. False on any error.
bool read_file_checksummed(const std::string& path, std::size_t header_bytes, std::vector<std::byte>& out,
                           std::uint64_t& payload_sum);

// Recency survives restarts as the file's mtime; a failure only costs recency.
inline void set_mtime(int dir_fd, const std::string& name, std::int64_t unix_ms) {
  const timespec times[2] = {{.tv_sec = 0, .tv_nsec = UTIME_OMIT},
                             {.tv_sec = unix_ms / 1000, .tv_nsec = (unix_ms % 1000) * 1000000}};
  ::utimensat(dir_fd, name.c_str(), times, 0);
}

}  // namespace disk_store_detail
}  // namespace akv
