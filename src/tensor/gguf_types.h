// GGUF's enums: metadata value types and ggml tensor types, with the block geometry of each
// tensor type we read. Numbering follows the GGUF specification (ggml/docs/gguf.md); a type
// not listed here is rejected by the reader as unsupported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace akv {

// Metadata value types, as stored (u32) in the file.
enum class GgufValueType : std::uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

// The spec's name ("UINT32", "STRING", ...), or "?" for a value outside the enum.
std::string_view gguf_value_type_name(GgufValueType t);
// Bytes of one element of a fixed-size type; 0 for String and Array (variable size).
std::size_t gguf_value_type_size(GgufValueType t);
bool is_known_gguf_value_type(std::uint32_t raw);

// Tensor element types (ggml_type), as stored (u32) in a tensor info.
enum class GgmlType : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
};

// A tensor type's storage: `block_elems` consecutive elements of a row take `block_bytes`.
// Rows (ne[0]) must be a whole number of blocks.
struct GgmlTypeTraits {
  std::string_view name;        // ggml's spelling: "Q4_K", "BF16", ...
  std::int64_t block_elems = 0;  // 1 for plain types, 32 or 256 for quantized blocks
  std::int64_t block_bytes = 0;
  bool quantized = false;
};

// nullopt for a ggml type we do not read (including types the spec has and we do not support).
std::optional<GgmlTypeTraits> find_ggml_type(std::uint32_t raw);
// Traits of a known type (AKV_CHECK that it is one of the enum's values).
GgmlTypeTraits ggml_type_traits(GgmlType t);
std::string_view ggml_type_name(GgmlType t);

}  // namespace akv
