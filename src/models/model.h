// A loaded causal LM: config, weights on a backend, and a batched forward pass over a paged
// KV cache. Created by load_model (registry.cpp), which picks the family from config.json.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "backend/backend.h"
#include "models/config.h"

namespace akv {

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;

  // Runs every chunk of `batch` through the model: appends the chunks' K/V to `kv` at their
  // positions (the caller owns the block tables and their capacity) and writes the logits of
  // batch.logit_rows to `logits` [logit_rows.size(), vocab_size] on the host.
  // Token ids must be in [0, vocab_size); callers validate them (Error at the edge).
  virtual void forward(const ForwardBatch& batch, KvStorage& kv, std::span<float> logits) = 0;
  // forward() that brings back ids instead of logits: ids[i] = Backend::sample_rows of logits
  // row i (argmax_row where temperature[i] <= 0, else draw_row with u[i]), picked where the
  // logits are, so only the ids reach the host. temperature, u and ids: one per logits row.
  virtual void forward_ids(const ForwardBatch& batch, KvStorage& kv, std::span<const float> temperature,
                           std::span<const double> u, std::span<std::int32_t> ids) = 0;
};

// The KV layout a model needs for `n_blocks` blocks of `block_size` positions in `dtype` (the
// caller decides: serve takes --kv-dtype, by default the backend's preferred_kv_dtype()): one
// K and one V array per layer, for hybrid models per full-attention layer only.
KvLayout kv_layout_for(const ModelConfig& config, std::int64_t n_blocks, std::int64_t block_size, DType dtype);
// The recurrent state of hybrid models with `n_slots` slots (one per sequence run at once);
// n_layers 0 for other models.
StateLayout state_layout_for(const ModelConfig& config, std::int64_t n_slots);
// Everything a model's forward needs on `backend`: the KV arrays of kv_layout_for and, for
// hybrid models, `n_state_slots` state slots.
KvStorage alloc_model_kv(Backend& backend, const ModelConfig& config, std::int64_t n_blocks, std::int64_t block_size,
                         DType dtype, std::int64_t n_state_slots = 1);

// Loads config.json and the safetensors weights of `model_dir` onto `backend`, or a .gguf file
// (the first of a split set): its metadata as the config, its tensors as the weights, quantized
// matrices kept in their blocks where the backend takes them, others dequantized at load into
// the backend's preferred_kv_dtype() (models/gguf_weights.h). `quantize` (safetensors only):
// the matrices quantized at load into that block type (models/quantize_weights.h).
// Throws Error naming the file and the problem (missing tensor, wrong shape or dtype, a
// `quantize` type the backend does not take, ...). The backend must outlive the model.
std::unique_ptr<Model> load_model(const std::string& model_dir, Backend& backend,
                                  std::optional<DType> quantize = std::nullopt);

// Where the files beside the weights live (tokenizer.json, tokenizer_config.json, ...): the
// model directory itself, or the directory holding a .gguf file.
std::string model_sidecar_dir(const std::string& model);

}  // namespace akv
