// safetensors: header validation, the mmap-backed reader (single file, index, directory) and
// the writers. Format: u64 little-endian header length N, N bytes of JSON, then the data section;
// "data_offsets" are relative to the start of the data section.
#include "tensor/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "base/error.h"

namespace akv {

namespace {

using nlohmann::json;

constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;  // real headers are a few hundred KB
constexpr int kMaxJsonDepth = 16;                        // a valid header nests 3 deep

[[noreturn]] void fail(const std::string& file, const std::string& problem) {
  throw Error(ErrorKind::BadFormat, file + ": " + problem);
}
[[noreturn]] void fail_tensor(const std::string& file, std::string_view tensor,
                              const std::string& problem) {
  throw Error(ErrorKind::BadFormat, file + ": tensor '" + std::string(tensor) + "': " + problem);
}

std::string shape_string(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// nlohmann's parser recurses per nesting level: bound the depth before handing it the bytes.
bool json_depth_ok(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// Parses JSON without letting nlohmann exceptions escape; `duplicate_key` reports a key repeated
// in the top-level object (nlohmann would silently keep the last one).
json parse_json_or_throw(std::string_view text, const std::string& file, bool* duplicate_key) {
  if (!json_depth_ok(text)) fail(file, "JSON nested too deeply");
  std::set<std::string, std::less<>> top_keys;
  *duplicate_key = false;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!top_keys.insert(parsed.get<std::string>()).second) *duplicate_key = true;
    }
    return true;
  };
  json j = json::parse(text.begin(), text.end(), on_event, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(file, "header is not valid JSON");
  return j;
}

std::uint64_t read_le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void check_metadata(const json& meta, const std::string& file) {
  if (!meta.is_object()) fail(file, "__metadata__ is not an object");
  for (const auto& [key, value] : meta.items())
    if (!value.is_string()) fail(file, "__metadata__ '" + key + "' is not a string");
}

// Reads one non-negative integer that fits int64 (JSON doubles and negatives are rejected).
bool as_nonneg_int(const json& v, std::int64_t* out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX)) return false;
    *out = static_cast<std::int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (i < 0) return false;
    *out = i;
    return true;
  }
  return false;
}

struct Extent {
  std::uint64_t begin = 0, end = 0;
  const std::string* name = nullptr;
};

TensorInfo parse_entry(const std::string& name, const json& entry,
                       std::span<const std::uint8_t> data, const std::string& file,
                       Extent* extent) {
  if (!entry.is_object()) fail_tensor(file, name, "entry is not an object");
  TensorInfo t;
  t.name = name;
  t.file = file;

  const auto dt = entry.find("dtype");
  if (dt == entry.end() || !dt->is_string()) fail_tensor(file, name, "missing dtype");
  const auto dtype = find_dtype(dt->get<std::string>());
  if (!dtype) fail_tensor(file, name, "unknown dtype '" + dt->get<std::string>() + "'");
  t.dtype = *dtype;

  const auto sh = entry.find("shape");
  if (sh == entry.end() || !sh->is_array()) fail_tensor(file, name, "missing shape");
  std::int64_t numel = 1;
  for (const json& d : *sh) {
    std::int64_t dim = 0;
    if (!as_nonneg_int(d, &dim))
      fail_tensor(file, name, "shape has a negative or non-integer dimension");
    t.shape.push_back(dim);
    if (__builtin_mul_overflow(numel, dim, &numel)) fail_tensor(file, name, "shape overflows");
  }
  std::int64_t n_bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<std::int64_t>(dtype_size(t.dtype)), &n_bytes))
    fail_tensor(file, name, "shape overflows");

  const auto off = entry.find("data_offsets");
  if (off == entry.end() || !off->is_array() || off->size() != 2)
    fail_tensor(file, name, "data_offsets is not [begin, end]");
  std::int64_t begin = 0, end = 0;
  if (!as_nonneg_int((*off)[0], &begin) || !as_nonneg_int((*off)[1], &end))
    fail_tensor(file, name, "data_offsets are not non-negative integers");
  if (begin > end) fail_tensor(file, name, "data_offsets begin > end");
  if (static_cast<std::uint64_t>(end) > data.size())
    fail_tensor(file, name,
                "data_offsets end " + std::to_string(end) + " past the data section (" +
                    std::to_string(data.size()) + " bytes): truncated file?");
  if (end - begin != n_bytes)
    fail_tensor(file, name,
                "data size " + std::to_string(end - begin) +
                    " bytes != " + std::to_string(n_bytes) + " bytes for shape " +
                    shape_string(t.shape) + " of " + std::string(dtype_name(t.dtype)));
  t.bytes = data.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(n_bytes));
  *extent = {static_cast<std::uint64_t>(begin), static_cast<std::uint64_t>(end), &t.name};
  return t;
}

}  // namespace

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::vector<TensorInfo> parse_safetensors(std::span<const std::uint8_t> file_bytes,
                                          const std::string& file_label) {
  const std::string& file = file_label;
  if (file_bytes.size() < 8) fail(file, "truncated: shorter than the 8-byte header length");
  const std::uint64_t header_len = read_le64(file_bytes.data());
  if (header_len > kMaxHeaderBytes)
    fail(file, "header length " + std::to_string(header_len) + " exceeds the limit");
  if (header_len > file_bytes.size() - 8)
    fail(file, "truncated: header length " + std::to_string(header_len) + " past the end of the " +
                   std::to_string(file_bytes.size()) + "-byte file");
  const std::string_view text(reinterpret_cast<const char*>(file_bytes.data() + 8), header_len);
  const std::span<const std::uint8_t> data = file_bytes.subspan(8 + header_len);

  bool duplicate_key = false;
  const json header = parse_json_or_throw(text, file, &duplicate_key);
  if (!header.is_object()) fail(file, "header is not a JSON object");
  if (duplicate_key) fail(file, "header repeats a tensor name");

  std::vector<TensorInfo> tensors;
  std::vector<Extent> extents;
  tensors.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      check_metadata(entry, file);
      continue;
    }
    Extent e;
    tensors.push_back(parse_entry(name, entry, data, file, &e));
    extents.push_back(e);
  }
  // Names point into `tensors`, which no longer grows.
  for (std::size_t i = 0; i < extents.size(); ++i) extents[i].name = &tensors[i].name;

  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (std::size_t i = 1; i < extents.size(); ++i) {
    const Extent& prev = extents[i - 1];
    const Extent& cur = extents[i];
    if (cur.begin < prev.end && cur.begin < cur.end)
      fail_tensor(file, *cur.name, "data overlaps tensor '" + *prev.name + "'");
  }
  return tensors;
}

// ---- reader ----

namespace {

bool is_dir(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_directory(p, ec);
}
bool is_file(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

// Shard name -> tensor names it should hold, from an index's weight_map.
std::map<std::string, std::vector<std::string>> read_index(const std::string& index_path) {
  const std::string text = read_file_or_throw(index_path);
  bool duplicate_key = false;
  const json index = parse_json_or_throw(text, index_path, &duplicate_key);
  if (!index.is_object()) fail(index_path, "not a JSON object");
  const auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) fail(index_path, "missing weight_map");
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) fail_tensor(index_path, name, "weight_map value is not a file name");
    const std::string s = shard.get<std::string>();
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
      fail_tensor(index_path, name, "shard '" + s + "' is not a plain file name");
    shards[s].push_back(name);
  }
  if (shards.empty()) fail(index_path, "weight_map is empty");
  return shards;
}

}  // namespace

SafetensorsReader SafetensorsReader::open_or_throw(const std::string& path) {
  std::string target = path;
  if (is_dir(path)) {
    const std::string single = path + "/model.safetensors";
    const std::string index = path + "/model.safetensors.index.json";
    if (is_file(single))
      target = single;
    else if (is_file(index))
      target = index;
    else
      throw Error(ErrorKind::NotFound, path +
                                           ": no model.safetensors or "
                                           "model.safetensors.index.json in the directory");
  }

  SafetensorsReader r;
  r.path_ = path;
  auto add_file = [&r](MappedFile file) {
    std::vector<TensorInfo> tensors = parse_safetensors(file.bytes(), file.path());
    for (TensorInfo& t : tensors) {
      if (const TensorInfo* prev = r.find(t.name))
        fail_tensor(t.file, t.name, "also present in " + prev->file);
      std::string name = t.name;
      r.tensors_.emplace(std::move(name), std::move(t));
    }
    r.files_.push_back(std::move(file));  // the spans point into the mapping, which does not move
  };

  if (target.size() >= 5 && target.ends_with(".json")) {
    const std::string dir = std::filesystem::path(target).parent_path().string();
    for (const auto& [shard, names] : read_index(target)) {
      add_file(MappedFile::open_or_throw(dir.empty() ? shard : dir + "/" + shard));
      const std::string& shard_path = r.files_.back().path();
      for (const std::string& name : names) {
        const TensorInfo* t = r.find(name);
        if (t == nullptr || t->file != shard_path)
          fail_tensor(target, name, "not found in its shard " + shard_path);
      }
    }
  } else {
    add_file(MappedFile::open_or_throw(target));
  }
  return r;
}

SafetensorsReader SafetensorsReader::from_memory(std::string label, std::vector<TensorInfo> tensors,
                                                 std::vector<std::vector<std::uint8_t>> storage,
                                                 std::shared_ptr<const void> keep_alive) {
  SafetensorsReader r;
  r.path_ = std::move(label);
  r.storage_ = std::move(storage);  // moving the outer vector keeps every buffer in place
  r.keep_alive_ = std::move(keep_alive);
  for (TensorInfo& t : tensors) {
    if (r.find(t.name) != nullptr)
      throw Error(ErrorKind::InvalidArgument, r.path_ + ": tensor '" + t.name + "' given twice");
    std::string name = t.name;
    r.tensors_.emplace(std::move(name), std::move(t));
  }
  return r;
}

const TensorInfo* SafetensorsReader::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorInfo& SafetensorsReader::get_or_throw(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (t == nullptr)
    throw Error(ErrorKind::NotFound, path_ + ": tensor '" + std::string(name) + "' not found");
  return *t;
}

const TensorInfo& SafetensorsReader::get_or_throw(std::string_view name,
                                                  std::span<const std::int64_t> shape) const {
  const TensorInfo& t = get_or_throw(name);
  if (!std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()))
    fail_tensor(t.file, name,
                "shape " + shape_string(t.shape) + ", expected " + shape_string(shape));
  return t;
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

// ---- writers ----

namespace {

[[noreturn]] void fail_io(const std::string& path, const char* what) {
  throw Error(ErrorKind::Io, path + ": " + what + ": " + std::strerror(errno));
}

std::uint64_t spec_bytes(const TensorSpec& t) {
  std::uint64_t n = dtype_size(t.dtype);
  for (std::int64_t d : t.shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n))
      throw Error(ErrorKind::InvalidArgument,
                  "tensor '" + t.name + "': bad shape " + shape_string(t.shape));
  }
  return n;
}

// The header bytes, padded with spaces so that the data section starts 8-byte aligned.
std::string make_header(std::span<const TensorSpec> tensors,
                        const std::map<std::string, std::string>& metadata,
                        std::uint64_t* data_bytes) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name))
      throw Error(ErrorKind::InvalidArgument, "tensor '" + t.name + "': duplicate name");
    const std::uint64_t n = spec_bytes(t);
    header[t.name] = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  *data_bytes = offset;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return out + text;
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorSpec> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), tmp_path_(path + ".tmp") {
  const std::string header = make_header(tensors, metadata, &data_bytes_);
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_io(tmp_path_, "cannot create");
  write_all(reinterpret_cast<const std::uint8_t*>(header.data()), header.size());
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void SafetensorsWriter::write_all(const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail_io(tmp_path_, "cannot write");
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void SafetensorsWriter::append(std::span<const std::uint8_t> bytes) {
  if (committed_ || written_bytes_ + bytes.size() > data_bytes_)
    throw Error(ErrorKind::InvalidArgument, path_ + ": more tensor data than announced");
  write_all(bytes.data(), bytes.size());
  written_bytes_ += bytes.size();
}

void SafetensorsWriter::commit() {
  if (committed_) return;
  if (written_bytes_ != data_bytes_)
    throw Error(ErrorKind::InvalidArgument, path_ + ": " + std::to_string(written_bytes_) +
                                                " bytes of tensor data written, " +
                                                std::to_string(data_bytes_) + " announced");
  if (::fsync(fd_) != 0) fail_io(tmp_path_, "cannot fsync");
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail_io(tmp_path_, "cannot close");
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) fail_io(path_, "cannot rename into place");
  committed_ = true;
}

std::uint64_t SafetensorsWriter::file_bytes(std::span<const TensorSpec> tensors,
                                            const std::map<std::string, std::string>& metadata) {
  std::uint64_t data = 0;
  return make_header(tensors, metadata, &data).size() + data;
}

void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const TensorToWrite& t : tensors) {
    specs.push_back({t.name, t.dtype, t.shape});
    if (spec_bytes(specs.back()) != t.bytes.size())
      throw Error(ErrorKind::InvalidArgument,
                  "tensor '" + t.name + "': " + std::to_string(t.bytes.size()) +
                      " bytes given for shape " + shape_string(t.shape));
  }
  SafetensorsWriter w(path, std::move(specs), metadata);
  for (const TensorToWrite& t : tensors) w.append(t.bytes);
  w.commit();
}

}  // namespace akv
