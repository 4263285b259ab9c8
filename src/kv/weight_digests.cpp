#include "kv/weight_digests.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/thread_pool.h"
#include "kv/store_dir.h"

namespace akv {

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kChunkBytes = std::size_t{64} << 20;
constexpr std::size_t kMaxPathBytes = 4096;
// Cache file: magic | u32 version | u32 n entries | entries | u64 XXH3-64 of all before it.
// Entry: u32 path bytes | path | u64 size | i64 mtime ns | i64 ctime ns | u64 inode | u64 device
// | u64 digest hi | u64 digest lo. The version names the digest scheme too (chunk size).
constexpr char kMagic[8] = {'A', 'K', 'V', 'D', 'I', 'G', 'S', 'T'};
constexpr std::uint32_t kVersion = 1;

struct CacheEntry {
  FileIdentity id;
  Hash128 digest;
};

class Out {
 public:
  template <typename T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    bytes.append(p, sizeof v);
  }
  std::string bytes;
};

class In {
 public:
  explicit In(std::string_view b) : b_(b) {}
  template <typename T>
  T get() {
    T v{};
    if (sizeof v > b_.size() - at_) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string str(std::size_t n) {
    if (n > b_.size() - at_) {
      ok_ = false;
      return {};
    }
    std::string s(b_.substr(at_, n));
    at_ += n;
    return s;
  }
  bool ok() const { return ok_; }
  std::size_t at() const { return at_; }

 private:
  std::string_view b_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

std::string encode_cache(const std::vector<CacheEntry>& entries) {
  Out o;
  o.bytes.append(kMagic, sizeof kMagic);
  o.put(kVersion);
  o.put(static_cast<std::uint32_t>(entries.size()));
  for (const CacheEntry& e : entries) {
    o.put(static_cast<std::uint32_t>(e.id.canonical_path.size()));
    o.bytes += e.id.canonical_path;
    o.put(e.id.size);
    o.put(e.id.mtime_ns);
    o.put(e.id.ctime_ns);
    o.put(e.id.inode);
    o.put(e.id.device);
    o.put(e.digest.hi);
    o.put(e.digest.lo);
  }
  o.put(static_cast<std::uint64_t>(XXH3_64bits(o.bytes.data(), o.bytes.size())));
  return std::move(o.bytes);
}

// The entries, or nullopt when the bytes are not a whole, valid cache file of this version.
std::optional<std::vector<CacheEntry>> decode_cache(std::string_view bytes) {
  if (bytes.size() < sizeof kMagic + 16 || bytes.size() > kWeightDigestCacheMaxBytes) return std::nullopt;
  const std::size_t body = bytes.size() - 8;
  std::uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + body, 8);
  if (sum != XXH3_64bits(bytes.data(), body)) return std::nullopt;
  In in(bytes.substr(0, body));
  if (in.str(sizeof kMagic) != std::string_view(kMagic, sizeof kMagic)) return std::nullopt;
  if (in.get<std::uint32_t>() != kVersion) return std::nullopt;
  const auto n = in.get<std::uint32_t>();
  if (!in.ok() || n > kWeightDigestCacheMaxEntries) return std::nullopt;
  std::vector<CacheEntry> out(n);
  for (CacheEntry& e : out) {
    const auto len = in.get<std::uint32_t>();
    if (!in.ok() || len == 0 || len > kMaxPathBytes) return std::nullopt;
    e.id.canonical_path = in.str(len);
    e.id.size = in.get<std::uint64_t>();
    e.id.mtime_ns = in.get<std::int64_t>();
    e.id.ctime_ns = in.get<std::int64_t>();
    e.id.inode = in.get<std::uint64_t>();
    e.id.device = in.get<std::uint64_t>();
    e.digest.hi = in.get<std::uint64_t>();
    e.digest.lo = in.get<std::uint64_t>();
  }
  if (!in.ok() || in.at() != body) return std::nullopt;
  return out;
}

// The cache's entries; empty when there is none. `damaged` when a file was there but unusable.
std::vector<CacheEntry> read_cache(const std::string& path, bool& damaged) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return {};
  std::string bytes;
  try {
    if (fs::file_size(path, ec) <= kWeightDigestCacheMaxBytes && !ec) bytes = read_file_or_throw(path);
  } catch (const Error&) {
  }
  std::optional<std::vector<CacheEntry>> entries = decode_cache(bytes);
  damaged = !entries.has_value();
  return entries ? std::move(*entries) : std::vector<CacheEntry>{};
}

bool write_cache(const std::string& dir, const std::string& bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  return write_file_durably(dir, kWeightDigestCacheName, std::as_bytes(std::span(bytes)));
}

// One chunk of one file to hash.
struct ChunkJob {
  std::size_t file = 0;  // index into the files being hashed
  std::size_t chunk = 0;
};

// Hashes `maps` whole: chunk digests in parallel, then one digest per file over them.
std::vector<Hash128> hash_files(const std::vector<MappedFile>& maps, int n_threads) {
  std::vector<ChunkJob> jobs;
  std::vector<std::vector<XXH128_hash_t>> chunk_digests(maps.size());
  for (std::size_t f = 0; f < maps.size(); ++f) {
    const std::size_t n_chunks = (maps[f].size() + kChunkBytes - 1) / kChunkBytes;
    chunk_digests[f].resize(n_chunks);
    for (std::size_t c = 0; c < n_chunks; ++c) jobs.push_back({f, c});
  }
  // Each thread takes the next chunk until none is left, so a file's short last chunk or a
  // slow page-in does not leave the others idle.
  std::atomic<std::size_t> next{0};
  const auto run = [&](std::int64_t, std::int64_t) {
    for (std::size_t j = next++; j < jobs.size(); j = next++) {
      const ChunkJob& job = jobs[j];
      const auto bytes = maps[job.file].bytes();
      const std::size_t at = job.chunk * kChunkBytes;
      const std::size_t n = std::min(kChunkBytes, bytes.size() - at);
      // Asks for the whole chunk at once: large reads from a cold disk instead of page faults'
      // small readahead (the mapping and the chunk offsets are page-aligned).
      ::madvise(const_cast<std::uint8_t*>(bytes.data() + at), n, MADV_WILLNEED);
      chunk_digests[job.file][job.chunk] = XXH3_128bits(bytes.data() + at, n);
    }
  };
  if (n_threads <= 0)
    n_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  n_threads = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(n_threads), std::max<std::size_t>(jobs.size(), 1)));
  if (n_threads > 1) {
    ThreadPool pool(n_threads);
    pool.parallel_for(n_threads, 1, run);
  } else {
    run(0, 1);
  }
  std::vector<Hash128> out;
  for (std::size_t f = 0; f < maps.size(); ++f) {
    XXH3_state_t state;
    XXH3_128bits_reset(&state);
    const std::uint64_t size = maps[f].size();
    XXH3_128bits_update(&state, &size, sizeof size);
    for (const XXH128_hash_t& d : chunk_digests[f]) {
      XXH3_128bits_update(&state, &d.high64, sizeof d.high64);
      XXH3_128bits_update(&state, &d.low64, sizeof d.low64);
    }
    const XXH128_hash_t h = XXH3_128bits_digest(&state);
    out.push_back({h.high64, h.low64});
  }
  return out;
}

}  // namespace

FileIdentity file_identity(const std::string& path) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(path, ec);
  if (ec)
    throw Error(ec == std::errc::no_such_file_or_directory ? ErrorKind::NotFound : ErrorKind::Io,
                path + ": cannot resolve: " + ec.message());
  struct stat st {};
  if (::stat(canonical.c_str(), &st) != 0)
    throw Error(errno == ENOENT ? ErrorKind::NotFound : ErrorKind::Io,
                path + ": cannot stat: " + std::strerror(errno));
  return {.canonical_path = canonical.string(),
          .size = static_cast<std::uint64_t>(st.st_size),
          .mtime_ns = std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec,
          .ctime_ns = std::int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec,
          .inode = static_cast<std::uint64_t>(st.st_ino),
          .device = static_cast<std::uint64_t>(st.st_dev)};
}

std::vector<Hash128> weight_digests(std::span<const std::string> files, const std::string& cache_dir,
                                    WeightDigestStats* stats, int n_threads) {
  WeightDigestStats s;
  s.n_files = static_cast<std::int64_t>(files.size());
  const std::string cache_path = cache_dir.empty() ? "" : cache_dir + "/" + kWeightDigestCacheName;
  std::vector<CacheEntry> cached = read_cache(cache_path, s.cache_damaged);

  std::vector<FileIdentity> ids;
  std::vector<Hash128> digests(files.size());
  std::vector<std::size_t> to_hash;  // indexes into files
  for (std::size_t i = 0; i < files.size(); ++i) {
    ids.push_back(file_identity(files[i]));
    const auto hit = std::find_if(cached.begin(), cached.end(), [&](const CacheEntry& e) { return e.id == ids[i]; });
    if (hit != cached.end()) {
      digests[i] = hit->digest;
      ++s.n_cached;
    } else {
      to_hash.push_back(i);
    }
  }

  if (!to_hash.empty()) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<MappedFile> maps;
    for (std::size_t i : to_hash) {
      maps.push_back(MappedFile::open_or_throw(ids[i].canonical_path));
      // The file changed between stat and open: hash what is mapped, but do not cache it.
      if (maps.back().size() != ids[i].size) ids[i].size = ~std::uint64_t{0};
      s.bytes_hashed += maps.back().size();
    }
    const std::vector<Hash128> hashed = hash_files(maps, n_threads);
    for (std::size_t k = 0; k < to_hash.size(); ++k) digests[to_hash[k]] = hashed[k];
    s.n_hashed = static_cast<std::int64_t>(to_hash.size());
    s.hash_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  if (!cache_dir.empty() && (!to_hash.empty() || s.cache_damaged)) {
    // This model's files first, then the other entries until the bound.
    std::vector<CacheEntry> next;
    for (std::size_t i = 0; i < files.size(); ++i)
      if (ids[i].size != ~std::uint64_t{0} && ids[i].canonical_path.size() <= kMaxPathBytes &&
          next.size() < kWeightDigestCacheMaxEntries)
        next.push_back({ids[i], digests[i]});
    for (const CacheEntry& e : cached) {
      if (next.size() >= kWeightDigestCacheMaxEntries) break;
      const bool superseded = std::any_of(next.begin(), next.end(), [&](const CacheEntry& n) {
        return n.id.canonical_path == e.id.canonical_path;
      });
      if (!superseded) next.push_back(e);
    }
    s.cache_written = write_cache(cache_dir, encode_cache(next));
  }
  if (stats != nullptr) *stats = s;
  return digests;
}

}  // namespace akv
