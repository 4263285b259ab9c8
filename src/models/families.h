// Constructors of each family, looked up by registry.cpp from the config's architecture.
#pragma once

#include <memory>

#include "models/config.h"
#include "models/model.h"
#include "tensor/safetensors.h"

namespace akv {

std::unique_ptr<Model> make_llama(const ModelConfig& c, SafetensorsReader r, Backend& b);  // + Mistral, Qwen2
std::unique_ptr<Model> make_qwen3(const ModelConfig& c, SafetensorsReader r, Backend& b);
std::unique_ptr<Model> make_phi3(const ModelConfig& c, SafetensorsReader r, Backend& b);
std::unique_ptr<Model> make_gemma3(const ModelConfig& c, SafetensorsReader r, Backend& b);
std::unique_ptr<Model> make_qwen3_moe(const ModelConfig& c, SafetensorsReader r, Backend& b);
std::unique_ptr<Model> make_gpt_oss(const ModelConfig& c, SafetensorsReader r, Backend& b);
std::unique_ptr<Model> make_qwen3_next(const ModelConfig& c, SafetensorsReader r, Backend& b);
std::unique_ptr<Model> make_qwen3_5(const ModelConfig& c, SafetensorsReader r, Backend& b);  // + Qwen3.5-MoE

}  // namespace akv
