// Scalar dequantization, one function per block type (layouts in quant_blocks.h). Each output
// is one or two f32 operations in a fixed order (no fused multiply-add: the build compiles this
// file with -ffp-contract=off) so the results are bit-exact with the reference.
#include "tensor/dequantize.h"

#include <cstring>

#include "base/check.h"
#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"

namespace akv {

namespace {

using namespace quant;

template <typename Block>
Block load(const std::uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof(Block));
  return b;
}

float h(std::uint16_t bits) { return f16_to_f32(bits); }

// Element j of a 32-element block whose 4-bit codes sit as in Q4_0.
int nibble32(const std::uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4); }

void q4_0(const std::uint8_t* p, float* y) {
  const auto b = load<BlockQ4_0>(p);
  const float d = h(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(nibble32(b.qs, j) - 8);
}

void q4_1(const std::uint8_t* p, float* y) {
  const auto b = load<BlockQ4_1>(p);
  const float d = h(b.d), m = h(b.m);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(nibble32(b.qs, j)) + m;
}

std::uint32_t u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void q5_0(const std::uint8_t* p, float* y) {
  const auto b = load<BlockQ5_0>(p);
  const float d = h(b.d);
  const std::uint32_t qh = u32(b.qh);
  for (int j = 0; j < kQK; ++j) {
    const int q = nibble32(b.qs, j) | static_cast<int>(((qh >> j) & 1u) << 4);
    y[j] = d * static_cast<float>(q - 16);
  }
}

void q5_1(const std::uint8_t* p, float* y) {
  const auto b = load<BlockQ5_1>(p);
  const float d = h(b.d), m = h(b.m);
  const std::uint32_t qh = u32(b.qh);
  for (int j = 0; j < kQK; ++j) {
    const int q = nibble32(b.qs, j) | static_cast<int>(((qh >> j) & 1u) << 4);
    y[j] = d * static_cast<float>(q) + m;
  }
}

void q8_0(const std::uint8_t* p, float* y) {
  const auto b = load<BlockQ8_0>(p);
  const float d = h(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(b.qs[j]);
}

void iq4_nl(const std::uint8_t* p, float* y) {
  const auto b = load<BlockIq4Nl>(p);
  const float d = h(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(kIq4nlValues[nibble32(b.qs, j)]);
}

void mxfp4(const std::uint8_t* p, float* y) {
  const auto b = load<BlockMxfp4>(p);
  const float d = e8m0_to_f32_half(b.e);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(kMxfp4Values[nibble32(b.qs, j)]);
}

// Element j of a 256-element block: 2-bit code at byte (j/128)*32 + j%32, shift 2*((j%128)/32).
int crumb256(const std::uint8_t* qs, int j) {
  return (qs[(j / 128) * 32 + j % 32] >> (2 * ((j % 128) / 32))) & 3;
}

void q2_k(const std::uint8_t* p, float* y) {
  const auto b = load<BlockQ2_K>(p);
  const float d = h(b.d), dmin = h(b.dmin);
  for (int s = 0; s < kQK_K / 16; ++s) {
    const float dl = d * static_cast<float>(b.scales[s] & 0xf);
    const float ml = dmin * static_cast<float>(b.scales[s] >> 4);
    for (int j = s * 16; j < s * 16 + 16; ++j) y[j] = dl * static_cast<float>(crumb256(b.qs, j)) - ml;
  }
}

void q3_k(const std::uint8_t* p, float* y) {
  const auto b = load<BlockQ3_K>(p);
  const float d = h(b.d);
  for (int s = 0; s < kQK_K / 16; ++s) {
    // 6-bit scale s: low 4 bits from scales[s % 8] (nibble s / 8), high 2 from scales[8 + s % 4].
    const int lo = (b.scales[s % 8] >> (4 * (s / 8))) & 0xf;
    const int hi = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    const float dl = d * static_cast<float>((lo | (hi << 4)) - 32);
    for (int j = s * 16; j < s * 16 + 16; ++j) {
      const int high_bit = (b.hmask[j % 32] >> (j / 32)) & 1;
      const int q = crumb256(b.qs, j) - (high_bit ? 0 : 4);
      y[j] = dl * static_cast<float>(q);
    }
  }
}

// Scale and min of sub-block s (0..7) of Q4_K/Q5_K.
void k_scale_min(const std::uint8_t* sc, int s, int* scale, int* min) {
  if (s < 4) {
    *scale = sc[s] & 0x3f;
    *min = sc[s + 4] & 0x3f;
  } else {
    *scale = (sc[s + 4] & 0xf) | ((sc[s - 4] >> 2) & 0x30);
    *min = (sc[s + 4] >> 4) | ((sc[s] >> 2) & 0x30);
  }
}

// Element j of a 256-element block of 4-bit codes: byte (j/64)*32 + j%32, nibble (j%64)/32.
int nibble256(const std::uint8_t* qs, int j) { return (qs[(j / 64) * 32 + j % 32] >> (4 * ((j % 64) / 32))) & 0xf; }

void q4_k(const std::uint8_t* p, float* y) {
  const auto b = load<BlockQ4_K>(p);
  const float d = h(b.d), dmin = h(b.dmin);
  for (int s = 0; s < 8; ++s) {
    int sc = 0, m = 0;
    k_scale_min(b.scales, s, &sc, &m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    for (int j = s * 32; j < s * 32 + 32; ++j) y[j] = dl * static_cast<float>(nibble256(b.qs, j)) - ml;
  }
}

void q5_k(const std::uint8_t* p, float* y) {
  const auto b = load<BlockQ5_K>(p);
  const float d = h(b.d), dmin = h(b.dmin);
  for (int s = 0; s < 8; ++s) {
    int sc = 0, m = 0;
    k_scale_min(b.scales, s, &sc, &m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    for (int j = s * 32; j < s * 32 + 32; ++j) {
      const int q = nibble256(b.qs, j) | (((b.qh[j % 32] >> (j / 32)) & 1) << 4);
      y[j] = dl * static_cast<float>(q) - ml;
    }
  }
}

void q6_k(const std::uint8_t* p, float* y) {
  const auto b = load<BlockQ6_K>(p);
  const float d = h(b.d);
  for (int s = 0; s < kQK_K / 16; ++s) {
    const float dl = d * static_cast<float>(b.scales[s]);
    for (int j = s * 16; j < s * 16 + 16; ++j) {
      const int half = j / 128, r = j % 128;
      const int lo = (b.ql[half * 64 + r % 64] >> (4 * (r / 64))) & 0xf;
      const int hi = (b.qh[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
      y[j] = dl * static_cast<float>((lo | (hi << 4)) - 32);
    }
  }
}

void iq4_xs(const std::uint8_t* p, float* y) {
  const auto b = load<BlockIq4Xs>(p);
  const float d = h(b.d);
  for (int s = 0; s < kQK_K / 32; ++s) {
    const int lo = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0xf;
    const int hi = (b.scales_h >> (2 * s)) & 3;
    const float dl = d * static_cast<float>((lo | (hi << 4)) - 32);
    for (int j = 0; j < 32; ++j) {
      const int q = (b.qs[s * 16 + j % 16] >> (4 * (j / 16))) & 0xf;
      y[s * 32 + j] = dl * static_cast<float>(kIq4nlValues[q]);
    }
  }
}

template <typename T>
void plain(const std::uint8_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    dst[i] = static_cast<float>(v);
  }
}

using BlockFn = void (*)(const std::uint8_t*, float*);

BlockFn block_fn(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return q4_0;
    case GgmlType::Q4_1: return q4_1;
    case GgmlType::Q5_0: return q5_0;
    case GgmlType::Q5_1: return q5_1;
    case GgmlType::Q8_0: return q8_0;
    case GgmlType::Q2_K: return q2_k;
    case GgmlType::Q3_K: return q3_k;
    case GgmlType::Q4_K: return q4_k;
    case GgmlType::Q5_K: return q5_k;
    case GgmlType::Q6_K: return q6_k;
    case GgmlType::IQ4_NL: return iq4_nl;
    case GgmlType::IQ4_XS: return iq4_xs;
    case GgmlType::MXFP4: return mxfp4;
    default: return nullptr;
  }
}

}  // namespace

void dequantize(GgmlType type, std::span<const std::uint8_t> src, std::span<float> dst) {
  const GgmlTypeTraits tr = ggml_type_traits(type);
  const std::size_t n = dst.size();
  AKV_CHECK(n % static_cast<std::size_t>(tr.block_elems) == 0, "dequantize: not a whole number of blocks");
  const std::size_t n_blocks = n / static_cast<std::size_t>(tr.block_elems);
  AKV_CHECK(src.size() == n_blocks * static_cast<std::size_t>(tr.block_bytes), "dequantize: source size");
  switch (type) {
    case GgmlType::F32: std::memcpy(dst.data(), src.data(), n * 4); return;
    case GgmlType::F16: convert_to_f32(DType::F16, src.data(), dst.data(), n); return;
    case GgmlType::BF16: convert_to_f32(DType::BF16, src.data(), dst.data(), n); return;
    case GgmlType::F64: plain<double>(src.data(), dst.data(), n); return;
    case GgmlType::I8: plain<std::int8_t>(src.data(), dst.data(), n); return;
    case GgmlType::I16: plain<std::int16_t>(src.data(), dst.data(), n); return;
    case GgmlType::I32: plain<std::int32_t>(src.data(), dst.data(), n); return;
    case GgmlType::I64: plain<std::int64_t>(src.data(), dst.data(), n); return;
    default: break;
  }
  const BlockFn fn = block_fn(type);
  AKV_CHECK(fn != nullptr, "dequantize: unhandled type");
  for (std::size_t b = 0; b < n_blocks; ++b)
    fn(src.data() + b * static_cast<std::size_t>(tr.block_bytes), dst.data() + b * static_cast<std::size_t>(tr.block_elems));
}

std::vector<float> dequantize_tensor(const GgufTensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  dequantize(t.type, t.bytes, out);
  return out;
}

}  // namespace akv
