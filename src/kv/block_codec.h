// Spill codecs: how one KV block is encoded when it leaves device memory (host and disk tiers)
// and decoded on the way back. A block's raw bytes are Backend::read_kv_block's layout,
// [n_layers][K, V][block_size, row_width] in the KV dtype, i.e. `n_rows` rows of `row_width`.
//   native: the live dtype as is (bit-exact restore)
//   f32, bf16: every element converted (exact when it is the live dtype)
//   int8: per row (one token of one layer's K or V) a f32 absmax scale, then row_width int8
// Pure functions, any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "backend/kv_storage.h"
#include "tensor/dtype.h"

namespace akv {

enum class SpillCodec : std::uint8_t { Native = 0, F32 = 1, BF16 = 2, Int8 = 3 };

std::optional<SpillCodec> find_spill_codec(
    std::string_view name);  // "native", "f32", "bf16", "int8"
std::string_view spill_codec_name(SpillCodec codec);

struct BlockShape {
  std::int64_t n_rows = 0;     // 2 * n_layers * block_size
  std::int64_t row_width = 0;  // n_kv_heads * head_dim
  DType dtype = DType::F32;    // the live KV dtype (F32, BF16 or F16)

  std::size_t raw_bytes() const {
    return static_cast<std::size_t>(n_rows * row_width) * dtype_size(dtype);
  }
};

// The raw block shape of a KV layout.
inline BlockShape block_shape_of(const KvLayout& l) {
  return {.n_rows = 2 * l.n_layers * l.block_size, .row_width = l.row_width(), .dtype = l.dtype};
}

// Bytes of the encoded form.
std::size_t encoded_bytes(SpillCodec codec, const BlockShape& shape);
// raw.size() == shape.raw_bytes(); out.size() == encoded_bytes(codec, shape).
void encode_block(SpillCodec codec, const BlockShape& shape, std::span<const std::byte> raw,
                  std::span<std::byte> out);
void decode_block(SpillCodec codec, const BlockShape& shape, std::span<const std::byte> in,
                  std::span<std::byte> raw);

}  // namespace akv
