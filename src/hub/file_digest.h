// Digests the hub names files by: SHA-256 (LFS files) and the git blob SHA-1 (small files kept
// in git), as lowercase hex. OpenSSL does the hashing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace akv {

enum class DigestKind { Sha256, GitBlobSha1 };

// An incremental digest. For GitBlobSha1 the total size must be known up front (git hashes
// "blob <size>\0" before the bytes).
class FileDigest {
 public:
  FileDigest(DigestKind kind, std::int64_t total_bytes);
  ~FileDigest();
  FileDigest(const FileDigest&) = delete;
  FileDigest& operator=(const FileDigest&) = delete;
  void update(const void* data, std::size_t n);
  std::string hex();  // finishes the digest; call once

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// The digest of a file's bytes. Throws Error{Io} naming the file when it cannot be read.
std::string digest_file(const std::string& path, DigestKind kind);

}  // namespace akv
