// The Hugging Face hub's HTTP API, the two calls a model download needs: the repository's
// file list at a revision (`/api/models/ORG/REPO/revision/REV?blobs=true`) and one file
// (`/ORG/REPO/resolve/COMMIT/PATH`, following redirects to the CDN, resuming with Range).
// Errors are Error values whose message says what to do (token, id, revision). Thread-safe:
// every call opens its own connections.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace akv {

struct HubSettings {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT
  std::string token;                                // HF_TOKEN ("" : anonymous)
  std::string cache_dir;                            // HF_HUB_CACHE, else $HF_HOME/hub
  bool offline = false;                             // HF_HUB_OFFLINE=1: the cache only
  int max_attempts = 5;                             // per file, resuming after each failure
  int retry_delay_ms = 1000;                        // doubled after each failed attempt
};

// From the environment as huggingface_hub reads it (HF_ENDPOINT, HF_TOKEN or the token file
// $HF_HOME/token, HF_HUB_CACHE / HF_HOME, HF_HUB_OFFLINE).
HubSettings hub_settings_from_env();

struct RepoFile {
  std::string path;                 // "model-00001-of-00002.safetensors"
  std::int64_t size = -1;           // bytes; -1 when the listing did not say
  std::string blob_id;              // git blob SHA-1 (small files)
  std::optional<std::string> sha256;  // LFS files: the content's SHA-256
  // The name of its blob in the cache, as huggingface_hub names it: the SHA-256 for LFS files,
  // the git blob id otherwise.
  const std::string& cache_blob() const { return sha256 ? *sha256 : blob_id; }
};

struct RepoInfo {
  std::string commit;  // the revision resolved to a commit ("sha")
  std::vector<RepoFile> files;
  const RepoFile* find(const std::string& path) const;
};

class HubClient {
 public:
  explicit HubClient(HubSettings settings) : s_(std::move(settings)) {}

  // Throws Error: NotFound (no such repository or revision: the message says to check the id,
  // or to set HF_TOKEN for a private one), InvalidArgument (gated or refused: accept the terms
  // on the model page and set HF_TOKEN), Io (unreachable, with the endpoint).
  RepoInfo model_info(const std::string& repo_id, const std::string& revision) const;

  // Appends `file` at `commit` to `dest` from its current size on (Range), until `expected_size`
  // bytes (when >= 0) are there; retries dropped connections, resuming. `on_bytes(n)` is called
  // as bytes arrive (any thread). Throws Error: NotFound / InvalidArgument as above, Io
  // (network, after the retries; a failed write names `dest`; a full disk says so),
  // BadFormat (more bytes than expected).
  void download(const std::string& repo_id, const std::string& commit, const RepoFile& file, const std::string& dest,
                const std::function<void(std::int64_t)>& on_bytes) const;

  const HubSettings& settings() const { return s_; }

 private:
  HubSettings s_;
};

// "a b/c.json" -> "a%20b/c.json": each path segment percent-encoded, slashes kept.
std::string url_encode_path(const std::string& path);

}  // namespace akv
