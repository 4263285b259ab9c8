// safetensors over mmap: a validated, read-only view of one file or of a sharded checkpoint
// (model.safetensors.index.json), plus a writer. See https://github.com/huggingface/safetensors.
// Every header is validated before any tensor data is touched: a bad file throws Error naming
// the file and the tensor, and no accessor can read outside the mapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"
#include "tensor/dtype.h"

namespace akv {

// A tensor stored in a checkpoint: dtype, shape (outermost first) and its bytes in the mapping.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::span<const std::uint8_t> bytes;  // exactly numel * dtype_size bytes
  std::string file;                     // the file it came from, for error messages

  std::int64_t numel() const;
};

// Parses and validates a safetensors header (the 8-byte length prefix and the JSON that
// follows) against a buffer of `file_bytes`. Pure function over memory: the fuzz target's entry.
// Throws Error{BadFormat} naming `file_label` and the offending tensor.
std::vector<TensorInfo> parse_safetensors(std::span<const std::uint8_t> file_bytes,
                                          const std::string& file_label);

// One or more mapped safetensors files seen as one name -> tensor table.
class SafetensorsReader {
 public:
  // `path` is a .safetensors file, a model.safetensors.index.json, or a directory holding
  // either (model.safetensors preferred). Throws Error naming the file on any problem.
  static SafetensorsReader open_or_throw(const std::string& path);
  // A reader over tensors held in memory, e.g. another format's tensors under checkpoint names
  // (models/gguf_weights.h). Each tensor's bytes point into `storage` (whose buffers the reader
  // takes and never reallocates) or into memory that `keep_alive` owns. `label` names the
  // source in errors. Throws Error{InvalidArgument} on a repeated name.
  static SafetensorsReader from_memory(std::string label, std::vector<TensorInfo> tensors,
                                       std::vector<std::vector<std::uint8_t>> storage,
                                       std::shared_ptr<const void> keep_alive);

  const TensorInfo* find(std::string_view name) const;          // nullptr when absent
  const TensorInfo& get_or_throw(std::string_view name) const;  // Error{NotFound} naming it
  // Like get_or_throw, and also checks the shape: Error{BadFormat} naming file, tensor and both
  // shapes.
  const TensorInfo& get_or_throw(std::string_view name, std::span<const std::int64_t> shape) const;
  std::vector<std::string> names() const;
  std::size_t size() const { return tensors_.size(); }
  const std::string& path() const { return path_; }  // the path or label it was opened with

 private:
  std::vector<MappedFile> files_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::string path_;  // what open_or_throw was given, for error messages
  std::vector<std::vector<std::uint8_t>> storage_;  // from_memory: owned tensor bytes
  std::shared_ptr<const void> keep_alive_;          // from_memory: owner of borrowed bytes
};

// Writes tensors as one safetensors file (header padded to 8 bytes, data in the given order),
// through a temp file and rename. `metadata` goes into "__metadata__". Throws Error{Io}.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::span<const std::uint8_t> bytes;
};
void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Streaming writer for checkpoints too large to hold in memory: the tensor list (names, dtypes,
// shapes) is fixed up front, then the data of every tensor is appended in that order, in chunks
// of any size. commit() checks that exactly the announced bytes arrived, fsyncs and renames
// path + ".tmp" onto `path`; a writer destroyed without commit() removes the temp file.
// Single-threaded use. Throws Error{Io} on any system error, Error{InvalidArgument} on misuse
// (a bad shape, too many or too few bytes).
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
};
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorSpec> tensors,
                    const std::map<std::string, std::string>& metadata = {});
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  ~SafetensorsWriter();

  void append(std::span<const std::uint8_t> bytes);
  void commit();

  std::uint64_t data_bytes() const { return data_bytes_; }  // total announced data size
  // Bytes a file holding `tensors` will take (header included), for sharding decisions.
  static std::uint64_t file_bytes(std::span<const TensorSpec> tensors,
                                  const std::map<std::string, std::string>& metadata = {});

 private:
  void write_all(const std::uint8_t* p, std::size_t n);

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  std::uint64_t data_bytes_ = 0;
  std::uint64_t written_bytes_ = 0;
  bool committed_ = false;
};

}  // namespace akv
