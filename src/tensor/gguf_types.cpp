#include "tensor/gguf_types.h"

#include "base/check.h"

namespace akv {

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: return "UINT8";
    case GgufValueType::I8: return "INT8";
    case GgufValueType::U16: return "UINT16";
    case GgufValueType::I16: return "INT16";
    case GgufValueType::U32: return "UINT32";
    case GgufValueType::I32: return "INT32";
    case GgufValueType::F32: return "FLOAT32";
    case GgufValueType::Bool: return "BOOL";
    case GgufValueType::String: return "STRING";
    case GgufValueType::Array: return "ARRAY";
    case GgufValueType::U64: return "UINT64";
    case GgufValueType::I64: return "INT64";
    case GgufValueType::F64: return "FLOAT64";
  }
  return "?";
}

std::size_t gguf_value_type_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8:
    case GgufValueType::I8:
    case GgufValueType::Bool: return 1;
    case GgufValueType::U16:
    case GgufValueType::I16: return 2;
    case GgufValueType::U32:
    case GgufValueType::I32:
    case GgufValueType::F32: return 4;
    case GgufValueType::U64:
    case GgufValueType::I64:
    case GgufValueType::F64: return 8;
    case GgufValueType::String:
    case GgufValueType::Array: return 0;
  }
  return 0;
}

bool is_known_gguf_value_type(std::uint32_t raw) { return raw <= 12; }

std::optional<GgmlTypeTraits> find_ggml_type(std::uint32_t raw) {
  switch (static_cast<GgmlType>(raw)) {
    case GgmlType::F32: return GgmlTypeTraits{"F32", 1, 4, false};
    case GgmlType::F16: return GgmlTypeTraits{"F16", 1, 2, false};
    case GgmlType::BF16: return GgmlTypeTraits{"BF16", 1, 2, false};
    case GgmlType::F64: return GgmlTypeTraits{"F64", 1, 8, false};
    case GgmlType::I8: return GgmlTypeTraits{"I8", 1, 1, false};
    case GgmlType::I16: return GgmlTypeTraits{"I16", 1, 2, false};
    case GgmlType::I32: return GgmlTypeTraits{"I32", 1, 4, false};
    case GgmlType::I64: return GgmlTypeTraits{"I64", 1, 8, false};
    // 32-element blocks: an f16 scale (and min), packed quants.
    case GgmlType::Q4_0: return GgmlTypeTraits{"Q4_0", 32, 18, true};
    case GgmlType::Q4_1: return GgmlTypeTraits{"Q4_1", 32, 20, true};
    case GgmlType::Q5_0: return GgmlTypeTraits{"Q5_0", 32, 22, true};
    case GgmlType::Q5_1: return GgmlTypeTraits{"Q5_1", 32, 24, true};
    case GgmlType::Q8_0: return GgmlTypeTraits{"Q8_0", 32, 34, true};
    case GgmlType::IQ4_NL: return GgmlTypeTraits{"IQ4_NL", 32, 18, true};
    case GgmlType::MXFP4: return GgmlTypeTraits{"MXFP4", 32, 17, true};
    // 256-element super-blocks (k-quants).
    case GgmlType::Q2_K: return GgmlTypeTraits{"Q2_K", 256, 84, true};
    case GgmlType::Q3_K: return GgmlTypeTraits{"Q3_K", 256, 110, true};
    case GgmlType::Q4_K: return GgmlTypeTraits{"Q4_K", 256, 144, true};
    case GgmlType::Q5_K: return GgmlTypeTraits{"Q5_K", 256, 176, true};
    case GgmlType::Q6_K: return GgmlTypeTraits{"Q6_K", 256, 210, true};
    case GgmlType::IQ4_XS: return GgmlTypeTraits{"IQ4_XS", 256, 136, true};
  }
  return std::nullopt;
}

GgmlTypeTraits ggml_type_traits(GgmlType t) {
  const auto traits = find_ggml_type(static_cast<std::uint32_t>(t));
  AKV_CHECK(traits.has_value(), "ggml_type_traits: not a supported GgmlType");
  return *traits;
}

std::string_view ggml_type_name(GgmlType t) { return ggml_type_traits(t).name; }

}  // namespace akv
