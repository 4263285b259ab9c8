#include "kv/block_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"

namespace akv {

namespace {

float load_elem(const std::byte* row, DType t, std::int64_t i) {
  switch (t) {
    case DType::F32: {
      float f;
      std::memcpy(&f, row + i * 4, 4);
      return f;
    }
    case DType::BF16:
    case DType::F16: {
      std::uint16_t h;
      std::memcpy(&h, row + i * 2, 2);
      return t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    default:
      AKV_CHECK(false, "KV dtype must be F32, BF16 or F16");
  }
  return 0.0f;
}

void store_elem(std::byte* row, DType t, std::int64_t i, float f) {
  switch (t) {
    case DType::F32:
      std::memcpy(row + i * 4, &f, 4);
      return;
    case DType::BF16:
    case DType::F16: {
      const std::uint16_t h = t == DType::BF16 ? f32_to_bf16(f) : f32_to_f16(f);
      std::memcpy(row + i * 2, &h, 2);
      return;
    }
    default:
      AKV_CHECK(false, "KV dtype must be F32, BF16 or F16");
  }
}

// Element-wise conversion between two float dtypes (memcpy when equal).
void convert(std::span<const std::byte> in, DType from, std::span<std::byte> out, DType to,
             std::int64_t n) {
  if (from == to) {
    std::memcpy(out.data(), in.data(), in.size());
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) store_elem(out.data(), to, i, load_elem(in.data(), from, i));
}

}  // namespace

std::optional<SpillCodec> find_spill_codec(std::string_view name) {
  if (name == "native") return SpillCodec::Native;
  if (name == "f32") return SpillCodec::F32;
  if (name == "bf16") return SpillCodec::BF16;
  if (name == "int8") return SpillCodec::Int8;
  return std::nullopt;
}

std::string_view spill_codec_name(SpillCodec codec) {
  switch (codec) {
    case SpillCodec::Native:
      return "native";
    case SpillCodec::F32:
      return "f32";
    case SpillCodec::BF16:
      return "bf16";
    case SpillCodec::Int8:
      return "int8";
  }
  return "?";
}

std::size_t encoded_bytes(SpillCodec codec, const BlockShape& s) {
  const auto n = static_cast<std::size_t>(s.n_rows * s.row_width);
  switch (codec) {
    case SpillCodec::Native:
      return s.raw_bytes();
    case SpillCodec::F32:
      return n * 4;
    case SpillCodec::BF16:
      return n * 2;
    case SpillCodec::Int8:
      return static_cast<std::size_t>(s.n_rows) * (4 + static_cast<std::size_t>(s.row_width));
  }
  return 0;
}

void encode_block(SpillCodec codec, const BlockShape& s, std::span<const std::byte> raw,
                  std::span<std::byte> out) {
  AKV_CHECK(raw.size() == s.raw_bytes() && out.size() == encoded_bytes(codec, s),
            "encode_block sizes");
  const std::int64_t n = s.n_rows * s.row_width;
  switch (codec) {
    case SpillCodec::Native:
      std::memcpy(out.data(), raw.data(), raw.size());
      return;
    case SpillCodec::F32:
      convert(raw, s.dtype, out, DType::F32, n);
      return;
    case SpillCodec::BF16:
      convert(raw, s.dtype, out, DType::BF16, n);
      return;
    case SpillCodec::Int8:
      break;
  }
  const std::size_t in_row = static_cast<std::size_t>(s.row_width) * dtype_size(s.dtype);
  const std::size_t out_row = 4 + static_cast<std::size_t>(s.row_width);
  std::vector<float> x(static_cast<std::size_t>(s.row_width));
  for (std::int64_t r = 0; r < s.n_rows; ++r) {
    const std::byte* src = raw.data() + r * in_row;
    std::byte* dst = out.data() + r * out_row;
    float absmax = 0.0f;
    for (std::int64_t c = 0; c < s.row_width; ++c) {
      x[c] = load_elem(src, s.dtype, c);
      absmax = std::max(absmax, std::fabs(x[c]));
    }
    const float scale = absmax > 0.0f ? absmax / 127.0f : 1.0f;
    std::memcpy(dst, &scale, 4);
    for (std::int64_t c = 0; c < s.row_width; ++c) {
      const float q = std::nearbyint(std::clamp(x[c] / scale, -127.0f, 127.0f));
      dst[4 + c] = static_cast<std::byte>(static_cast<std::int8_t>(q));
    }
  }
}

void decode_block(SpillCodec codec, const BlockShape& s, std::span<const std::byte> in,
                  std::span<std::byte> raw) {
  AKV_CHECK(raw.size() == s.raw_bytes() && in.size() == encoded_bytes(codec, s),
            "decode_block sizes");
  const std::int64_t n = s.n_rows * s.row_width;
  switch (codec) {
    case SpillCodec::Native:
      std::memcpy(raw.data(), in.data(), in.size());
      return;
    case SpillCodec::F32:
      convert(in, DType::F32, raw, s.dtype, n);
      return;
    case SpillCodec::BF16:
      convert(in, DType::BF16, raw, s.dtype, n);
      return;
    case SpillCodec::Int8:
      break;
  }
  const std::size_t out_row = static_cast<std::size_t>(s.row_width) * dtype_size(s.dtype);
  const std::size_t in_row = 4 + static_cast<std::size_t>(s.row_width);
  for (std::int64_t r = 0; r < s.n_rows; ++r) {
    const std::byte* src = in.data() + r * in_row;
    std::byte* dst = raw.data() + r * out_row;
    float scale;
    std::memcpy(&scale, src, 4);
    for (std::int64_t c = 0; c < s.row_width; ++c)
      store_elem(dst, s.dtype, c, scale * static_cast<float>(static_cast<std::int8_t>(src[4 + c])));
  }
}

}  // namespace akv
