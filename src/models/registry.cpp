// load_model: config.json (or GGUF metadata) -> family constructor.
#include <filesystem>

#include "base/error.h"
#include "models/families.h"
#include "models/gguf_config.h"
#include "models/gguf_weights.h"
#include "models/quantize_weights.h"

namespace akv {

namespace {

std::unique_ptr<Model> make_model(const ModelConfig& config, SafetensorsReader reader, Backend& backend) {
  switch (config.family) {
    case Family::Llama:
    case Family::Qwen2: return make_llama(config, std::move(reader), backend);
    case Family::Qwen3: return make_qwen3(config, std::move(reader), backend);
    case Family::Phi3: return make_phi3(config, std::move(reader), backend);
    case Family::Gemma3: return make_gemma3(config, std::move(reader), backend);
    case Family::Qwen3Moe: return make_qwen3_moe(config, std::move(reader), backend);
    case Family::GptOss: return make_gpt_oss(config, std::move(reader), backend);
    case Family::Qwen3Next: return make_qwen3_next(config, std::move(reader), backend);
    case Family::Qwen35: return make_qwen3_5(config, std::move(reader), backend);
  }
  AKV_CHECK(false, "unhandled family");
  return nullptr;
}

// A .gguf file: the same ModelConfig and checkpoint-named weights; quantized matrices the
// backend takes stay in their blocks, other quantized tensors dequantized into its compute dtype.
std::unique_ptr<Model> load_gguf_model(const std::string& path, Backend& backend) {
  auto gguf = std::make_shared<const GgufReader>(GgufReader::open_or_throw(path));
  ModelConfig config = model_config_from_gguf(*gguf);
  config.dtype = gguf_weight_dtype(*gguf, backend.preferred_kv_dtype());
  SafetensorsReader weights = weights_from_gguf(
      gguf, config, config.dtype, [&backend](DType t) { return backend.takes_quantized_weight(t); });
  return make_model(config, std::move(weights), backend);
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& model_dir, Backend& backend, std::optional<DType> quantize) {
  if (quantize && is_gguf_path(model_dir))
    throw Error(ErrorKind::InvalidArgument, model_dir + ": --quantize applies to safetensors checkpoints");
  if (is_gguf_path(model_dir)) return load_gguf_model(model_dir, backend);
  ModelConfig config = load_model_config(model_dir);
  SafetensorsReader weights = SafetensorsReader::open_or_throw(model_dir);
  if (!quantize) return make_model(config, std::move(weights), backend);
  if (!backend.takes_quantized_weight(*quantize))
    throw Error(ErrorKind::Unsupported, "--quantize: the " + std::string(backend.name()) + " backend does not take " +
                                            std::string(dtype_name(*quantize)) + " weights");
  const TakesQuantized takes = [&backend](DType t) { return backend.takes_quantized_weight(t); };
  return make_model(config, quantize_weights(std::move(weights), config, *quantize, takes), backend);
}

std::string model_sidecar_dir(const std::string& model) {
  if (!is_gguf_path(model)) return model;
  const std::string dir = std::filesystem::path(model).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace akv
