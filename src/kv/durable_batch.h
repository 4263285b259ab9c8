// Durable writes of many files into one directory at the disk's speed: each file is written
// under a temp name and its write-back started at once; commit() then makes their data durable
// (one syncfs for a batch of several: one journal commit and one device flush instead of one
// per file; an fdatasync for a single file), renames each to its name and fsyncs the directory
// once. A crash leaves every name absent, old or whole: a file is renamed only after its data
// is durable. syncfs also writes back other dirty files of the same filesystem: give the KV
// directory its own filesystem where others write a lot. Not thread-safe: one writer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace akv {

class DurableBatch {
 public:
  // `dir_fd` (an open directory) and `tmp_serial` (numbers temp names) must outlive the batch.
  DurableBatch(int dir_fd, std::uint64_t& tmp_serial) : dir_fd_(dir_fd), tmp_serial_(tmp_serial) {}
  // Removes the temp files of a batch that was not committed.
  ~DurableBatch();
  DurableBatch(const DurableBatch&) = delete;
  DurableBatch& operator=(const DurableBatch&) = delete;

  // Writes `a` then `b` as the future content of `name` and starts its write-back. False (errno
  // set) on failure: nothing of it is left and commit() does not list it.
  bool add(const std::string& name, std::span<const std::byte> a, std::span<const std::byte> b);
  // Makes every added file durable under its name. ok[i] for the i-th successful add; a file
  // whose data or rename failed is removed, never renamed (a failed syncfs fails the whole
  // batch: it does not say which file); a failed directory fsync fails them all (renamed,
  // whole, maybe not lasting). On any failure `first_errno` is its errno (else 0). Empties the
  // batch.
  std::vector<bool> commit(int& first_errno);
  std::size_t size() const { return files_.size(); }

 private:
  struct File {
    std::string name, tmp;
    int fd = -1;
  };
  int dir_fd_;
  std::uint64_t& tmp_serial_;
  std::vector<File> files_;
};

// One file through a batch of one: temp file, fdatasync, rename, fsync of the directory.
// False (errno set) on failure, leaving nothing behind.
bool write_durably(int dir_fd, const std::string& name, std::span<const std::byte> a,
                   std::span<const std::byte> b, std::uint64_t& tmp_serial);

}  // namespace akv
