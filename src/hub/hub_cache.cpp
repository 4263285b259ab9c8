#include "hub/hub_cache.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "base/error.h"

namespace akv {

namespace {

namespace fs = std::filesystem;

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// A temporary name beside `p` no other process or thread uses (links and refs are written by
// rename, and two pulls of one model may write the same ones).
std::string temp_name(const fs::path& p) {
  static std::atomic<std::uint64_t> counter{0};
  return p.string() + ".akv-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

void make_dirs(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) throw Error(ErrorKind::Io, p.string() + ": cannot create: " + ec.message() + " (set HF_HOME to a writable directory)");
}

}  // namespace

std::string HubCache::repo_dir(const std::string& repo_id) const {
  std::string name = "models--" + repo_id;
  for (std::size_t i = name.find('/'); i != std::string::npos; i = name.find('/', i)) name.replace(i, 1, "--");
  return root_ + "/" + name;
}

std::string HubCache::blob_path(const std::string& repo_id, const std::string& blob) const {
  return repo_dir(repo_id) + "/blobs/" + blob;
}

std::string HubCache::incomplete_path(const std::string& repo_id, const std::string& blob) const {
  return blob_path(repo_id, blob) + ".incomplete";
}

std::string HubCache::snapshot_dir(const std::string& repo_id, const std::string& commit) const {
  return repo_dir(repo_id) + "/snapshots/" + commit;
}

std::string HubCache::lock_path(const std::string& repo_id, const std::string& blob) const {
  const std::string repo = repo_dir(repo_id);
  return root_ + "/.locks/" + repo.substr(root_.size() + 1) + "/" + blob + ".lock";
}

void HubCache::create_dirs(const std::string& repo_id) const {
  for (const char* d : {"/blobs", "/snapshots", "/refs"}) make_dirs(repo_dir(repo_id) + d);
  make_dirs(fs::path(lock_path(repo_id, "x")).parent_path());
}

void HubCache::link(const std::string& repo_id, const std::string& commit, const std::string& path,
                    const std::string& blob) const {
  const fs::path target = fs::path(snapshot_dir(repo_id, commit)) / path;
  make_dirs(target.parent_path());
  // Relative, as huggingface_hub makes them: one "../" per folder below the repository's.
  std::string up = "../../";
  for (const char c : path)
    if (c == '/') up += "../";
  const fs::path tmp = temp_name(target);
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_symlink(up + "blobs/" + blob, tmp, ec);
  if (!ec) fs::rename(tmp, target, ec);
  if (ec) throw Error(ErrorKind::Io, target.string() + ": cannot link to its blob: " + ec.message());
}

void HubCache::write_ref(const std::string& repo_id, const std::string& revision, const std::string& commit) const {
  if (revision == commit) return;
  const fs::path ref = fs::path(repo_dir(repo_id)) / "refs" / revision;
  make_dirs(ref.parent_path());
  const fs::path tmp = temp_name(ref);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;  // no newline, as huggingface_hub writes it
    if (!out) throw Error(ErrorKind::Io, tmp.string() + ": cannot write");
  }
  std::error_code ec;
  fs::rename(tmp, ref, ec);
  if (ec) throw Error(ErrorKind::Io, ref.string() + ": cannot write: " + ec.message());
}

std::optional<std::string> HubCache::find_commit(const std::string& repo_id, const std::string& revision) const {
  std::ifstream in(fs::path(repo_dir(repo_id)) / "refs" / revision);
  std::string commit;
  if (in && std::getline(in, commit)) {
    while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' ')) commit.pop_back();
    if (is_commit_hash(commit)) return commit;
  }
  std::error_code ec;
  if (is_commit_hash(revision) && fs::is_directory(snapshot_dir(repo_id, revision), ec)) return revision;
  return std::nullopt;
}

std::vector<std::string> HubCache::snapshot_files(const std::string& repo_id, const std::string& commit) const {
  std::vector<std::string> out;
  const fs::path dir = snapshot_dir(repo_id, commit);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (fs::is_regular_file(it->path(), ec))  // follows the link: a dangling one is left out
      out.push_back(it->path().lexically_relative(dir).generic_string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace akv
