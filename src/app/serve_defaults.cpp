#include "app/serve_defaults.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/error.h"
#include "models/quantize_weights.h"

namespace akv {

DType resolve_kv_dtype(const std::string& flag, const Backend& backend) {
  if (flag == "auto") return backend.preferred_kv_dtype();
  if (flag == "bf16") return DType::BF16;
  if (flag == "f16") return DType::F16;
  if (flag == "f32") return DType::F32;
  throw Error(ErrorKind::InvalidArgument, "--kv-dtype: expected auto, bf16, f16 or f32, not '" + flag + "'");
}

SpillCodec resolve_tier_codec(std::string_view flag_name, const std::string& flag) {
  if (const std::optional<SpillCodec> codec = find_spill_codec(flag)) return *codec;
  throw Error(ErrorKind::InvalidArgument,
              fmt::format("{}: expected native, f32, bf16, int8 or int4, not '{}'", flag_name, flag));
}

SpillCodec resolve_tier_codec(std::string_view flag_name, const std::string& flag, const Backend& backend) {
  if (flag == "auto") return backend.device_memory().has_value() ? SpillCodec::Int8 : SpillCodec::Native;
  if (const std::optional<SpillCodec> codec = find_spill_codec(flag)) return *codec;
  throw Error(ErrorKind::InvalidArgument,
              fmt::format("{}: expected auto, native, f32, bf16, int8 or int4, not '{}'", flag_name, flag));
}

StateCodec resolve_state_codec(const std::string& flag) {
  if (const std::optional<StateCodec> codec = find_state_codec(flag)) return *codec;
  throw Error(ErrorKind::InvalidArgument, fmt::format("--kv-state-codec: expected exact or bf16, not '{}'", flag));
}

std::optional<DType> resolve_quantize(const std::string& flag) {
  if (flag.empty()) return std::nullopt;
  if (const auto t = find_quantize_type(flag)) return t;
  throw Error(ErrorKind::InvalidArgument, "--quantize: expected q8_0, q6_k or q4_k, not '" + flag + "'");
}

StepSizes resolve_step_sizes(std::int32_t max_batch_tokens_flag, std::int32_t prefill_chunk_flag,
                             const Backend& backend) {
  const bool device = backend.device_memory().has_value();
  StepSizes s{.max_batch_tokens = device ? 8192 : 512, .prefill_chunk = device ? 8192 : 256};
  if (max_batch_tokens_flag < 0) throw Error(ErrorKind::InvalidArgument, "--max-batch-tokens: must be >= 0");
  if (prefill_chunk_flag < 0) throw Error(ErrorKind::InvalidArgument, "--prefill-chunk: must be >= 0");
  if (max_batch_tokens_flag > 0) s.max_batch_tokens = max_batch_tokens_flag;
  if (prefill_chunk_flag > 0) s.prefill_chunk = prefill_chunk_flag;
  s.prefill_chunk = std::min(s.prefill_chunk, s.max_batch_tokens);
  return s;
}

std::int64_t activation_reserve_bytes(const ModelConfig& c, std::int32_t max_batch_tokens) {
  const std::int64_t q_dim = c.n_heads * c.head_dim;
  const std::int64_t kv_dim = c.n_kv_heads * c.head_dim;
  // Per row: the f32 workspaces of models/blocks.cpp (x, xn, y, qkv, attn, gate_up, act) and
  // their half copies for the GEMMs, with room for attention scratch.
  const std::int64_t f32_row = 3 * c.hidden_size + q_dim + 2 * kv_dim + q_dim + 3 * c.intermediate_size;
  const std::int64_t half_row = c.hidden_size + q_dim + 3 * c.intermediate_size;
  const std::int64_t per_row = 4 * f32_row + 2 * half_row;
  const std::int64_t rows = std::max<std::int64_t>(max_batch_tokens, 1);
  const std::int64_t logits = 64 * c.vocab_size * 4;  // rows of logits for up to 64 sequences
  return rows * per_row * 3 / 2 + logits + (std::int64_t{1} << 30);  // + 1 GiB: cuBLAS, graphs, staging
}

KvPoolPlan plan_kv_pool(const KvPoolInputs& in) {
  AKV_CHECK(in.block_bytes > 0, "plan_kv_pool: block_bytes must be positive");
  if (in.kv_cache_mb < 0) throw Error(ErrorKind::InvalidArgument, "--kv-cache-mb: must be >= 0");
  if (!(in.gpu_memory_fraction > 0.0 && in.gpu_memory_fraction <= 1.0))
    throw Error(ErrorKind::InvalidArgument, "--gpu-memory-fraction: must be in (0, 1]");
  KvPoolPlan plan;
  std::int64_t bytes = 0;
  if (in.kv_cache_mb > 0) {
    bytes = in.kv_cache_mb << 20;
    plan.how = fmt::format("--kv-cache-mb {}", in.kv_cache_mb);
  } else if (in.device) {
    const auto total = static_cast<double>(in.device->total_bytes);
    const std::int64_t used = in.device->total_bytes - in.device->free_bytes;
    const auto allowed = static_cast<std::int64_t>(in.gpu_memory_fraction * total);
    bytes = std::min(allowed - used, in.device->free_bytes) - in.reserve_bytes;
    plan.how = fmt::format("--gpu-memory-fraction {:.2f} of {} MiB, {} MiB in use, {} MiB kept for activations",
                           in.gpu_memory_fraction, in.device->total_bytes >> 20, used >> 20, in.reserve_bytes >> 20);
  } else {
    bytes = in.cpu_default_mb << 20;
    plan.how = "default for a host-memory backend (--kv-cache-mb to change)";
  }
  const std::int64_t n_blocks = std::min<std::int64_t>(bytes / in.block_bytes, std::int64_t{1} << 30);
  if (n_blocks < 8)
    throw Error(ErrorKind::InvalidArgument,
                "KV cache: " + plan.how + " leaves room for " + std::to_string(std::max<std::int64_t>(n_blocks, 0)) +
                    " KV blocks of " + std::to_string(in.block_bytes) +
                    " bytes; at least 8 are needed (raise --gpu-memory-fraction or set --kv-cache-mb)");
  plan.n_blocks = static_cast<std::int32_t>(n_blocks);
  plan.bytes = n_blocks * in.block_bytes;
  return plan;
}

}  // namespace akv
