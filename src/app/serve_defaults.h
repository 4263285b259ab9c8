// What `serve` runs with where its flags leave a choice open: the KV cache dtype,
// the engine's step sizes and the device KV pool. Pure functions of the flags, the model shape
// and what the backend reports, so the choices are testable and logged in one place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "backend/kv_codec.h"
#include "kv/state_codec.h"
#include "models/config.h"

namespace akv {

// "auto" -> the backend's preferred_kv_dtype(); "bf16" | "f16" | "f32". Throws Error naming
// --kv-dtype for anything else.
DType resolve_kv_dtype(const std::string& flag, const Backend& backend);

// A KV tier's codec flag (--kv-host-codec, --kv-spill-codec; `flag_name` names it in errors):
// native | f32 | bf16 | int8 | int4.
SpillCodec resolve_tier_codec(std::string_view flag_name, const std::string& flag);

// The same with "auto" (both flags' default): int8 on a device backend, native on the CPU (where
// the KV is kept bit for bit). On an H100 the int8 host tier brought an agent back in 0.070 of
// its cold TTFT against 0.100 for native (half the PCIe bytes, encoded in one batched launch per
// demotion round; another agent's cold unchanged), and an int8 disk tier brought it back after a
// restart in 0.100 against 0.148 (docs/perf/serving.md, "The int8 host tier through the server"
// and "The disk return's load").
SpillCodec resolve_tier_codec(std::string_view flag_name, const std::string& flag, const Backend& backend);

// --kv-state-codec: "exact" | "bf16" (hybrid models' state snapshots; exact by default: bf16
// halves their bytes at the error docs/perf/hybrid.md measures). Throws Error naming the flag.
StateCodec resolve_state_codec(const std::string& flag);

// --quantize: "" -> none; "q8_0" | "q6_k" | "q4_k" -> the block type. Throws Error naming
// --quantize for anything else.
std::optional<DType> resolve_quantize(const std::string& flag);

struct StepSizes {
  std::int32_t max_batch_tokens = 0;  // tokens per engine step
  std::int32_t prefill_chunk = 0;     // prompt tokens per sequence per step
};
// Flags of 0 take the backend's measured defaults (docs/perf/serving.md): on a GPU a step of
// 8192 tokens keeps prefill GEMMs at full rate (a 16K prompt in two steps); on the CPU 512/256
// keep decode latency low while a prompt is prefilled.
StepSizes resolve_step_sizes(std::int32_t max_batch_tokens_flag, std::int32_t prefill_chunk_flag,
                             const Backend& backend);

// Device bytes the forward pass itself needs at `max_batch_tokens` rows (activations in f32 and
// half, attention scratch, cuBLAS and graph buffers): kept out of the KV pool.
std::int64_t activation_reserve_bytes(const ModelConfig& config, std::int32_t max_batch_tokens);

struct KvPoolInputs {
  std::int64_t kv_cache_mb = 0;        // --kv-cache-mb; 0: size from the device's memory
  double gpu_memory_fraction = 0.9;    // share of the device's total memory agentkv may hold
  std::optional<DeviceMemory> device = std::nullopt;  // after the weights are loaded; nullopt on the CPU
  std::int64_t reserve_bytes = 0;      // activation_reserve_bytes
  std::int64_t block_bytes = 0;        // one KV block across all layers
  std::int64_t cpu_default_mb = 1024;  // the pool when there is no device memory to size from
};

struct KvPoolPlan {
  std::int32_t n_blocks = 0;
  std::int64_t bytes = 0;
  std::string how;  // for the start-up log line: which input decided the size
};

// The KV pool. With --kv-cache-mb it is that many MiB; on a device, what the fraction of total
// memory leaves after what is in use now and the reserve; otherwise cpu_default_mb. Throws
// Error (InvalidArgument) naming the flag when that leaves less than 8 blocks.
KvPoolPlan plan_kv_pool(const KvPoolInputs& in);

}  // namespace akv
