#include "tensor/dtype.h"

#include <cmath>

#include "base/check.h"

namespace akv {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::I8: return 1;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::MXFP4: AKV_CHECK(false, "dtype_size: a quantized dtype has no element size");
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::MXFP4: return ggml_type_name(*find_ggml_type_of(t));
  }
  return "?";
}

std::optional<DType> find_dtype(std::string_view name) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64,
                  DType::U8, DType::I8})
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

bool dtype_is_quantized(DType t) {
  const auto g = find_ggml_type_of(t);
  return g.has_value() && ggml_type_traits(*g).quantized;
}

std::int64_t dtype_block_elems(DType t) {
  return dtype_is_quantized(t) ? ggml_type_traits(*find_ggml_type_of(t)).block_elems : 1;
}

std::int64_t dtype_block_bytes(DType t) {
  return dtype_is_quantized(t) ? ggml_type_traits(*find_ggml_type_of(t)).block_bytes
                               : static_cast<std::int64_t>(dtype_size(t));
}

std::size_t dtype_row_bytes(DType t, std::int64_t cols) {
  const std::int64_t block = dtype_block_elems(t);
  AKV_CHECK(cols >= 0 && cols % block == 0, "dtype_row_bytes: cols not a whole number of blocks");
  return static_cast<std::size_t>(cols / block * dtype_block_bytes(t));
}

std::optional<GgmlType> find_ggml_type_of(DType t) {
  switch (t) {
    case DType::F32: return GgmlType::F32;
    case DType::F16: return GgmlType::F16;
    case DType::BF16: return GgmlType::BF16;
    case DType::F64: return GgmlType::F64;
    case DType::I32: return GgmlType::I32;
    case DType::I64: return GgmlType::I64;
    case DType::U8: return std::nullopt;
    case DType::I8: return GgmlType::I8;
    case DType::Q4_0: return GgmlType::Q4_0;
    case DType::Q4_1: return GgmlType::Q4_1;
    case DType::Q5_0: return GgmlType::Q5_0;
    case DType::Q5_1: return GgmlType::Q5_1;
    case DType::Q8_0: return GgmlType::Q8_0;
    case DType::Q2_K: return GgmlType::Q2_K;
    case DType::Q3_K: return GgmlType::Q3_K;
    case DType::Q4_K: return GgmlType::Q4_K;
    case DType::Q5_K: return GgmlType::Q5_K;
    case DType::Q6_K: return GgmlType::Q6_K;
    case DType::IQ4_NL: return GgmlType::IQ4_NL;
    case DType::IQ4_XS: return GgmlType::IQ4_XS;
    case DType::MXFP4: return GgmlType::MXFP4;
  }
  return std::nullopt;
}

std::optional<DType> find_dtype_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return DType::F32;
    case GgmlType::F16: return DType::F16;
    case GgmlType::BF16: return DType::BF16;
    case GgmlType::F64: return DType::F64;
    case GgmlType::I8: return DType::I8;
    case GgmlType::I16: return std::nullopt;
    case GgmlType::I32: return DType::I32;
    case GgmlType::I64: return DType::I64;
    case GgmlType::Q4_0: return DType::Q4_0;
    case GgmlType::Q4_1: return DType::Q4_1;
    case GgmlType::Q5_0: return DType::Q5_0;
    case GgmlType::Q5_1: return DType::Q5_1;
    case GgmlType::Q8_0: return DType::Q8_0;
    case GgmlType::Q2_K: return DType::Q2_K;
    case GgmlType::Q3_K: return DType::Q3_K;
    case GgmlType::Q4_K: return DType::Q4_K;
    case GgmlType::Q5_K: return DType::Q5_K;
    case GgmlType::Q6_K: return DType::Q6_K;
    case GgmlType::IQ4_NL: return DType::IQ4_NL;
    case GgmlType::IQ4_XS: return DType::IQ4_XS;
    case GgmlType::MXFP4: return DType::MXFP4;
  }
  return std::nullopt;
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: value = mant * 2^-24.
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds to infinity
  if (a < 6.103515625e-05f) {
    // Subnormal range: quantize to multiples of 2^-24, ties to even.
    const float q = std::nearbyint(a * 16777216.0f);
    return sign | static_cast<std::uint16_t>(q);
  }
  std::uint32_t bits = std::bit_cast<std::uint32_t>(a);
  bits += 0xfffu + ((bits >> 13) & 1u);  // round mantissa to 10 bits, ties to even
  const std::uint32_t exp = (bits >> 23) - 112;
  return sign | static_cast<std::uint16_t>((exp << 10) | ((bits >> 13) & 0x3ffu));
}

void convert_to_f32(DType t, const void* src, float* dst, std::size_t n) {
  // Elements are read with memcpy: a tensor in a file (a GGUF with a small general.alignment)
  // need not be aligned to its element size.
  const auto* bytes = static_cast<const unsigned char*>(src);
  const auto element = [bytes]<typename T>(std::size_t i, T) {
    T v;
    std::memcpy(&v, bytes + i * sizeof(T), sizeof(T));
    return v;
  };
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::BF16:
      for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(element(i, std::uint16_t{}));
      return;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(element(i, std::uint16_t{}));
      return;
    case DType::F64:
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(element(i, double{}));
      return;
    default:
      AKV_CHECK(false, "convert_to_f32: not a floating-point dtype");
  }
}

}  // namespace akv
