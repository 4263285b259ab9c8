#include "hub/file_digest.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "base/check.h"
#include "base/error.h"

namespace akv {

struct FileDigest::State {
  EVP_MD_CTX* ctx = nullptr;
};

FileDigest::FileDigest(DigestKind kind, std::int64_t total_bytes) : s_(std::make_unique<State>()) {
  s_->ctx = EVP_MD_CTX_new();
  AKV_CHECK(s_->ctx != nullptr, "EVP_MD_CTX_new failed");
  const EVP_MD* md = kind == DigestKind::Sha256 ? EVP_sha256() : EVP_sha1();
  AKV_CHECK(EVP_DigestInit_ex(s_->ctx, md, nullptr) == 1, "EVP_DigestInit_ex failed");
  if (kind == DigestKind::GitBlobSha1) {
    const std::string header = "blob " + std::to_string(total_bytes);
    update(header.c_str(), header.size() + 1);  // with its NUL
  }
}

FileDigest::~FileDigest() { EVP_MD_CTX_free(s_->ctx); }

void FileDigest::update(const void* data, std::size_t n) {
  AKV_CHECK(EVP_DigestUpdate(s_->ctx, data, n) == 1, "EVP_DigestUpdate failed");
}

std::string FileDigest::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  AKV_CHECK(EVP_DigestFinal_ex(s_->ctx, md, &n) == 1, "EVP_DigestFinal_ex failed");
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string digest_file(const std::string& path, DigestKind kind) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(ErrorKind::Io, path + ": cannot open: " + std::strerror(errno));
  const std::int64_t size = static_cast<std::int64_t>(in.tellg());
  in.seekg(0);
  FileDigest d(kind, size);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) d.update(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw Error(ErrorKind::Io, path + ": read failed");
  return d.hex();
}

}  // namespace akv
