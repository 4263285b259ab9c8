// Activation quantization and the dispatch of the integer dot kernels (see quant_dot.h).
#include "backend/cpu/quant_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"

namespace akv {

ActFormat act_format(DType w) {
  switch (w) {
    case DType::Q8_0:
      return ActFormat::Block32;
    case DType::Q4_0:
    case DType::Q5_0:
      return ActFormat::Pair32;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return ActFormat::Block256;
    default:
      return ActFormat::None;
  }
}

std::size_t act_row_bytes(ActFormat format, std::int64_t k) {
  switch (format) {
    case ActFormat::Block32:
      AKV_CHECK(k % 32 == 0, "act_row_bytes: k");
      return static_cast<std::size_t>(k / 32) * sizeof(ActBlock32);
    case ActFormat::Pair32:
      AKV_CHECK(k % 32 == 0, "act_row_bytes: k");
      return static_cast<std::size_t>((k / 32 + 1) / 2) * sizeof(ActPair32);
    case ActFormat::Block256:
      AKV_CHECK(k % 256 == 0, "act_row_bytes: k");
      return static_cast<std::size_t>(k / 256) * sizeof(ActBlock256);
    case ActFormat::None:
      break;
  }
  AKV_CHECK(false, "act_row_bytes: no format");
  return 0;
}

namespace {

// qs[0, n) = round(x / d) with d = max|x| / 127; returns d.
float quantize_block_scalar(const float* x, int n, std::int8_t* qs) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < n; ++i)
    qs[i] = static_cast<std::int8_t>(std::lrint(std::clamp(x[i] * id, -127.0f, 127.0f)));
  return d;
}

}  // namespace

void quantize_act_row(Isa isa, ActFormat format, const float* x, std::int64_t k, void* out) {
  const auto quantize_block = isa == Isa::Scalar ? quantize_block_scalar : quantize_block_avx2;
  if (format == ActFormat::Block32) {
    auto* b = static_cast<ActBlock32*>(out);
    for (std::int64_t i = 0; i < k / 32; ++i, x += 32) {
      b[i].d = quantize_block(x, 32, b[i].qs);
      std::int32_t s = 0;
      for (std::int8_t q : b[i].qs) s += q;
      b[i].sum = s;
    }
    return;
  }
  if (format == ActFormat::Pair32) {
    auto* p = static_cast<ActPair32*>(out);
    const std::int64_t nb = k / 32;
    for (std::int64_t i = 0; i < nb; i += 2) {
      ActPair32& pair = p[i / 2];
      for (int b = 0; b < 2; ++b) {
        std::int8_t qs[32] = {};
        const float d = i + b < nb ? quantize_block(x + 32 * (i + b), 32, qs) : 0.0f;
        std::memcpy(pair.lo + 16 * b, qs, 16);
        std::memcpy(pair.hi + 16 * b, qs + 16, 16);
        std::int32_t s = 0;
        for (std::int8_t q : qs) s += q;
        for (int l = 4 * b; l < 4 * b + 4; ++l) {
          pair.neg_sum[l] = -s;
          pair.d[l] = d;
        }
      }
    }
    return;
  }
  AKV_CHECK(format == ActFormat::Block256, "quantize_act_row: no format");
  auto* b = static_cast<ActBlock256*>(out);
  for (std::int64_t i = 0; i < k / 256; ++i, x += 256) {
    b[i].d = quantize_block(x, 256, b[i].qs);
    for (int j = 0; j < 16; ++j) {
      std::int32_t s = 0;
      for (int t = 0; t < 16; ++t) s += b[i].qs[16 * j + t];
      b[i].bsums[j] = static_cast<std::int16_t>(s);
    }
  }
}

QuantDotFn find_quant_dot(Isa isa, DType w) {
  switch (isa) {
    case Isa::Scalar:
      return nullptr;
    case Isa::Avx2:
      return find_quant_dot_avx2(w);
    case Isa::Avx512:
      return cpu_has_vnni() ? find_quant_dot_vnni(w) : find_quant_dot_avx2(w);
  }
  return nullptr;
}

bool cpu_has_vnni() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

}  // namespace akv
