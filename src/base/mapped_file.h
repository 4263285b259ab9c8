// A read-only memory map of a whole file. Owns the mapping; movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace akv {

class MappedFile {
 public:
  // Maps `path` read-only. Throws Error{Io or NotFound} naming the path on failure.
  static MappedFile open_or_throw(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();

  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
};

// Reads a whole file into a string. Throws Error{NotFound or Io} naming the path.
std::string read_file_or_throw(const std::string& path);

}  // namespace akv
