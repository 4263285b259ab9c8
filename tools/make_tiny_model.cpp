// make_tiny_model: writes a deterministic random HF checkpoint (config.json + safetensors) of a
// supported family, from a few-KB test model up to an 8B-sized benchmark model (or a
// Qwen3-30B-A3B- or GPT-OSS-20B-shaped mixture of experts at any depth).
#include <CLI/CLI.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>

#include "base/error.h"
#include "tiny_model.h"

namespace {

std::string uppercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  akv::TinyModelSpec spec;
  std::string out, preset, dtype = "f32", expert_dtype;
  std::int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = -1,
               vocab = 0, sliding_window = 0;
  bool tied = false, untied = false;
  double rope_theta = 0;

  CLI::App app{"Write a deterministic random model directory (config.json + safetensors)."};
  app.add_option("--out", out, "output directory")->required();
  app.add_option("--family", spec.family,
                 "llama | mistral | qwen2 | qwen3 | qwen3_moe | gemma3 | phi3 | gpt_oss");
  app.add_option(
      "--preset", preset,
      "smollm2-135m | llama3-8b | qwen3-30b-a3b | gpt-oss-20b (flags given override it)");
  app.add_option("--hidden", hidden, "hidden size");
  app.add_option("--intermediate", intermediate, "MLP intermediate size (gpt_oss: each expert's)");
  app.add_option("--layers", layers, "number of layers");
  app.add_option("--heads", heads, "attention heads");
  app.add_option("--kv-heads", kv_heads, "key/value heads");
  app.add_option("--head-dim", head_dim, "head dimension (default hidden / heads)");
  app.add_option("--vocab", vocab, "vocabulary size");
  std::int64_t experts = 0, experts_per_token = 0, expert_intermediate = 0;
  app.add_option("--experts", experts, "qwen3_moe, gpt_oss: routed experts a layer");
  app.add_option("--experts-per-token", experts_per_token,
                 "qwen3_moe, gpt_oss: experts chosen a token (top-k)");
  app.add_option("--expert-intermediate", expert_intermediate,
                 "qwen3_moe: one expert's hidden width");
  app.add_option("--expert-dtype", expert_dtype,
                 "gpt_oss: mxfp4 (the released blocks and scales; default) | bf16 | f16 | f32");
  app.add_option("--dtype", dtype, "f32 | bf16 | f16");
  app.add_option("--seed", spec.seed, "random seed");
  app.add_option("--rope-theta", rope_theta, "RoPE base (default per family)");
  app.add_option("--sliding-window", sliding_window, "sliding window (mistral, gemma3)");
  std::int64_t max_position = 0;
  app.add_option("--max-position", max_position, "max_position_embeddings (the context length)");
  app.add_option("--max-shard-bytes", spec.max_shard_bytes, "split into shards above this size");
  app.add_flag("--tied", tied, "tie lm_head to the embedding");
  app.add_flag("--untied", untied, "write a separate lm_head");
  CLI11_PARSE(app, argc, argv);

  try {
    const std::string family = spec.family;
    if (!preset.empty()) {
      akv::apply_tiny_model_preset(preset, spec);
      if (app.count("--family")) spec.family = family;
    }
    if (hidden) spec.hidden = hidden;
    if (intermediate) spec.intermediate = intermediate;
    if (layers) spec.layers = layers;
    if (heads) spec.heads = heads;
    if (kv_heads) spec.kv_heads = kv_heads;
    if (head_dim >= 0)
      spec.head_dim = head_dim;
    else if (!preset.empty() && (hidden || heads))
      spec.head_dim = 0;
    if (vocab) spec.vocab = vocab;
    if (experts) spec.moe.n_experts = experts;
    if (experts_per_token) spec.moe.top_k = experts_per_token;
    if (expert_intermediate) spec.moe.expert_intermediate = expert_intermediate;
    if (rope_theta > 0) spec.rope_theta = rope_theta;
    if (sliding_window) spec.sliding_window = sliding_window;
    if (!expert_dtype.empty()) {
      if (spec.family != "gpt_oss")
        throw akv::Error(akv::ErrorKind::InvalidArgument, "--expert-dtype is for gpt_oss");
      const std::optional<akv::DType> t =
          expert_dtype == "mxfp4" ? akv::DType::MXFP4 : akv::find_dtype(uppercase(expert_dtype));
      if (!t)
        throw akv::Error(akv::ErrorKind::InvalidArgument,
                         "--expert-dtype: mxfp4, bf16, f16 or f32");
      spec.moe.expert_dtype = *t;
    }
    if (max_position < 0)
      throw akv::Error(akv::ErrorKind::InvalidArgument, "--max-position must be positive");
    if (max_position) spec.max_position_embeddings = max_position;
    if (tied && untied) throw akv::Error(akv::ErrorKind::InvalidArgument, "--tied and --untied");
    if (tied) spec.tied = true;
    if (untied) spec.tied = false;
    if (dtype == "f32")
      spec.dtype = akv::DType::F32;
    else if (dtype == "bf16")
      spec.dtype = akv::DType::BF16;
    else if (dtype == "f16")
      spec.dtype = akv::DType::F16;
    else
      throw akv::Error(akv::ErrorKind::InvalidArgument, "--dtype must be f32, bf16 or f16");

    const auto start = std::chrono::steady_clock::now();
    akv::write_tiny_model(spec, out);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::uint64_t n_params = akv::tiny_model_parameters(akv::resolve_tiny_model_spec(spec));
    std::printf("wrote %s: %s, %.3f B parameters, %s, in %.1f s\n", out.c_str(),
                spec.family.c_str(), static_cast<double>(n_params) / 1e9, dtype.c_str(), s);
  } catch (const akv::Error& e) {
    std::fprintf(stderr, "make_tiny_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
