// The repacked Q5_0 / Q8_0 / Q4_K layout (quant_repack.h): plain byte moves both ways, and
// the dispatch of its kernels.
#include "backend/cpu/quant_repack.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/quant_dot.h"
#include "base/check.h"
#include "tensor/quant_blocks.h"

namespace akv {

namespace {

constexpr std::size_t kScaleBytes = 2 * kRepackRows;  // d[8]
constexpr std::size_t kQhBytes = 32;                  // Q5_0's fifth-bit plane

// Byte j of the result: bit q = bit 4 q + j of qh (a transpose of the 8 x 4 bit matrix).
std::uint32_t fifth_bit_plane(std::uint32_t qh) {
  std::uint32_t plane = 0;
  for (int j = 0; j < 4; ++j) {
    std::uint32_t col = (qh >> j) & 0x11111111u;  // bit 4 q: q's bit
    col = (col | col >> 3) & 0x03030303u;         // byte k: q = 2 k, 2 k + 1 in bits 0, 1
    col = (col | col >> 6) & 0x000f000fu;         // q 0..3 in bits 0..3, q 4..7 in bits 16..19
    plane |= ((col & 0xfu) | (col >> 12)) << (8 * j);
  }
  return plane;
}

// The repacked bytes of block b of one group from its 8 GGUF rows (null: a padding row, zeros).
void repack_block_q5_0(const quant::BlockQ5_0* const rows[kRepackRows], std::int64_t b,
                       std::uint8_t* out) {
  std::uint8_t* qh = out + kScaleBytes;
  std::uint8_t* qs = qh + kQhBytes;
  for (int r = 0; r < kRepackRows; ++r) {
    quant::BlockQ5_0 w{};
    if (rows[r] != nullptr) w = rows[r][b];
    std::uint32_t bits;
    std::memcpy(&bits, w.qh, 4);
    const std::uint32_t plane = fifth_bit_plane(bits);
    std::memcpy(out + 2 * r, &w.d, 2);
    std::memcpy(qh + 4 * r, &plane, 4);  // little-endian: byte j at 4 r + j
    for (int v = 0; v < 4; ++v) std::memcpy(qs + 32 * v + 4 * r, w.qs + 4 * v, 4);
  }
}

void repack_block_q8_0(const quant::BlockQ8_0* const rows[kRepackRows], std::int64_t b,
                       std::uint8_t* out) {
  std::uint8_t* qs = out + kScaleBytes;
  for (int r = 0; r < kRepackRows; ++r) {
    quant::BlockQ8_0 w{};
    if (rows[r] != nullptr) w = rows[r][b];
    std::memcpy(out + 2 * r, &w.d, 2);
    for (int q = 0; q < 8; ++q) std::memcpy(qs + 32 * q + 4 * r, w.qs + 4 * q, 4);
  }
}

// Q4_K: d, dmin, the scale planes, then the 32 vectors of nibbles.
constexpr std::size_t kQ4kPlanes = 2 * kScaleBytes + 3 * 32;  // d[8], dmin[8], words[3][8]

void repack_block_q4_k(const quant::BlockQ4_K* const rows[kRepackRows], std::int64_t b,
                       std::uint8_t* out) {
  std::uint8_t* qs = out + kQ4kPlanes;
  for (int r = 0; r < kRepackRows; ++r) {
    quant::BlockQ4_K w{};
    if (rows[r] != nullptr) w = rows[r][b];
    std::memcpy(out + 2 * r, &w.d, 2);
    std::memcpy(out + kScaleBytes + 2 * r, &w.dmin, 2);
    for (int k = 0; k < 3; ++k)
      std::memcpy(out + 2 * kScaleBytes + 32 * k + 4 * r, w.scales + 4 * k, 4);
    for (int v = 0; v < 32; ++v) std::memcpy(qs + 32 * v + 4 * r, w.qs + 4 * v, 4);
  }
}

template <typename Block>
void repack_groups_of(const void* gguf, std::int64_t rows, std::int64_t nb, std::int64_t g0,
                      std::int64_t g1, void* out,
                      void (*repack_block)(const Block* const[kRepackRows], std::int64_t,
                                           std::uint8_t*)) {
  const auto* src = static_cast<const Block*>(gguf);
  auto* dst = static_cast<std::uint8_t*>(out);
  for (std::int64_t g = g0; g < g1; ++g) {
    const Block* group_rows[kRepackRows];
    for (int r = 0; r < kRepackRows; ++r) {
      const std::int64_t row = g * kRepackRows + r;
      group_rows[r] = row < rows ? src + row * nb : nullptr;
    }
    std::uint8_t* group = dst + static_cast<std::size_t>(g * kRepackRows * nb) * sizeof(Block);
    for (std::int64_t b = 0; b < nb; ++b)
      repack_block(group_rows, b,
                   group + static_cast<std::size_t>(b * kRepackRows) * sizeof(Block));
  }
}

}  // namespace

bool repackable(DType t) {
  return t == DType::Q5_0 || t == DType::Q8_0 || t == DType::Q4_K;
}

ActFormat repacked_act_format(DType t) {
  AKV_CHECK(repackable(t), "repacked_act_format: type");
  return t == DType::Q4_K ? ActFormat::Block256 : ActFormat::Block32;
}

std::size_t repacked_bytes(DType t, std::int64_t rows, std::int64_t cols) {
  AKV_CHECK(repackable(t), "repacked_bytes: type");
  const std::int64_t padded = (rows + kRepackRows - 1) / kRepackRows * kRepackRows;
  return static_cast<std::size_t>(padded) * dtype_row_bytes(t, cols);
}

void repack_groups(DType t, const void* gguf, std::int64_t rows, std::int64_t cols, std::int64_t g0,
                   std::int64_t g1, void* out) {
  AKV_CHECK(repackable(t) && cols % dtype_block_elems(t) == 0, "repack_groups: type or cols");
  const std::int64_t nb = cols / dtype_block_elems(t);
  if (t == DType::Q5_0)
    return repack_groups_of<quant::BlockQ5_0>(gguf, rows, nb, g0, g1, out, repack_block_q5_0);
  if (t == DType::Q4_K)
    return repack_groups_of<quant::BlockQ4_K>(gguf, rows, nb, g0, g1, out, repack_block_q4_k);
  repack_groups_of<quant::BlockQ8_0>(gguf, rows, nb, g0, g1, out, repack_block_q8_0);
}

void unpack_row(DType t, const void* repacked, std::int64_t cols, std::int64_t r, void* out) {
  const std::int64_t nb = cols / dtype_block_elems(t), g = r / kRepackRows, i = r % kRepackRows;
  const std::size_t block_bytes = static_cast<std::size_t>(dtype_block_bytes(t));
  const auto* group = static_cast<const std::uint8_t*>(repacked) +
                      static_cast<std::size_t>(g * kRepackRows * nb) * block_bytes;
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* src = group + static_cast<std::size_t>(b * kRepackRows) * block_bytes;
    if (t == DType::Q5_0) {
      quant::BlockQ5_0 w{};
      std::memcpy(&w.d, src + 2 * i, 2);
      const std::uint8_t* qh = src + kScaleBytes;
      std::uint32_t bits = 0;
      for (int j = 0; j < 4; ++j) {
        for (int q = 0; q < 8; ++q) bits |= std::uint32_t{(qh[4 * i + j] >> q) & 1u} << (4 * q + j);
        for (int v = 0; v < 4; ++v) w.qs[4 * v + j] = qh[kQhBytes + 32 * v + 4 * i + j];
      }
      std::memcpy(w.qh, &bits, 4);
      std::memcpy(static_cast<quant::BlockQ5_0*>(out) + b, &w, sizeof(w));
    } else if (t == DType::Q4_K) {
      quant::BlockQ4_K w{};
      std::memcpy(&w.d, src + 2 * i, 2);
      std::memcpy(&w.dmin, src + kScaleBytes + 2 * i, 2);
      for (int k = 0; k < 3; ++k)
        std::memcpy(w.scales + 4 * k, src + 2 * kScaleBytes + 32 * k + 4 * i, 4);
      for (int v = 0; v < 32; ++v) std::memcpy(w.qs + 4 * v, src + kQ4kPlanes + 32 * v + 4 * i, 4);
      std::memcpy(static_cast<quant::BlockQ4_K*>(out) + b, &w, sizeof(w));
    } else {
      AKV_CHECK(t == DType::Q8_0, "unpack_row: type");
      quant::BlockQ8_0 w{};
      std::memcpy(&w.d, src + 2 * i, 2);
      for (int q = 0; q < 8; ++q)
        for (int j = 0; j < 4; ++j)
          w.qs[4 * q + j] = static_cast<std::int8_t>(src[kScaleBytes + 32 * q + 4 * i + j]);
      std::memcpy(static_cast<quant::BlockQ8_0*>(out) + b, &w, sizeof(w));
    }
  }
}

RepackedDotFn find_repacked_dot(Isa isa, DType w) {
  switch (isa) {
    case Isa::Scalar:
      return nullptr;
    case Isa::Avx2:
      return find_repacked_dot_avx2(w);
    case Isa::Avx512:
      return cpu_has_vnni() ? find_repacked_dot_vnni(w) : find_repacked_dot_avx2(w);
  }
  return nullptr;
}

void dot_repacked_rows(RepackedDotFn dot, const void* w, std::size_t row_bytes,
                       std::int64_t n_blocks, const void* act_row, std::int64_t m0, std::int64_t m1,
                       float* out) {
  const auto* base = static_cast<const std::uint8_t*>(w);
  const std::size_t group_bytes = kRepackRows * row_bytes;
  for (std::int64_t m = m0; m < m1;) {
    const std::int64_t g = m / kRepackRows, first = g * kRepackRows;
    const std::uint8_t* group = base + static_cast<std::size_t>(g) * group_bytes;
    if (m == first && m1 - m >= kRepackRows) {
      const std::int64_t n_groups = (m1 - m) / kRepackRows;
      dot(group, n_blocks, act_row, n_groups, out + (m - m0));
      m += n_groups * kRepackRows;
      continue;
    }
    float all[kRepackRows];
    dot(group, n_blocks, act_row, 1, all);
    const std::int64_t end = std::min(m1, first + kRepackRows);
    std::copy(all + (m - first), all + (end - first), out + (m - m0));
    m = end;
  }
}

}  // namespace akv
