// GGUF parsing: a bounds-checked cursor over the file bytes, the metadata table and tensor infos,
// then the reader that maps one file or a split set. Layout (v2/v3, little-endian):
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv, n_kv x (string key, u32 type, value),
//   n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset),
//   padding to general.alignment, data section (tensor offsets are relative to it).
#include "tensor/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "base/error.h"

namespace akv {

namespace {

[[noreturn]] void fail(const std::string& file, const std::string& problem) {
  throw Error(ErrorKind::BadFormat, file + ": " + problem);
}
[[noreturn]] void fail_key(const std::string& file, std::string_view key, const std::string& problem) {
  throw Error(ErrorKind::BadFormat, file + ": key '" + std::string(key) + "': " + problem);
}
[[noreturn]] void fail_tensor(const std::string& file, std::string_view tensor,
                              const std::string& problem, ErrorKind kind = ErrorKind::BadFormat) {
  throw Error(kind, file + ": tensor '" + std::string(tensor) + "': " + problem);
}

// Reads little-endian fields; running out of bytes throws naming what was being read.
class Cursor {
 public:
  Cursor(std::span<const std::uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return bytes_.size() - pos_; }

  void need(std::uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail(file_, "truncated: " + what + " needs " + std::to_string(n) + " bytes at offset " +
                      std::to_string(pos_) + ", " + std::to_string(remaining()) + " left");
  }
  const std::uint8_t* take(std::uint64_t n, const std::string& what) {
    need(n, what);
    const std::uint8_t* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::uint64_t uint(int n_bytes, const std::string& what) {
    const std::uint8_t* p = take(static_cast<std::uint64_t>(n_bytes), what);
    std::uint64_t v = 0;
    for (int i = n_bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  std::uint32_t u32(const std::string& what) { return static_cast<std::uint32_t>(uint(4, what)); }
  std::uint64_t u64(const std::string& what) { return uint(8, what); }
  std::string string(std::uint64_t max_bytes, const std::string& what) {
    const std::uint64_t n = u64(what + " length");
    if (n > max_bytes)
      fail(file_, what + ": length " + std::to_string(n) + " exceeds the limit of " +
                      std::to_string(max_bytes));
    const std::uint8_t* p = take(n, what);
    return std::string(reinterpret_cast<const char*>(p), n);
  }

 private:
  std::span<const std::uint8_t> bytes_;
  const std::string& file_;
  std::uint64_t pos_ = 0;
};

std::int64_t sign_extend(std::uint64_t v, int n_bytes) {
  if (n_bytes == 8) return static_cast<std::int64_t>(v);
  const int shift = 64 - 8 * n_bytes;
  return static_cast<std::int64_t>(v << shift) >> shift;
}

GgufValueType read_value_type(Cursor& c, const std::string& file, std::string_view key) {
  const std::uint32_t raw = c.u32("value type of key '" + std::string(key) + "'");
  if (!is_known_gguf_value_type(raw))
    fail_key(file, key, "unknown value type " + std::to_string(raw));
  return static_cast<GgufValueType>(raw);
}

void read_value(Cursor& c, GgufValueType type, GgufValue* out, int depth, const std::string& file,
                std::string_view key);

void read_array(Cursor& c, GgufValue* out, int depth, const std::string& file, std::string_view key) {
  if (depth >= GgufLimits::kMaxArrayDepth)
    fail_key(file, key, "arrays nested deeper than " + std::to_string(GgufLimits::kMaxArrayDepth));
  const GgufValueType elem = read_value_type(c, file, key);
  const std::uint64_t n = c.u64("array length of key '" + std::string(key) + "'");
  out->elem_type = elem;
  out->n_elems = n;
  // Every element takes at least this many bytes: bounds the count by the bytes left.
  const std::uint64_t min_elem = elem == GgufValueType::String  ? 8
                                 : elem == GgufValueType::Array ? 12
                                                                : gguf_value_type_size(elem);
  if (n > c.remaining() / min_elem)
    fail_key(file, key, "array of " + std::to_string(n) + " " +
                            std::string(gguf_value_type_name(elem)) +
                            " elements runs past the end of the file");
  if (elem == GgufValueType::String) {
    out->strings.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i)
      out->strings.push_back(c.string(GgufLimits::kMaxStringBytes,
                                      "element " + std::to_string(i) + " of key '" + std::string(key) + "'"));
  } else if (elem == GgufValueType::Array) {
    out->arrays.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) read_value(c, elem, &out->arrays[i], depth + 1, file, key);
  } else {
    const std::uint64_t n_bytes = n * min_elem;
    const std::uint8_t* p = c.take(n_bytes, "array of key '" + std::string(key) + "'");
    out->raw.assign(p, p + n_bytes);
  }
}

void read_value(Cursor& c, GgufValueType type, GgufValue* out, int depth, const std::string& file,
                std::string_view key) {
  out->type = type;
  const std::string what = "value of key '" + std::string(key) + "'";
  switch (type) {
    case GgufValueType::U8:
    case GgufValueType::U16:
    case GgufValueType::U32:
    case GgufValueType::U64:
      out->u = c.uint(static_cast<int>(gguf_value_type_size(type)), what);
      return;
    case GgufValueType::I8:
    case GgufValueType::I16:
    case GgufValueType::I32:
    case GgufValueType::I64: {
      const int n = static_cast<int>(gguf_value_type_size(type));
      out->i = sign_extend(c.uint(n, what), n);
      return;
    }
    case GgufValueType::Bool: {
      const std::uint64_t b = c.uint(1, what);
      if (b > 1) fail_key(file, key, "bool value " + std::to_string(b) + " is not 0 or 1");
      out->u = b;
      return;
    }
    case GgufValueType::F32: {
      const auto bits = static_cast<std::uint32_t>(c.uint(4, what));
      float f;
      std::memcpy(&f, &bits, 4);
      out->f = f;
      return;
    }
    case GgufValueType::F64: {
      const std::uint64_t bits = c.uint(8, what);
      std::memcpy(&out->f, &bits, 8);
      return;
    }
    case GgufValueType::String:
      out->str = c.string(GgufLimits::kMaxStringBytes, what);
      return;
    case GgufValueType::Array:
      read_array(c, out, depth, file, key);
      return;
  }
}

std::uint64_t align_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

void read_metadata(Cursor& c, std::uint64_t n_kv, GgufFileInfo* info, const std::string& file) {
  for (std::uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.string(GgufLimits::kMaxKeyBytes, "key " + std::to_string(k));
    if (key.empty()) fail(file, "key " + std::to_string(k) + " is empty");
    GgufValue v;
    const GgufValueType type = read_value_type(c, file, key);
    read_value(c, type, &v, 0, file, key);
    if (info->metadata.has(key)) fail_key(file, key, "duplicate key");
    info->metadata.insert(std::move(key), std::move(v));
  }
  if (const GgufValue* a = info->metadata.find("general.alignment")) {
    if (a->type != GgufValueType::U32)
      fail_key(file, "general.alignment", "type " + a->type_string() + ", expected UINT32");
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      fail_key(file, "general.alignment", "value " + std::to_string(a->u) + " is not a power of two");
    info->alignment = static_cast<std::uint32_t>(a->u);
  }
}

GgufTensor read_tensor_info(Cursor& c, std::uint64_t index, const std::string& file) {
  GgufTensor t;
  t.file = file;
  t.name = c.string(GgufLimits::kMaxKeyBytes, "name of tensor " + std::to_string(index));
  const std::uint32_t n_dims = c.u32("n_dims of tensor '" + t.name + "'");
  if (n_dims < 1 || n_dims > static_cast<std::uint32_t>(GgufLimits::kMaxDims))
    fail_tensor(file, t.name, std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
  std::int64_t numel = 1;
  for (std::uint32_t d = 0; d < n_dims; ++d) {
    const std::uint64_t ne = c.u64("dimension of tensor '" + t.name + "'");
    if (ne > static_cast<std::uint64_t>(INT64_MAX)) fail_tensor(file, t.name, "dimension overflows");
    t.dims.push_back(static_cast<std::int64_t>(ne));
    if (__builtin_mul_overflow(numel, static_cast<std::int64_t>(ne), &numel))
      fail_tensor(file, t.name, "element count overflows");
  }
  const std::uint32_t raw_type = c.u32("type of tensor '" + t.name + "'");
  const auto traits = find_ggml_type(raw_type);
  if (!traits)
    fail_tensor(file, t.name, "unknown or unsupported tensor type " + std::to_string(raw_type),
                ErrorKind::Unsupported);
  t.type = static_cast<GgmlType>(raw_type);
  if (t.dims[0] % traits->block_elems != 0)
    fail_tensor(file, t.name, "row length " + std::to_string(t.dims[0]) + " is not a multiple of " +
                                  std::string(traits->name) + "'s block of " +
                                  std::to_string(traits->block_elems));
  t.offset = c.u64("offset of tensor '" + t.name + "'");
  return t;
}

std::uint64_t tensor_bytes(const GgufTensor& t) {
  const GgmlTypeTraits tr = ggml_type_traits(t.type);
  // numel fits int64 and block_bytes <= 8 * block_elems, so this cannot overflow uint64.
  return static_cast<std::uint64_t>(t.numel() / tr.block_elems) * static_cast<std::uint64_t>(tr.block_bytes);
}

// Points every tensor at its bytes, checking alignment, extent and overlap.
void place_tensors(std::span<const std::uint8_t> file_bytes, GgufFileInfo* info, const std::string& file) {
  std::vector<std::pair<std::uint64_t, const GgufTensor*>> by_offset;
  const std::uint64_t data_size = info->data_offset <= file_bytes.size() ? file_bytes.size() - info->data_offset : 0;
  for (GgufTensor& t : info->tensors) {
    const std::uint64_t n = tensor_bytes(t);
    if (t.offset % info->alignment != 0)
      fail_tensor(file, t.name, "offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                                    std::to_string(info->alignment));
    if (t.offset > data_size || n > data_size - t.offset)
      fail_tensor(file, t.name, "data [" + std::to_string(t.offset) + ", +" + std::to_string(n) +
                                    ") runs past the data section (" + std::to_string(data_size) +
                                    " bytes): truncated file?");
    t.bytes = file_bytes.subspan(info->data_offset + t.offset, n);
    by_offset.emplace_back(t.offset, &t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor& prev = *by_offset[i - 1].second;
    const GgufTensor& cur = *by_offset[i].second;
    if (!cur.bytes.empty() && cur.offset < prev.offset + prev.bytes.size())
      fail_tensor(file, cur.name, "data overlaps tensor '" + prev.name + "'");
  }
}

}  // namespace

// ---- values and metadata ----

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::U8:
    case GgufValueType::I8:
    case GgufValueType::U16:
    case GgufValueType::I16:
    case GgufValueType::U32:
    case GgufValueType::I32:
    case GgufValueType::U64:
    case GgufValueType::I64: return true;
    default: return false;
  }
}

std::string GgufValue::type_string() const {
  if (type != GgufValueType::Array) return std::string(gguf_value_type_name(type));
  return "ARRAY[" + std::string(gguf_value_type_name(elem_type)) + "]";
}

std::int64_t GgufTensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
  return n;
}

std::vector<std::int64_t> GgufTensor::shape() const { return {dims.rbegin(), dims.rend()}; }

// ---- parse ----

GgufFileInfo parse_gguf(std::span<const std::uint8_t> file_bytes, const std::string& file_label) {
  const std::string& file = file_label;
  Cursor c(file_bytes, file);
  c.need(4, "magic");
  if (std::memcmp(c.take(4, "magic"), "GGUF", 4) != 0) fail(file, "wrong magic: not a GGUF file");

  GgufFileInfo info;
  info.metadata = GgufMetadata(file);
  info.version = c.u32("version");
  if (info.version != 2 && info.version != 3) {
    const bool swapped = info.version == 0x02000000u || info.version == 0x03000000u;
    throw Error(ErrorKind::Unsupported,
                file + ": GGUF version " + std::to_string(info.version) +
                    (swapped ? " (a big-endian file; only little-endian is read)"
                             : " is not supported (versions 2 and 3 are)"));
  }
  const std::uint64_t n_tensors = c.u64("tensor count");
  const std::uint64_t n_kv = c.u64("metadata count");
  if (n_tensors > GgufLimits::kMaxTensors || n_tensors > c.remaining() / 24)
    fail(file, "tensor count " + std::to_string(n_tensors) + " exceeds the limit or the file size: truncated file?");
  if (n_kv > GgufLimits::kMaxKeys || n_kv > c.remaining() / 12)
    fail(file, "metadata count " + std::to_string(n_kv) + " exceeds the limit or the file size: truncated file?");

  read_metadata(c, n_kv, &info, file);

  std::set<std::string_view> names;
  info.tensors.reserve(n_tensors);
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    info.tensors.push_back(read_tensor_info(c, i, file));
    if (!names.insert(info.tensors.back().name).second)
      fail_tensor(file, info.tensors.back().name, "duplicate tensor name");
  }
  info.data_offset = align_up(c.pos(), info.alignment);
  if (n_tensors > 0 && info.data_offset > file_bytes.size())
    fail(file, "truncated: data section starts at " + std::to_string(info.data_offset) +
                   ", past the end of the " + std::to_string(file_bytes.size()) + "-byte file");
  place_tensors(file_bytes, &info, file);
  return info;
}

// ---- metadata getters ----

const GgufValue* GgufMetadata::find(std::string_view key) const {
  const auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

bool GgufMetadata::insert(std::string key, GgufValue value) {
  return values_.emplace(std::move(key), std::move(value)).second;
}

const GgufValue& GgufMetadata::get_or_throw(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr)
    throw Error(ErrorKind::NotFound, file_ + ": metadata key '" + std::string(key) + "' is missing");
  return *v;
}

namespace {

[[noreturn]] void wrong_type(const std::string& file, std::string_view key, const GgufValue& v,
                             std::string_view wanted) {
  throw Error(ErrorKind::BadFormat, file + ": metadata key '" + std::string(key) + "' has type " +
                                        v.type_string() + ", expected " + std::string(wanted));
}

// An integer value as int64 range-checked against [lo, hi].
std::int64_t integer_in(const std::string& file, std::string_view key, const GgufValue& v,
                        std::int64_t lo, std::int64_t hi, std::string_view wanted) {
  if (!v.is_integer()) wrong_type(file, key, v, wanted);
  const bool is_unsigned = v.type == GgufValueType::U8 || v.type == GgufValueType::U16 ||
                           v.type == GgufValueType::U32 || v.type == GgufValueType::U64;
  if (is_unsigned ? v.u > static_cast<std::uint64_t>(hi) : (v.i < lo || v.i > hi))
    throw Error(ErrorKind::BadFormat, file + ": metadata key '" + std::string(key) + "' value " +
                                          (is_unsigned ? std::to_string(v.u) : std::to_string(v.i)) +
                                          " is out of range for " + std::string(wanted));
  return is_unsigned ? static_cast<std::int64_t>(v.u) : v.i;
}

// Element i of a fixed-size array as a scalar value.
GgufValue array_elem(const GgufValue& a, std::uint64_t i) {
  GgufValue e;
  e.type = a.elem_type;
  const std::size_t n = gguf_value_type_size(a.elem_type);
  const std::uint8_t* p = a.raw.data() + i * n;
  std::uint64_t bits = 0;
  for (std::size_t b = n; b-- > 0;) bits = (bits << 8) | p[b];
  switch (a.elem_type) {
    case GgufValueType::F32: {
      float f;
      const auto b32 = static_cast<std::uint32_t>(bits);
      std::memcpy(&f, &b32, 4);
      e.f = f;
      break;
    }
    case GgufValueType::F64: std::memcpy(&e.f, &bits, 8); break;
    case GgufValueType::I8:
    case GgufValueType::I16:
    case GgufValueType::I32:
    case GgufValueType::I64: e.i = sign_extend(bits, static_cast<int>(n)); break;
    default: e.u = bits; break;
  }
  return e;
}

}  // namespace

std::string GgufMetadata::get_string(std::string_view key) const {
  const GgufValue& v = get_or_throw(key);
  if (v.type != GgufValueType::String) wrong_type(file_, key, v, "STRING");
  return v.str;
}

std::uint32_t GgufMetadata::get_u32(std::string_view key) const {
  return static_cast<std::uint32_t>(integer_in(file_, key, get_or_throw(key), 0, UINT32_MAX, "UINT32"));
}

std::uint64_t GgufMetadata::get_u64(std::string_view key) const {
  const GgufValue& v = get_or_throw(key);
  if (v.type == GgufValueType::U64) return v.u;
  return static_cast<std::uint64_t>(integer_in(file_, key, v, 0, INT64_MAX, "UINT64"));
}

std::int32_t GgufMetadata::get_i32(std::string_view key) const {
  return static_cast<std::int32_t>(integer_in(file_, key, get_or_throw(key), INT32_MIN, INT32_MAX, "INT32"));
}

std::int64_t GgufMetadata::get_i64(std::string_view key) const {
  return integer_in(file_, key, get_or_throw(key), INT64_MIN, INT64_MAX, "INT64");
}

double GgufMetadata::get_f64(std::string_view key) const {
  const GgufValue& v = get_or_throw(key);
  if (v.type != GgufValueType::F32 && v.type != GgufValueType::F64) wrong_type(file_, key, v, "FLOAT32");
  return v.f;
}

float GgufMetadata::get_f32(std::string_view key) const { return static_cast<float>(get_f64(key)); }

bool GgufMetadata::get_bool(std::string_view key) const {
  const GgufValue& v = get_or_throw(key);
  if (v.type != GgufValueType::Bool) wrong_type(file_, key, v, "BOOL");
  return v.u != 0;
}

std::vector<std::string> GgufMetadata::get_string_array(std::string_view key) const {
  const GgufValue& v = get_or_throw(key);
  if (v.type != GgufValueType::Array || v.elem_type != GgufValueType::String)
    wrong_type(file_, key, v, "ARRAY[STRING]");
  return v.strings;
}

std::vector<std::int32_t> GgufMetadata::get_i32_array(std::string_view key) const {
  const GgufValue& v = get_or_throw(key);
  if (v.type != GgufValueType::Array || v.elem_type == GgufValueType::F32 || v.elem_type == GgufValueType::F64 ||
      v.elem_type == GgufValueType::Bool || gguf_value_type_size(v.elem_type) == 0)
    wrong_type(file_, key, v, "ARRAY[INT32]");
  std::vector<std::int32_t> out;
  out.reserve(v.n_elems);
  for (std::uint64_t i = 0; i < v.n_elems; ++i)
    out.push_back(static_cast<std::int32_t>(
        integer_in(file_, key, array_elem(v, i), INT32_MIN, INT32_MAX, "ARRAY[INT32]")));
  return out;
}

std::vector<float> GgufMetadata::get_f32_array(std::string_view key) const {
  const GgufValue& v = get_or_throw(key);
  if (v.type != GgufValueType::Array ||
      (v.elem_type != GgufValueType::F32 && v.elem_type != GgufValueType::F64))
    wrong_type(file_, key, v, "ARRAY[FLOAT32]");
  std::vector<float> out;
  out.reserve(v.n_elems);
  for (std::uint64_t i = 0; i < v.n_elems; ++i) out.push_back(static_cast<float>(array_elem(v, i).f));
  return out;
}

std::optional<std::string> GgufMetadata::find_string(std::string_view key) const {
  return has(key) ? std::optional(get_string(key)) : std::nullopt;
}
std::optional<std::uint32_t> GgufMetadata::find_u32(std::string_view key) const {
  return has(key) ? std::optional(get_u32(key)) : std::nullopt;
}
std::optional<std::uint64_t> GgufMetadata::find_u64(std::string_view key) const {
  return has(key) ? std::optional(get_u64(key)) : std::nullopt;
}
std::optional<std::int32_t> GgufMetadata::find_i32(std::string_view key) const {
  return has(key) ? std::optional(get_i32(key)) : std::nullopt;
}
std::optional<float> GgufMetadata::find_f32(std::string_view key) const {
  return has(key) ? std::optional(get_f32(key)) : std::nullopt;
}
std::optional<bool> GgufMetadata::find_bool(std::string_view key) const {
  return has(key) ? std::optional(get_bool(key)) : std::nullopt;
}

// ---- split names and the reader ----

std::optional<GgufSplitName> parse_gguf_split_name(const std::string& path) {
  // <prefix>-NNNNN-of-MMMMM.gguf
  constexpr std::string_view kSuffix = ".gguf";
  constexpr std::size_t kTail = 1 + 5 + 4 + 5 + 5;  // "-00001-of-00003.gguf"
  if (path.size() <= kTail || !path.ends_with(kSuffix)) return std::nullopt;
  const std::string_view tail = std::string_view(path).substr(path.size() - kTail);
  auto digits = [](std::string_view s, int* out) {
    int v = 0;
    for (char ch : s) {
      if (ch < '0' || ch > '9') return false;
      v = v * 10 + (ch - '0');
    }
    *out = v;
    return true;
  };
  GgufSplitName s;
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || !digits(tail.substr(1, 5), &s.index) ||
      !digits(tail.substr(10, 5), &s.count) || s.index < 1 || s.count < 1 || s.index > s.count)
    return std::nullopt;
  s.prefix = path.substr(0, path.size() - kTail);
  return s;
}

std::string gguf_split_path(const std::string& prefix, int index, int count) {
  char tail[32];
  std::snprintf(tail, sizeof(tail), "-%05d-of-%05d.gguf", index, count);
  return prefix + tail;
}

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.ends_with(".gguf");
}

GgufReader GgufReader::open_or_throw(const std::string& path) {
  std::vector<std::string> paths{path};
  const auto split = parse_gguf_split_name(path);
  if (split) {
    if (split->index != 1)
      throw Error(ErrorKind::InvalidArgument,
                  path + ": part " + std::to_string(split->index) + " of a split GGUF; pass the first (" +
                      gguf_split_path(split->prefix, 1, split->count) + ")");
    for (int i = 2; i <= split->count; ++i) paths.push_back(gguf_split_path(split->prefix, i, split->count));
  }

  GgufReader r;
  r.path_ = path;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    MappedFile mapped = MappedFile::open_or_throw(paths[f]);
    GgufFileInfo info = parse_gguf(mapped.bytes(), mapped.path());
    if (split) {
      // gguf-split records the part number (0-based) and count; other writers may not.
      if (const auto no = info.metadata.find_u32("split.no"); no && *no != f)
        fail_key(paths[f], "split.no", std::to_string(*no) + ", expected " + std::to_string(f));
      if (const auto count = info.metadata.find_u32("split.count");
          count && *count != static_cast<std::uint32_t>(split->count))
        fail_key(paths[f], "split.count",
                 std::to_string(*count) + ", the file name says " + std::to_string(split->count));
    }
    if (f == 0) {
      r.metadata_ = std::move(info.metadata);
      r.version_ = info.version;
    }
    for (GgufTensor& t : info.tensors) {
      if (const GgufTensor* prev = r.find(t.name))
        fail_tensor(t.file, t.name, "also present in " + prev->file);
      std::string name = t.name;
      r.tensors_.emplace(std::move(name), std::move(t));
    }
    r.files_.push_back(std::move(mapped));  // spans point into the mapping, which does not move
  }
  return r;
}

const GgufTensor* GgufReader::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const GgufTensor& GgufReader::get_or_throw(std::string_view name) const {
  const GgufTensor* t = find(name);
  if (t == nullptr) throw Error(ErrorKind::NotFound, path_ + ": tensor '" + std::string(name) + "' not found");
  return *t;
}

std::vector<std::string> GgufReader::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

}  // namespace akv
