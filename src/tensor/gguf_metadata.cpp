// GGUF metadata values and the typed getters of GgufMetadata (gguf.h): integer getters accept
// any integer type whose value fits, float getters F32 and F64; errors name the file and key.
#include <cstring>

#include "base/error.h"
#include "tensor/gguf.h"

namespace akv {

namespace {

std::int64_t sign_extend(std::uint64_t v, int n_bytes) {
  if (n_bytes == 8) return static_cast<std::int64_t>(v);
  const int shift = 64 - 8 * n_bytes;
  return static_cast<std::int64_t>(v << shift) >> shift;
}

}  // namespace

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::U8:
    case GgufValueType::I8:
    case GgufValueType::U16:
    case GgufValueType::I16:
    case GgufValueType::U32:
    case GgufValueType::I32:
    case GgufValueType::U64:
    case GgufValueType::I64:
      return true;
    default:
      return false;
  }
}

std::string GgufValue::type_string() const {
  if (type != GgufValueType::Array) return std::string(gguf_value_type_name(type));
  return "ARRAY[" + std::string(gguf_value_type_name(elem_type)) + "]";
}

// ---- getters ----

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
    throw Error(ErrorKind::NotFound,
                file_ + ": metadata key '" + std::string(key) + "' is missing");
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
    throw Error(ErrorKind::BadFormat,
                file + ": metadata key '" + std::string(key) + "' value " +
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
    case GgufValueType::F64:
      std::memcpy(&e.f, &bits, 8);
      break;
    case GgufValueType::I8:
    case GgufValueType::I16:
    case GgufValueType::I32:
    case GgufValueType::I64:
      e.i = sign_extend(bits, static_cast<int>(n));
      break;
    default:
      e.u = bits;
      break;
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
  return static_cast<std::uint32_t>(
      integer_in(file_, key, get_or_throw(key), 0, UINT32_MAX, "UINT32"));
}

std::uint64_t GgufMetadata::get_u64(std::string_view key) const {
  const GgufValue& v = get_or_throw(key);
  if (v.type == GgufValueType::U64) return v.u;
  return static_cast<std::uint64_t>(integer_in(file_, key, v, 0, INT64_MAX, "UINT64"));
}

std::int32_t GgufMetadata::get_i32(std::string_view key) const {
  return static_cast<std::int32_t>(
      integer_in(file_, key, get_or_throw(key), INT32_MIN, INT32_MAX, "INT32"));
}

std::int64_t GgufMetadata::get_i64(std::string_view key) const {
  return integer_in(file_, key, get_or_throw(key), INT64_MIN, INT64_MAX, "INT64");
}

double GgufMetadata::get_f64(std::string_view key) const {
  const GgufValue& v = get_or_throw(key);
  if (v.type != GgufValueType::F32 && v.type != GgufValueType::F64)
    wrong_type(file_, key, v, "FLOAT32");
  return v.f;
}

float GgufMetadata::get_f32(std::string_view key) const {
  return static_cast<float>(get_f64(key));
}

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
  if (v.type != GgufValueType::Array || v.elem_type == GgufValueType::F32 ||
      v.elem_type == GgufValueType::F64 || v.elem_type == GgufValueType::Bool ||
      gguf_value_type_size(v.elem_type) == 0)
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
  for (std::uint64_t i = 0; i < v.n_elems; ++i)
    out.push_back(static_cast<float>(array_elem(v, i).f));
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

}  // namespace akv
