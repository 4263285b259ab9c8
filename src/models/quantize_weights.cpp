// Load-time quantization of a checkpoint's matrices (see quantize_weights.h).
#include "models/quantize_weights.h"

#include <memory>
#include <vector>

#include "base/error.h"
#include "tensor/quantize.h"

namespace akv {

namespace {

// The projection matrices of the dense families, the embeddings and lm_head.
bool is_quantized_matrix(const TensorInfo& t) {
  if (t.shape.size() != 2) return false;
  if (t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight") return true;
  return t.name.starts_with("model.layers.") && t.name.ends_with("_proj.weight") &&
         (t.name.find(".self_attn.") != std::string::npos ||
          t.name.find(".mlp.") != std::string::npos);
}

}  // namespace

std::optional<DType> find_quantize_type(std::string_view name) {
  if (name == "q8_0") return DType::Q8_0;
  if (name == "q6_k") return DType::Q6_K;
  if (name == "q4_k") return DType::Q4_K;
  return std::nullopt;
}

std::optional<DType> quantized_type_for(DType type, std::int64_t cols) {
  if (cols % dtype_block_elems(type) == 0) return type;
  const DType fallback = type == DType::Q6_K   ? DType::Q8_0
                         : type == DType::Q4_K ? DType::Q5_0
                                               : type;
  if (cols % dtype_block_elems(fallback) == 0) return fallback;
  return std::nullopt;
}

SafetensorsReader quantize_weights(SafetensorsReader weights, const ModelConfig& c, DType type,
                                   const TakesQuantized& takes) {
  if (c.family != Family::Llama && c.family != Family::Qwen2 && c.family != Family::Qwen3 &&
      c.family != Family::Gemma3 && c.family != Family::Phi3)
    throw Error(ErrorKind::Unsupported, weights.path() +
                                            ": --quantize supports the dense families "
                                            "(Llama, Mistral, Qwen2, Qwen3, Gemma 3, Phi-3), not " +
                                            c.architecture);
  auto source = std::make_shared<const SafetensorsReader>(std::move(weights));
  std::vector<TensorInfo> tensors;
  std::vector<std::vector<std::uint8_t>> storage;
  std::vector<float> row;
  for (const std::string& name : source->names()) {
    TensorInfo t = source->get_or_throw(name);
    const bool is_float = t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16;
    const auto q =
        is_quantized_matrix(t) && is_float ? quantized_type_for(type, t.shape[1]) : std::nullopt;
    if (q && !takes(*q))
      throw Error(ErrorKind::Unsupported,
                  source->path() + ": " + name + ": --quantize " + std::string(dtype_name(type)) + " stores it as " +
                      std::string(dtype_name(*q)) + " (" + std::to_string(t.shape[1]) +
                      " columns), which this backend's matmul does not take");
    if (q) {
      const std::int64_t rows = t.shape[0], cols = t.shape[1];
      const std::size_t in_row = static_cast<std::size_t>(cols) * dtype_size(t.dtype);
      const std::size_t out_row = dtype_row_bytes(*q, cols);
      std::vector<std::uint8_t> bytes(out_row * static_cast<std::size_t>(rows));
      row.resize(static_cast<std::size_t>(cols));
      for (std::int64_t r = 0; r < rows; ++r) {
        convert_to_f32(t.dtype, t.bytes.data() + static_cast<std::size_t>(r) * in_row, row.data(),
                       row.size());
        quantize_row(*q, row,
                     std::span(bytes).subspan(static_cast<std::size_t>(r) * out_row, out_row));
      }
      storage.push_back(std::move(bytes));
      t.dtype = *q;
      t.bytes = storage.back();
    }
    tensors.push_back(std::move(t));
  }
  const std::string label = source->path();
  return SafetensorsReader::from_memory(label, std::move(tensors), std::move(storage),
                                        std::move(source));
}

}  // namespace akv
