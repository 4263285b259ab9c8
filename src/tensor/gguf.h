// GGUF over mmap: a validated, read-only view of one .gguf file or of a split set
// (name-00001-of-0000N.gguf), versions 2 and 3, little-endian. Format: ggml/docs/gguf.md.
// Every header is validated before any tensor data is touched: bad input throws Error naming the
// file and the key or tensor, and no accessor can read outside the mapping.
// This reads and describes tensors; it does not convert them (see tensor/dequantize.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"
#include "tensor/gguf_types.h"

namespace akv {

// One metadata value. Scalars hold their value in the field of their kind; arrays hold their
// elements by element type: strings in `strings`, fixed-size elements as stored (little-endian)
// in `raw`, nested arrays in `arrays`.
struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  std::uint64_t u = 0;  // U8/U16/U32/U64, Bool (0 or 1)
  std::int64_t i = 0;   // I8/I16/I32/I64
  double f = 0;         // F32/F64
  std::string str;      // String

  GgufValueType elem_type = GgufValueType::U8;  // Array
  std::uint64_t n_elems = 0;                    // Array
  std::vector<std::string> strings;             // Array of String
  std::vector<std::uint8_t> raw;                // Array of a fixed-size type
  std::vector<GgufValue> arrays;                // Array of Array

  bool is_integer() const;  // any of the eight integer types (scalar)
  // "UINT32", "ARRAY[STRING]", "ARRAY[ARRAY]" ...: for error messages.
  std::string type_string() const;
};

// The key -> value table of a file. Typed getters throw Error{NotFound} "missing" or
// Error{BadFormat} "wrong type / out of range", naming the file and the key. Integer getters
// accept any integer type whose value fits; float getters accept F32 and F64.
class GgufMetadata {
 public:
  GgufMetadata() = default;
  explicit GgufMetadata(std::string file) : file_(std::move(file)) {}

  const GgufValue* find(std::string_view key) const;  // nullptr when absent
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue& get_or_throw(std::string_view key) const;

  std::string get_string(std::string_view key) const;
  std::uint32_t get_u32(std::string_view key) const;
  std::uint64_t get_u64(std::string_view key) const;
  std::int32_t get_i32(std::string_view key) const;
  std::int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  double get_f64(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<std::int32_t> get_i32_array(std::string_view key) const;  // any integer elements
  std::vector<float> get_f32_array(std::string_view key) const;         // F32 or F64 elements

  // nullopt when absent; wrong type still throws.
  std::optional<std::string> find_string(std::string_view key) const;
  std::optional<std::uint32_t> find_u32(std::string_view key) const;
  std::optional<std::uint64_t> find_u64(std::string_view key) const;
  std::optional<std::int32_t> find_i32(std::string_view key) const;
  std::optional<float> find_f32(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;

  // Adds a value; false when the key is already present (the parser reports the duplicate).
  bool insert(std::string key, GgufValue value);
  const std::map<std::string, GgufValue, std::less<>>& entries() const { return values_; }
  std::size_t size() const { return values_.size(); }
  const std::string& file() const { return file_; }

 private:
  std::string file_;  // for error messages
  std::map<std::string, GgufValue, std::less<>> values_;
};

// A tensor of a GGUF file. `dims` is ggml's order, innermost first (ne[0] is the row length);
// shape() gives the safetensors/torch order, outermost first.
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<std::int64_t> dims;       // [ne0, ne1, ...], 1 to 4 entries, ne0 % block == 0
  std::uint64_t offset = 0;             // relative to the data section, as stored
  std::span<const std::uint8_t> bytes;  // exactly n_bytes() bytes inside the file
  std::string file;                     // the file it came from, for error messages

  std::int64_t numel() const;
  std::int64_t row_elems() const { return dims.empty() ? 1 : dims[0]; }
  std::int64_t n_rows() const { return numel() / row_elems(); }
  std::vector<std::int64_t> shape() const;  // dims reversed
};

// Limits that bound parsing work and memory on hostile input.
struct GgufLimits {
  static constexpr std::uint64_t kMaxStringBytes = 64ull << 20;
  static constexpr std::uint64_t kMaxKeyBytes = 65535;
  static constexpr int kMaxArrayDepth = 8;
  static constexpr std::uint64_t kMaxTensors = 1u << 20;
  static constexpr std::uint64_t kMaxKeys = 1u << 20;
  static constexpr int kMaxDims = 4;
};

// The parsed header of one file.
struct GgufFileInfo {
  std::uint32_t version = 0;
  std::uint32_t alignment = 32;    // general.alignment, or the default 32
  std::uint64_t data_offset = 0;   // start of the data section in the file
  GgufMetadata metadata;
  std::vector<GgufTensor> tensors;  // in file order
};

// Parses and validates one GGUF file held in memory (magic, version, metadata, tensor infos,
// alignment, tensor extents within the buffer, no overlaps, no duplicate keys or names).
// Pure function over memory: the fuzz target's entry. Throws Error{BadFormat} naming
// `file_label` and the key or tensor, Error{Unsupported} for an unknown version or tensor type.
GgufFileInfo parse_gguf(std::span<const std::uint8_t> file_bytes, const std::string& file_label);

// "dir/name-00001-of-00003.gguf" -> {1, 3, "dir/name"}; nullopt for a name without the suffix.
struct GgufSplitName {
  int index = 0;
  int count = 0;
  std::string prefix;
};
std::optional<GgufSplitName> parse_gguf_split_name(const std::string& path);
std::string gguf_split_path(const std::string& prefix, int index, int count);

// One .gguf file or a whole split set, mapped and seen as one name -> tensor table.
// Metadata comes from the first file (split files after it carry only split.* keys).
class GgufReader {
 public:
  // `path` is a .gguf file; for a split set it must be the first one (-00001-of-N), and all N
  // files must be present next to it. Throws Error naming the file on any problem.
  static GgufReader open_or_throw(const std::string& path);

  const GgufMetadata& metadata() const { return metadata_; }
  std::uint32_t version() const { return version_; }
  const GgufTensor* find(std::string_view name) const;          // nullptr when absent
  const GgufTensor& get_or_throw(std::string_view name) const;  // Error{NotFound} naming it
  std::vector<std::string> names() const;                       // sorted
  std::size_t size() const { return tensors_.size(); }
  std::size_t n_files() const { return files_.size(); }
  const std::string& path() const { return path_; }

 private:
  std::vector<MappedFile> files_;
  std::map<std::string, GgufTensor, std::less<>> tensors_;
  GgufMetadata metadata_;
  std::uint32_t version_ = 0;
  std::string path_;
};

// True when `path` names a .gguf file (by extension), for --model dispatch.
bool is_gguf_path(const std::string& path);

}  // namespace akv
