// f32 -> GGUF blocks, one function per type (the rules are in quantize.h).
#include "tensor/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "tensor/quant_blocks.h"

namespace akv {

namespace {

using namespace quant;

// The smallest f16 >= v (v >= 0, finite).
std::uint16_t f16_up(float v) {
  std::uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v) ++h;
  return h;
}

template <typename Block>
void store(const Block& b, std::uint8_t* p) {
  std::memcpy(p, &b, sizeof(Block));
}

float abs_max(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

void q8_0(const float* x, std::uint8_t* p) {
  BlockQ8_0 b{};
  const float d = abs_max(x, kQK) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  for (int i = 0; i < kQK; ++i) b.qs[i] = static_cast<std::int8_t>(std::round(x[i] * id));
  store(b, p);
}

void q5_0(const float* x, std::uint8_t* p) {
  BlockQ5_0 b{};
  b.d = f16_up(abs_max(x, kQK) / 15.0f);
  const float d = f16_to_f32(b.d);
  std::uint32_t qh = 0;
  for (int i = 0; i < kQK; ++i) {
    const int q =
        d != 0.0f ? std::clamp(static_cast<int>(std::lround(x[i] / d)), -16, 15) + 16 : 16;
    if (i < 16)
      b.qs[i] = static_cast<std::uint8_t>(q & 0xf);
    else
      b.qs[i - 16] |= static_cast<std::uint8_t>((q & 0xf) << 4);
    qh |= static_cast<std::uint32_t>(q >> 4) << i;
  }
  std::memcpy(b.qh, &qh, 4);
  store(b, p);
}

void q6_k(const float* x, std::uint8_t* p) {
  BlockQ6_K b{};
  float s[16], s_max = 0.0f;
  for (int j = 0; j < 16; ++j) s_max = std::max(s_max, s[j] = abs_max(x + 16 * j, 16) / 31.0f);
  b.d = f16_up(s_max / 127.0f);
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 16; ++j) {
    const int sc = d != 0.0f ? std::min(127, static_cast<int>(std::ceil(s[j] / d))) : 0;
    b.scales[j] = static_cast<std::int8_t>(sc);
    const float dl = d * static_cast<float>(sc);
    for (int i = 16 * j; i < 16 * j + 16; ++i) {
      const int q =
          dl != 0.0f ? std::clamp(static_cast<int>(std::lround(x[i] / dl)), -32, 31) + 32 : 32;
      const int half = i / 128, r = i % 128;
      b.ql[half * 64 + r % 64] |= static_cast<std::uint8_t>((q & 0xf) << (4 * (r / 64)));
      b.qh[half * 32 + r % 32] |= static_cast<std::uint8_t>((q >> 4) << (2 * (r / 32)));
    }
  }
  store(b, p);
}

void q4_k(const float* x, std::uint8_t* p) {
  BlockQ4_K b{};
  float mn[8], mx[8], m_max = 0.0f;
  for (int s = 0; s < 8; ++s) {
    mn[s] = std::max(0.0f, -*std::min_element(x + 32 * s, x + 32 * s + 32));
    mx[s] = *std::max_element(x + 32 * s, x + 32 * s + 32);
    m_max = std::max(m_max, mn[s]);
  }
  b.dmin = f16_up(m_max / 63.0f);
  const float dmin = f16_to_f32(b.dmin);
  int q_min[8];
  float m_eff[8], need[8], need_max = 0.0f;
  for (int s = 0; s < 8; ++s) {
    q_min[s] = dmin != 0.0f ? std::min(63, static_cast<int>(std::ceil(mn[s] / dmin))) : 0;
    m_eff[s] = dmin * static_cast<float>(q_min[s]);  // >= mn[s]: x + m_eff >= 0
    need_max = std::max(need_max, need[s] = std::max(0.0f, mx[s] + m_eff[s]) / 15.0f);
  }
  b.d = f16_up(need_max / 63.0f);
  const float d = f16_to_f32(b.d);
  for (int s = 0; s < 8; ++s) {
    const int q_sc = d != 0.0f ? std::min(63, static_cast<int>(std::ceil(need[s] / d))) : 0;
    if (s < 4) {
      b.scales[s] = static_cast<std::uint8_t>(q_sc);
      b.scales[s + 4] = static_cast<std::uint8_t>(q_min[s]);
    } else {
      b.scales[s + 4] = static_cast<std::uint8_t>((q_sc & 0xf) | ((q_min[s] & 0xf) << 4));
      b.scales[s - 4] |= static_cast<std::uint8_t>((q_sc >> 4) << 6);
      b.scales[s] |= static_cast<std::uint8_t>((q_min[s] >> 4) << 6);
    }
    const float dl = d * static_cast<float>(q_sc);
    for (int j = 32 * s; j < 32 * s + 32; ++j) {
      const int q =
          dl != 0.0f ? std::clamp(static_cast<int>(std::lround((x[j] + m_eff[s]) / dl)), 0, 15) : 0;
      b.qs[(j / 64) * 32 + j % 32] |= static_cast<std::uint8_t>(q << (4 * ((j % 64) / 32)));
    }
  }
  store(b, p);
}

}  // namespace

bool can_quantize(DType t) {
  return t == DType::Q8_0 || t == DType::Q5_0 || t == DType::Q6_K || t == DType::Q4_K;
}

void quantize_row(DType t, std::span<const float> x, std::span<std::uint8_t> out) {
  AKV_CHECK(can_quantize(t), "quantize_row: unsupported type");
  const auto n = static_cast<std::int64_t>(x.size());
  AKV_CHECK(out.size() == dtype_row_bytes(t, n), "quantize_row: sizes");
  using Fn = void (*)(const float*, std::uint8_t*);
  const Fn fn = t == DType::Q8_0 ? q8_0 : t == DType::Q5_0 ? q5_0 : t == DType::Q6_K ? q6_k : q4_k;
  const std::int64_t be = dtype_block_elems(t), bb = dtype_block_bytes(t);
  for (std::int64_t i = 0; i < n / be; ++i) fn(x.data() + i * be, out.data() + i * bb);
}

}  // namespace akv
