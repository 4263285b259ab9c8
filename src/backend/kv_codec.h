// Spill codecs: how one KV block is encoded when it leaves device memory (host and disk tiers)
// and decoded on the way back. A block's raw bytes are Backend::read_kv_block's layout,
// [n_layers][K, V][block_size, row_width] in the KV dtype: 2 * n_layers slabs of
// [block_size, row_width], one per layer's K or V.
//   native: the live dtype as is (bit-exact restore)
//   f32, bf16: every element converted (exact when it is the live dtype)
//   int8: keys per channel (one scale and minimum per channel over the slab's block_size
//         tokens: keys have outlier channels), values per token (one per row); 8-bit codes.
//   int4: keys per channel as int8, values per token in groups of 32 channels; 4-bit codes,
//         two a byte, low nibble first.
// Both are asymmetric: a group's codes 0 .. 2^bits - 1 stand for min + code * scale.
// Quantized slab bytes: the groups' parameters (bf16 scale, bf16 minimum; groups in row-major
// order), then the codes of the slab's elements in row-major order, padded to a whole byte.
// Every decoded element is within half a step (its group's stored scale / 2) of the original
// (finite inputs). Layouts, measured quality and the alternatives: docs/perf/kv_quality.md.
// A layout change takes a new SpillCodec id (the id is part of the model fingerprint, so files
// of an old layout are never decoded with a new one). Pure functions, any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "backend/kv_storage.h"
#include "tensor/dtype.h"

namespace akv {

// Id 3 was int8 with one scale per row (every K and V row); retired, never reuse it.
enum class SpillCodec : std::uint8_t { Native = 0, F32 = 1, BF16 = 2, Int8 = 4, Int4 = 5 };

// The codec with this numeric id (as stored in a block header), if any.
std::optional<SpillCodec> spill_codec_from_id(std::uint32_t id);
std::optional<SpillCodec> find_spill_codec(
    std::string_view name);  // "native", "f32", "bf16", "int8", "int4"
std::string_view spill_codec_name(SpillCodec codec);

struct BlockShape {
  std::int64_t n_rows = 0;     // 2 * n_layers * block_size
  std::int64_t row_width = 0;  // n_kv_heads * head_dim
  DType dtype = DType::F32;    // the live KV dtype (F32, BF16 or F16)
  // Tokens per block (rows per K or V slab); n_rows must be a multiple of 2 * block_size.
  // 0: n_rows / 2 (the block is taken as one layer's K and V).
  std::int64_t block_size = 0;

  std::size_t raw_bytes() const {
    return static_cast<std::size_t>(n_rows * row_width) * dtype_size(dtype);
  }
};

// The raw block shape of a KV layout.
inline BlockShape block_shape_of(const KvLayout& l) {
  return {.n_rows = 2 * l.n_layers * l.block_size,
          .row_width = l.row_width(),
          .dtype = l.dtype,
          .block_size = l.block_size};
}

// Bytes of the encoded form.
std::size_t encoded_bytes(SpillCodec codec, const BlockShape& shape);
// raw.size() == shape.raw_bytes(); out.size() == encoded_bytes(codec, shape).
// int8/int4 run vectorised (AVX2, picked at run time) where the CPU and the shape allow (a row
// width that is a multiple of 32, finite elements; else that slab takes the reference path),
// byte-equal to the reference. Single-threaded; callers spread blocks over their own threads.
void encode_block(SpillCodec codec, const BlockShape& shape, std::span<const std::byte> raw,
                  std::span<std::byte> out);
void decode_block(SpillCodec codec, const BlockShape& shape, std::span<const std::byte> in,
                  std::span<std::byte> raw);
// The plain scalar path the vectorised one proves itself against (parity tests, benchmarks).
void encode_block_reference(SpillCodec codec, const BlockShape& shape,
                            std::span<const std::byte> raw, std::span<std::byte> out);
void decode_block_reference(SpillCodec codec, const BlockShape& shape,
                            std::span<const std::byte> in, std::span<std::byte> raw);
// The kernels encode_block/decode_block run on this CPU: "avx2" or "scalar".
std::string_view codec_kernels_name();

// True when the codec's encoded form is the raw form itself (native, or f32/bf16 of that live
// dtype): the block's bytes go to and from the tier as they are.
bool codec_is_raw(SpillCodec codec, DType live);

// The encoded form's geometry, for decoders and encoders outside this file (the CUDA backend's
// kernels): the block is n_slabs slabs [slab_tokens, row_width], even ones keys, odd ones values.
// Element codecs (bits 0) store each slab's elements in `elem_dtype`, slab i at i * key_bytes.
// Quantized ones store a key slab (key_bytes) then a value slab (value_bytes) per layer; a slab
// is its groups' parameters (bf16 scale, bf16 minimum, 4 bytes a group, row-major over the
// group grid) then its codes; a group is group_tokens x group_channels elements (edges smaller).
struct EncodedLayout {
  std::int64_t n_slabs = 0, slab_tokens = 0, row_width = 0;
  int bits = 0;  // 0: element codec; 8 or 4: quantized
  DType elem_dtype = DType::F32;
  std::size_t key_bytes = 0, value_bytes = 0;
  std::int64_t key_group_tokens = 0, key_group_channels = 0;
  std::int64_t value_group_tokens = 0, value_group_channels = 0;
  // Byte offset of slab i in the encoded block.
  std::size_t slab_offset(std::int64_t i) const {
    const auto pair = static_cast<std::size_t>(i / 2);
    return bits == 0 ? static_cast<std::size_t>(i) * key_bytes
                     : pair * (key_bytes + value_bytes) + (i % 2 == 0 ? 0 : key_bytes);
  }
};
EncodedLayout encoded_layout(SpillCodec codec, const BlockShape& shape);

}  // namespace akv
