#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "base/error.h"

namespace akv {

namespace {
Error io_error(const std::string& path, const char* what) {
  const int err = errno;
  return Error(err == ENOENT ? ErrorKind::NotFound : ErrorKind::Io,
               path + ": " + what + ": " + std::strerror(err));
}
}  // namespace

MappedFile MappedFile::open_or_throw(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw io_error(path, "cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Error e = io_error(path, "cannot stat");
    ::close(fd);
    throw e;
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<std::size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Error e = io_error(path, "cannot mmap");
      ::close(fd);
      throw e;
    }
    file.data_ = static_cast<const std::uint8_t*>(p);
  }
  ::close(fd);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() {
  if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

std::string read_file_or_throw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errno = errno ? errno : ENOENT;
    throw io_error(path, "cannot open");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw io_error(path, "cannot read");
  return std::move(ss).str();
}

}  // namespace akv
