// A tiny GGUF writer for tests: builds the bytes of a v2/v3 file from key/value pairs and
// tensors, with knobs to corrupt each part (magic, version, counts, offsets). Test-only: it
// trusts its input and writes exactly what it is told.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tensor/gguf_types.h"

namespace akv::test {

class GgufBytes {
 public:
  // Appends little-endian scalars and GGUF strings to a byte string.
  static void put(std::string& out, std::uint64_t v, int n_bytes) {
    for (int i = 0; i < n_bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  static void put_str(std::string& out, const std::string& s) {
    put(out, s.size(), 8);
    out += s;
  }
  static void put_f32(std::string& out, float f) {
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    put(out, b, 4);
  }
};

class GgufTestWriter {
 public:
  struct Tensor {
    std::string name;
    GgmlType type = GgmlType::F32;
    std::vector<std::uint64_t> dims;  // ggml order, innermost first
    std::string data;
    std::int64_t offset = -1;  // -1: next aligned offset
  };

  std::string magic = "GGUF";
  std::uint32_t version = 3;
  std::uint32_t alignment = 32;  // used for layout; add general.alignment to change it in-file
  std::int64_t n_kv_override = -1;
  std::int64_t n_tensors_override = -1;

  // Raw key/value: `value` is the encoded value bytes of type `type`.
  void kv_raw(const std::string& key, GgufValueType type, const std::string& value) {
    GgufBytes::put_str(kv_, key);
    GgufBytes::put(kv_, static_cast<std::uint32_t>(type), 4);
    kv_ += value;
    ++n_kv_;
  }
  void kv_u32(const std::string& key, std::uint32_t v) { kv_raw(key, GgufValueType::U32, enc(v, 4)); }
  void kv_i32(const std::string& key, std::int32_t v) {
    kv_raw(key, GgufValueType::I32, enc(static_cast<std::uint32_t>(v), 4));
  }
  void kv_u64(const std::string& key, std::uint64_t v) { kv_raw(key, GgufValueType::U64, enc(v, 8)); }
  void kv_f32(const std::string& key, float v) {
    std::string s;
    GgufBytes::put_f32(s, v);
    kv_raw(key, GgufValueType::F32, s);
  }
  void kv_bool(const std::string& key, bool v) { kv_raw(key, GgufValueType::Bool, enc(v ? 1 : 0, 1)); }
  void kv_str(const std::string& key, const std::string& v) {
    std::string s;
    GgufBytes::put_str(s, v);
    kv_raw(key, GgufValueType::String, s);
  }
  void kv_str_array(const std::string& key, const std::vector<std::string>& v) {
    std::string s = array_header(GgufValueType::String, v.size());
    for (const std::string& e : v) GgufBytes::put_str(s, e);
    kv_raw(key, GgufValueType::Array, s);
  }
  void kv_i32_array(const std::string& key, const std::vector<std::int32_t>& v) {
    std::string s = array_header(GgufValueType::I32, v.size());
    for (std::int32_t e : v) GgufBytes::put(s, static_cast<std::uint32_t>(e), 4);
    kv_raw(key, GgufValueType::Array, s);
  }
  void kv_f32_array(const std::string& key, const std::vector<float>& v) {
    std::string s = array_header(GgufValueType::F32, v.size());
    for (float e : v) GgufBytes::put_f32(s, e);
    kv_raw(key, GgufValueType::Array, s);
  }
  static std::string array_header(GgufValueType elem, std::uint64_t n) {
    std::string s;
    GgufBytes::put(s, static_cast<std::uint32_t>(elem), 4);
    GgufBytes::put(s, n, 8);
    return s;
  }
  static std::string enc(std::uint64_t v, int n) {
    std::string s;
    GgufBytes::put(s, v, n);
    return s;
  }

  void tensor(Tensor t) { tensors_.push_back(std::move(t)); }
  void tensor_f32(const std::string& name, std::vector<std::uint64_t> dims, const std::vector<float>& values) {
    std::string data(values.size() * 4, '\0');
    std::memcpy(data.data(), values.data(), data.size());
    tensors_.push_back({name, GgmlType::F32, std::move(dims), std::move(data), -1});
  }

  std::string bytes() const {
    std::string out = magic;
    GgufBytes::put(out, version, 4);
    GgufBytes::put(out, n_tensors_override >= 0 ? static_cast<std::uint64_t>(n_tensors_override) : tensors_.size(), 8);
    GgufBytes::put(out, n_kv_override >= 0 ? static_cast<std::uint64_t>(n_kv_override) : n_kv_, 8);
    out += kv_;
    std::vector<std::uint64_t> offsets;
    std::uint64_t next = 0;
    for (const Tensor& t : tensors_) {
      const std::uint64_t off = t.offset >= 0 ? static_cast<std::uint64_t>(t.offset) : next;
      offsets.push_back(off);
      next = align(std::max(next, off + t.data.size()));
      GgufBytes::put_str(out, t.name);
      GgufBytes::put(out, t.dims.size(), 4);
      for (std::uint64_t d : t.dims) GgufBytes::put(out, d, 8);
      GgufBytes::put(out, static_cast<std::uint32_t>(t.type), 4);
      GgufBytes::put(out, off, 8);
    }
    out.resize(align(out.size()), '\0');
    const std::size_t data_start = out.size();
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].data.empty()) continue;  // lets a test point an offset far outside
      const std::size_t at = data_start + offsets[i];
      if (out.size() < at + tensors_[i].data.size()) out.resize(at + tensors_[i].data.size(), '\0');
      std::memcpy(out.data() + at, tensors_[i].data.data(), tensors_[i].data.size());
    }
    return out;
  }

  void write(const std::string& path) const { std::ofstream(path, std::ios::binary) << bytes(); }

 private:
  std::uint64_t align(std::uint64_t x) const { return (x + alignment - 1) / alignment * alignment; }

  std::string kv_;
  std::uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace akv::test
