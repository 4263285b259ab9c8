#include "hub/pull.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "hub/download_progress.h"
#include "hub/file_digest.h"
#include "hub/file_selection.h"
#include "hub/hub_cache.h"

namespace akv {

namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::Io, path + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// An exclusive hold on huggingface_hub's lock file for one blob (filelock takes the same flock),
// so two downloads of a file, ours or another tool's, never write its .incomplete at once.
class BlobLock {
 public:
  explicit BlobLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw Error(ErrorKind::Io, path + ": cannot open the download lock: " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) throw Error(ErrorKind::Io, path + ": cannot take the download lock: " + std::strerror(errno));
  }
  ~BlobLock() { ::close(fd_); }  // closing releases the lock
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_;
};

// One pull's state: the listing, the cache and the counters the workers share.
class Puller {
 public:
  Puller(const HubRef& ref, const HubSettings& s, const PullOptions& o, const RepoInfo& info)
      : ref_(ref), client_(s), cache_(s.cache_dir), options_(o), info_(info),
        progress_(ref.repo_id, o.progress_on_terminal) {}

  // Fetches `paths` (parallel, largest first) and links them into the snapshot.
  void fetch(std::vector<std::string> paths) {
    std::vector<const RepoFile*> files;
    for (const std::string& p : paths) {
      const RepoFile* f = info_.find(p);
      if (f == nullptr) throw Error(ErrorKind::NotFound, ref_.repo_id + ": the listing has no file '" + p + "'");
      if (f->cache_blob().empty()) throw Error(ErrorKind::BadFormat, ref_.repo_id + ": the listing gives '" + p + "' no blob id");
      files.push_back(f);
    }
    std::sort(files.begin(), files.end(), [](const RepoFile* a, const RepoFile* b) { return a->size > b->size; });
    std::vector<const RepoFile*> missing;
    for (const RepoFile* f : files) {
      std::error_code ec;
      if (fs::exists(cache_.blob_path(ref_.repo_id, f->cache_blob()), ec)) {
        cache_.link(ref_.repo_id, info_.commit, f->path, f->cache_blob());
      } else {
        missing.push_back(f);
        progress_.add_total(std::max<std::int64_t>(0, f->size));
      }
    }
    n_files_ += static_cast<int>(files.size());
    run_parallel(missing);
  }

  int n_files() const { return n_files_; }
  int n_downloaded() const { return n_downloaded_; }
  std::int64_t bytes() const { return bytes_; }

 private:
  void run_parallel(const std::vector<const RepoFile*>& files) {
    std::atomic<std::size_t> next{0};
    std::exception_ptr first_error;
    std::mutex mu;
    auto work = [&] {
      for (std::size_t i = next++; i < files.size(); i = next++) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (first_error) return;
        }
        try {
          fetch_one(*files[i]);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!first_error) first_error = std::current_exception();
        }
      }
    };
    std::vector<std::thread> threads;
    const std::size_t n = std::min<std::size_t>(files.size(), static_cast<std::size_t>(std::max(1, options_.parallel_files)));
    for (std::size_t t = 0; t < n; ++t) threads.emplace_back(work);
    for (std::thread& t : threads) t.join();
    if (first_error) std::rethrow_exception(first_error);
  }

  // Download to blobs/<id>.incomplete (resuming what is there), verify, rename, link.
  void fetch_one(const RepoFile& f) {
    const std::string blob = cache_.blob_path(ref_.repo_id, f.cache_blob());
    const std::string part = cache_.incomplete_path(ref_.repo_id, f.cache_blob());
    const BlobLock blob_lock(cache_.lock_path(ref_.repo_id, f.cache_blob()));
    std::error_code ec;
    if (fs::exists(blob, ec)) {  // another process fetched it while we waited for the lock
      progress_.add(std::max<std::int64_t>(0, f.size));
      cache_.link(ref_.repo_id, info_.commit, f.path, f.cache_blob());
      return;
    }
    const std::int64_t resumed = fs::exists(part, ec) ? static_cast<std::int64_t>(fs::file_size(part, ec)) : 0;
    progress_.add(resumed);
    std::atomic<std::int64_t> fetched{0};
    client_.download(ref_.repo_id, info_.commit, f, part, [&](std::int64_t n) {
      progress_.add(n);
      fetched += n;
    });
    verify(f, part);
    fs::rename(part, blob, ec);
    if (ec) throw Error(ErrorKind::Io, blob + ": cannot rename the finished download into place: " + ec.message());
    cache_.link(ref_.repo_id, info_.commit, f.path, f.cache_blob());
    std::lock_guard<std::mutex> lock(counters_mu_);
    ++n_downloaded_;
    bytes_ += fetched.load();
  }

  // The SHA-256 of an LFS file, the git blob id of a small one; a mismatch deletes the file.
  void verify(const RepoFile& f, const std::string& part) const {
    const bool lfs = f.sha256.has_value();
    if (!lfs && f.blob_id.size() != 40) return;  // nothing to check against
    const std::string got = digest_file(part, lfs ? DigestKind::Sha256 : DigestKind::GitBlobSha1);
    const std::string& want = lfs ? *f.sha256 : f.blob_id;
    if (got == want) return;
    std::error_code ec;
    fs::remove(part, ec);
    throw Error(ErrorKind::BadFormat, ref_.repo_id + "/" + f.path + ": the download is corrupted (" +
                                          (lfs ? "sha256 " : "git blob sha1 ") + got + ", the hub lists " + want +
                                          "); it was deleted: run the command again");
  }

  const HubRef& ref_;
  const HubClient client_;
  const HubCache cache_;
  const PullOptions& options_;
  const RepoInfo& info_;
  DownloadProgress progress_;
  std::mutex counters_mu_;
  int n_files_ = 0;
  int n_downloaded_ = 0;
  std::int64_t bytes_ = 0;
};

// The snapshot from the cache alone. Throws Error{NotFound} saying how to fetch it.
PullResult pull_offline(const HubRef& ref, const HubSettings& s, const std::string& why) {
  const HubCache cache(s.cache_dir);
  const std::optional<std::string> commit = cache.find_commit(ref.repo_id, ref.revision);
  const std::string name = ref.repo_id + (ref.quant.empty() ? "" : ":" + ref.quant) + "@" + ref.revision;
  if (!commit)
    throw Error(ErrorKind::NotFound, why + " and " + name + " is not in the cache " + s.cache_dir +
                                         ": run `agentkv pull " + name + "` where the hub is reachable");
  const std::vector<std::string> names = cache.snapshot_files(ref.repo_id, *commit);
  const FileSelection sel = select_model_files(names, ref.quant);
  std::vector<std::string> need = sel.files;
  const std::string dir = cache.snapshot_dir(ref.repo_id, *commit);
  if (!sel.index_file.empty())
    for (const std::string& shard : shards_of_index(read_all(dir + "/" + sel.index_file), dir + "/" + sel.index_file))
      need.push_back(shard);
  std::vector<std::string> missing;
  for (const std::string& f : need)
    if (!std::binary_search(names.begin(), names.end(), f)) missing.push_back(f);
  if (!missing.empty())
    throw Error(ErrorKind::NotFound, why + " and the cached " + name + " lacks " + join(missing) + ": run `agentkv pull " +
                                         name + "` where the hub is reachable");
  return {.dir = dir, .commit = *commit, .n_files = static_cast<int>(need.size()), .n_downloaded = 0,
          .bytes_downloaded = 0, .offline = true};
}

}  // namespace

PullResult pull_model(const HubRef& ref, const HubSettings& s, const PullOptions& options) {
  if (s.offline) return pull_offline(ref, s, "HF_HUB_OFFLINE is set");
  RepoInfo info;
  try {
    info = HubClient(s).model_info(ref.repo_id, ref.revision);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Io) throw;
    log_warn("{}; trying the cache", e.what());  // as huggingface_hub does when the hub is unreachable
    return pull_offline(ref, s, "the hub is unreachable");
  }
  std::vector<std::string> names;
  for (const RepoFile& f : info.files) names.push_back(f.path);
  const FileSelection sel = select_model_files(names, ref.quant);
  HubCache(s.cache_dir).create_dirs(ref.repo_id);
  PullResult r;
  {
    Puller puller(ref, s, options, info);
    puller.fetch(sel.files);
    if (!sel.index_file.empty()) {
      const std::string index = HubCache(s.cache_dir).snapshot_dir(ref.repo_id, info.commit) + "/" + sel.index_file;
      puller.fetch(shards_of_index(read_all(index), index));
    }
    r.n_files = puller.n_files();
    r.n_downloaded = puller.n_downloaded();
    r.bytes_downloaded = puller.bytes();
  }
  HubCache(s.cache_dir).write_ref(ref.repo_id, ref.revision, info.commit);
  r.commit = info.commit;
  r.dir = HubCache(s.cache_dir).snapshot_dir(ref.repo_id, info.commit);
  return r;
}

std::string resolve_model_dir(const std::string& value) {
  if (!looks_like_hub_ref(value)) return value;
  const HubRef ref = parse_hub_ref(value);
  const HubSettings s = hub_settings_from_env();
  PullResult r;
  try {
    r = pull_model(ref, s, {.parallel_files = 4, .progress_on_terminal = ::isatty(2) == 1});
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::NotFound) throw;
    throw Error(e.kind(), std::string(e.what()) + " (and there is no directory '" + value + "')");
  }
  log_info("{}: {} files at {} ({} downloaded, {} MiB{}) in {}", value, r.n_files, r.commit.substr(0, 12), r.n_downloaded,
           r.bytes_downloaded >> 20, r.offline ? ", offline" : "", r.dir);
  return r.dir;
}

}  // namespace akv
