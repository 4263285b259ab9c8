// load_model: config.json -> family constructor.
#include "models/families.h"

namespace akv {

std::unique_ptr<Model> load_model(const std::string& model_dir, Backend& backend) {
  ModelConfig config = load_model_config(model_dir);
  SafetensorsReader reader = SafetensorsReader::open_or_throw(model_dir);
  switch (config.family) {
    case Family::Llama:
    case Family::Qwen2: return make_llama(config, std::move(reader), backend);
    case Family::Qwen3: return make_qwen3(config, std::move(reader), backend);
    case Family::Phi3: return make_phi3(config, std::move(reader), backend);
    case Family::Gemma3: return make_gemma3(config, std::move(reader), backend);
    case Family::Qwen3Next: return make_qwen3_next(config, std::move(reader), backend);
    case Family::Qwen35: return make_qwen3_5(config, std::move(reader), backend);
  }
  AKV_CHECK(false, "unhandled family");
  return nullptr;
}

}  // namespace akv
