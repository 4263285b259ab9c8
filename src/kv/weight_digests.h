// Digests of whole weight files for the model fingerprint: every byte is hashed (so a model of
// the same shape with other weights never shares KV), in parallel chunks through a read-only
// mmap, once per file version: the digests are cached in a small file of the KV directory,
// keyed by the file's identity, so a restart does not read the weights again.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/block_key.h"

namespace akv {

// What a cache entry is valid for: a file changed in place gets a new mtime and ctime (ctime
// cannot be set back by tools that preserve mtimes), a replaced file a new inode.
struct FileIdentity {
  std::string canonical_path;  // symlinks resolved (Hugging Face cache snapshots link to blobs)
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  std::uint64_t inode = 0;
  std::uint64_t device = 0;

  friend bool operator==(const FileIdentity&, const FileIdentity&) = default;
};

// Throws Error{NotFound or Io} naming the path.
FileIdentity file_identity(const std::string& path);

// The digest cache file in the KV directory, and its bounds: at most kMaxEntries entries (the
// files of the current model first, then the most recent others) and kMaxBytes bytes.
inline constexpr const char* kWeightDigestCacheName = "fingerprints";
inline constexpr std::size_t kWeightDigestCacheMaxEntries = 64;
inline constexpr std::size_t kWeightDigestCacheMaxBytes = std::size_t{1} << 20;

struct WeightDigestStats {
  std::int64_t n_files = 0;
  std::int64_t n_hashed = 0;     // files read and hashed this time
  std::int64_t n_cached = 0;     // files whose digest came from the cache
  std::uint64_t bytes_hashed = 0;
  double hash_seconds = 0;       // wall time of the hashing (0 when nothing was hashed)
  bool cache_damaged = false;    // a cache file was there but failed its checks (ignored)
  bool cache_written = false;    // the cache file was (re)written
};

// The XXH3-128 tree digest of each file's whole content, in the order given: the file in
// 64 MiB chunks, each chunk's digest, then a digest over (size, chunk digests), so the result
// does not depend on the number of threads. `cache_dir` ("" for none) holds the cache file: an
// entry is used only when its identity equals the file's now; a damaged or foreign cache file
// is ignored and rewritten (temp file, fsync, rename). A cache that cannot be written costs
// only the next start's hashing. `n_threads` <= 0: one per hardware thread, at most 8.
// Throws Error{NotFound or Io} naming a file that cannot be read.
std::vector<Hash128> weight_digests(std::span<const std::string> files, const std::string& cache_dir,
                                    WeightDigestStats* stats = nullptr, int n_threads = 0);

}  // namespace akv
