#include "kv/store_dir.h"

#include <xxhash.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/error.h"
#include "base/log.h"

namespace akv {

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kSecretFileBytes = kKeySecretBytes + sizeof(std::uint64_t);
constexpr std::size_t kMaxSecretFileBytes = 4096;  // read no further: anything longer is damage

std::string errno_text() {
  return std::strerror(errno);
}

enum class SecretFile { Missing, Ok, WithoutChecksum, Damaged };

std::uint64_t secret_checksum(const KeySecret& s) {
  return XXH3_64bits(s.data(), s.size());
}

std::vector<std::byte> encode_secret(const KeySecret& s) {
  return encode_store_secret(s);
}

// Reads DIR/secret into `out`; `n_bytes` is the file's size (up to kMaxSecretFileBytes + 1).
SecretFile read_secret(const std::string& path, KeySecret& out, std::size_t& n_bytes) {
  const auto unreadable = [&] {
    return Error(ErrorKind::Io, "cannot read " + path + ": " + errno_text() +
                                    " (it keys every block and agent manifest of the KV directory: fix its "
                                    "permissions, or move the directory aside to start an empty one)");
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return SecretFile::Missing;
    throw unreadable();
  }
  std::vector<std::byte> bytes(kMaxSecretFileBytes + 1);
  n_bytes = 0;
  while (n_bytes < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + n_bytes, bytes.size() - n_bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const Error e = unreadable();
      ::close(fd);
      throw e;
    }
    if (n == 0) break;
    n_bytes += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (n_bytes != kSecretFileBytes && n_bytes != kKeySecretBytes) return SecretFile::Damaged;
  std::memcpy(out.data(), bytes.data(), out.size());
  if (n_bytes == kKeySecretBytes) return SecretFile::WithoutChecksum;
  std::uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + out.size(), sizeof sum);
  return sum == secret_checksum(out) ? SecretFile::Ok : SecretFile::Damaged;
}

// Whether `folder` holds any file but leftovers of interrupted writes.
bool holds_files(const std::string& folder) {
  DIR* d = ::opendir(folder.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != ".." && name.find(".tmp") == std::string_view::npos) {
      found = true;
      break;
    }
  }
  ::closedir(d);
  return found;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Moves secret, blocks/ and agents/ into a new DIR/unusable-<unix seconds>[-n]/; returns it.
std::string move_aside(const std::string& dir) {
  const auto now_s = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  std::string aside;
  for (int n = 0;; ++n) {
    aside = dir + "/unusable-" + std::to_string(now_s);
    if (n > 0) aside.append("-").append(std::to_string(n));
    if (::mkdir(aside.c_str(), 0700) == 0) break;
    if (errno != EEXIST) throw Error(ErrorKind::Io, "cannot create " + aside + ": " + errno_text());
  }
  for (const char* name : {"secret", "blocks", "agents"}) {
    const std::string from = dir + "/" + name;
    if (::access(from.c_str(), F_OK) != 0) continue;
    if (::rename(from.c_str(), (aside + "/" + name).c_str()) != 0)
      throw Error(ErrorKind::Io, "cannot move " + from + " to " + aside + ": " + errno_text());
  }
  fsync_dir(dir);
  return aside;
}

}  // namespace

std::vector<std::byte> encode_store_secret(const KeySecret& s) {
  std::vector<std::byte> out(kSecretFileBytes);
  std::memcpy(out.data(), s.data(), s.size());
  const std::uint64_t sum = secret_checksum(s);
  std::memcpy(out.data() + s.size(), &sum, sizeof sum);
  return out;
}

std::optional<KeySecret> parse_store_secret(std::span<const std::byte> bytes) {
  if (bytes.size() != kSecretFileBytes) return std::nullopt;
  KeySecret s{};
  std::memcpy(s.data(), bytes.data(), s.size());
  std::uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + s.size(), sizeof sum);
  if (sum != secret_checksum(s)) return std::nullopt;
  return s;
}

void adopt_store_secret(const std::string& dir, const KeySecret& shared) {
  const std::string path = dir + "/secret";
  KeySecret local{};
  std::size_t n_bytes = 0;
  const SecretFile state = read_secret(path, local, n_bytes);
  if ((state == SecretFile::Ok || state == SecretFile::WithoutChecksum) && local == shared) {
    if (state == SecretFile::Ok) return;
  } else if (state != SecretFile::Missing || holds_files(dir + "/blocks") || holds_files(dir + "/agents")) {
    const std::string aside = move_aside(dir);
    log_warn(
        "KV directory {}: its key secret is not the fleet's (the remote tier's), so its blocks and agent manifests "
        "can never match the fleet's keys; moved the secret, blocks/ and agents/ to {} and started an empty store "
        "with the fleet's secret. Delete {} once it is not needed",
        dir, aside, aside);
    for (const char* sub : {"/blocks", "/agents"}) {
      std::error_code ec;
      fs::create_directories(dir + sub, ec);
      if (ec) throw Error(ErrorKind::Io, "cannot create " + dir + sub + ": " + ec.message());
    }
  }
  if (!write_file_durably(dir, "secret", encode_secret(shared)))
    throw Error(ErrorKind::Io, "cannot write " + path + ": " + errno_text());
}

std::optional<std::string> find_store_dir_problem(const std::string& dir) {
  for (const char* sub : {"", "/blocks", "/agents"}) {
    const std::string path = dir + sub;
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) return "cannot create " + path + ": " + ec.message();
    if (!fs::is_directory(path, ec)) return path + " is not a directory";
    const std::string probe = path + "/.write-probe-" + std::to_string(::getpid()) + ".tmp";
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return "cannot create files in " + path + ": " + errno_text();
    ::close(fd);
    ::unlink(probe.c_str());
  }
  return std::nullopt;
}

KeySecret load_or_create_store_secret(const std::string& dir) {
  const std::string path = dir + "/secret";
  KeySecret secret{};
  std::size_t n_bytes = 0;
  switch (read_secret(path, secret, n_bytes)) {
    case SecretFile::Ok:
      return secret;
    case SecretFile::WithoutChecksum:
      if (!write_file_durably(dir, "secret", encode_secret(secret)))
        log_warn("KV directory {}: cannot add a checksum to {}: {}", dir, path, errno_text());
      return secret;
    case SecretFile::Missing:
      if (holds_files(dir + "/blocks") || holds_files(dir + "/agents")) {
        const std::string aside = move_aside(dir);
        log_warn(
            "KV directory {}: the key secret {} is missing, so the blocks and agent manifests there (named by "
            "it) cannot be used; moved them to {} and started an empty store. To use them again, stop the server, "
            "put the secret back in {} and move its blocks/, agents/ and secret back into {}; or delete {}",
            dir, path, aside, aside, dir, aside);
      }
      break;
    case SecretFile::Damaged: {
      const std::string aside = move_aside(dir);
      log_warn(
          "KV directory {}: the key secret {} is damaged ({} bytes, a good one has {} and its checksum), so the "
          "blocks and agent manifests there (named by it) cannot be used; moved the secret, blocks/ and agents/ to "
          "{} and started an empty store. To use them again, stop the server, restore the secret from a backup "
          "into {} and move its contents back into {}; or delete {}",
          dir, path, n_bytes, kSecretFileBytes, aside, aside, dir, aside);
      break;
    }
  }
  for (const char* sub : {"/blocks", "/agents"}) {
    std::error_code ec;
    fs::create_directories(dir + sub, ec);
    if (ec) throw Error(ErrorKind::Io, "cannot create " + dir + sub + ": " + ec.message());
  }
  secret = random_key_secret();
  if (!write_file_durably(dir, "secret", encode_secret(secret)))
    throw Error(ErrorKind::Io, "cannot write " + path + ": " + errno_text());
  return secret;
}

bool write_file_durably(const std::string& dir, const std::string& name, std::span<const std::byte> bytes) {
  const std::string path = dir + "/" + name;
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  bool ok = done == bytes.size() && ::fsync(fd) == 0;
  int saved = errno;
  ok = ::close(fd) == 0 && ok;
  if (ok) {
    ok = ::rename(tmp.c_str(), path.c_str()) == 0;
    saved = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    errno = saved;
    return false;
  }
  fsync_dir(dir);
  return true;
}

}  // namespace akv
