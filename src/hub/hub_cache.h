// The huggingface_hub cache layout, shared with Python tools (transformers, vLLM, hf CLI):
//   CACHE/models--ORG--REPO/blobs/<sha256 or git blob id>     file contents
//   CACHE/models--ORG--REPO/snapshots/<commit>/<path>         relative symlinks to the blobs
//   CACHE/models--ORG--REPO/refs/<branch or tag>              the commit it pointed to
// A blob being downloaded is `<blob>.incomplete` (huggingface_hub's name, so either tool can
// resume the other's). Blobs appear only complete and verified (rename).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace akv {

class HubCache {
 public:
  explicit HubCache(std::string root) : root_(std::move(root)) {}

  std::string repo_dir(const std::string& repo_id) const;  // CACHE/models--ORG--REPO
  std::string blob_path(const std::string& repo_id, const std::string& blob) const;
  std::string incomplete_path(const std::string& repo_id, const std::string& blob) const;
  std::string snapshot_dir(const std::string& repo_id, const std::string& commit) const;
  // CACHE/.locks/models--ORG--REPO/<blob>.lock: huggingface_hub's lock file for one blob.
  std::string lock_path(const std::string& repo_id, const std::string& blob) const;

  // Creates blobs/, snapshots/ and refs/. Throws Error{Io} naming the directory.
  void create_dirs(const std::string& repo_id) const;
  // snapshots/<commit>/<path> -> ../../blobs/<blob> (replaced atomically). Throws Error{Io}.
  void link(const std::string& repo_id, const std::string& commit, const std::string& path, const std::string& blob) const;
  // refs/<revision> = commit (not for a revision that is the commit itself). Throws Error{Io}.
  void write_ref(const std::string& repo_id, const std::string& revision, const std::string& commit) const;

  // The commit a revision names in the cache: refs/<revision>, or the revision itself when it
  // is a commit with a snapshot. nullopt when the cache does not know it.
  std::optional<std::string> find_commit(const std::string& repo_id, const std::string& revision) const;
  // Paths of the snapshot's files whose targets exist ("" for none), sorted.
  std::vector<std::string> snapshot_files(const std::string& repo_id, const std::string& commit) const;

  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

}  // namespace akv
