// Block file reads for loads: the payload is read in pieces and each piece is checksummed right
// after it is read, while it is still in the cache, so a load passes over memory once (a read
// and then a checksum of a 2 MiB block passed twice, the second time from DRAM).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "kv/disk_format.h"
#include "kv/disk_store_internal.h"

namespace akv::disk_store_detail {

namespace {

// Reads `out` from `fd` at `offset`, checksumming piece by piece into `sum` when given.
bool read_at(int fd, std::size_t offset, std::span<std::byte> out, PayloadChecksum* sum) {
  std::size_t done = 0;
  while (done < out.size()) {
    const std::size_t want = std::min(kReadPieceBytes, out.size() - done);
    std::size_t got = 0;
    while (got < want) {
      const ssize_t n =
          ::pread(fd, out.data() + done + got, want - got, static_cast<off_t>(offset + done + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      got += static_cast<std::size_t>(n);
    }
    if (sum != nullptr) sum->update(out.subspan(done, want));
    done += want;
  }
  return true;
}

// Opens `path` for a load; -1 when it cannot. `size`: the file's.
int open_for_load(const std::string& path, std::size_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < 0) {
    ::close(fd);
    return -1;
  }
  size = static_cast<std::size_t>(st.st_size);
  return fd;
}

}  // namespace

bool read_split_file(const std::string& path, std::span<std::byte> header,
                     std::span<std::byte> payload, std::uint64_t& payload_sum) {
  std::size_t size = 0;
  const int fd = open_for_load(path, size);
  if (fd < 0) return false;
  PayloadChecksum sum;
  const bool ok = size == header.size() + payload.size() && read_at(fd, 0, header, nullptr) &&
                  read_at(fd, header.size(), payload, &sum);
  ::close(fd);
  if (ok) payload_sum = sum.digest();
  return ok;
}

bool read_file_checksummed(const std::string& path, std::size_t header_bytes,
                           std::vector<std::byte>& out, std::uint64_t& payload_sum) {
  std::size_t size = 0;
  const int fd = open_for_load(path, size);
  if (fd < 0) return false;
  out.resize(size);
  const std::span<std::byte> all(out);
  const std::size_t head = std::min(header_bytes, size);
  PayloadChecksum sum;
  const bool ok =
      read_at(fd, 0, all.first(head), nullptr) && read_at(fd, head, all.subspan(head), &sum);
  ::close(fd);
  if (ok) payload_sum = sum.digest();
  return ok;
}

}  // namespace akv::disk_store_detail
