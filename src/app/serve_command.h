// `agentkv serve`: load the model, start the engine and the HTTP server, serve until SIGINT or
// SIGTERM, then drain and exit. SIGUSR1 (or POST /admin/drain) drains without exiting
// (app/drain.h).
#pragma once

#include <cstdint>
#include <string>

#include "server/serving.h"

namespace akv {

struct ServeOptions {
  std::string model_dir;
  std::string chat_template_file;  // overrides or supplies the model's template
  std::int64_t prompt_memo_mb = 64;  // per-agent memos of encoded prompt segments; 0: off
  std::string backend = "auto";    // auto: cuda when built with it and a GPU is present, else cpu
  int threads = 0;
  std::string kv_dtype = "auto";   // auto: the backend's preferred KV dtype (bf16 on CUDA, f32 on CPU)
  std::string quantize;            // "" | q8_0 | q6_k | q4_k: quantize the weights at load
  std::int64_t kv_cache_mb = 0;    // KV memory on the compute device; 0: sized from free device memory
  double gpu_memory_fraction = 0.9;  // share of the GPU's memory weights + KV + activations may take
  std::int32_t block_size = 16;
  std::int32_t max_batch_tokens = 0;  // 0: the backend's default (serve_defaults.h)
  std::int32_t prefill_chunk = 0;     // 0: the backend's default
  std::string kv_dir;                     // disk tier of the KV cache ("" : none)
  std::string kv_spill_codec = "auto";    // auto (int8 on a GPU, native on the CPU) | native | f32 | bf16 | int8 | int4
  std::string kv_host_bytes = "0";        // host-RAM tier budget: bytes or K/M/G/T; 0: no host tier
  std::string kv_host_codec = "auto";     // how the host tier keeps blocks: auto (int8 on a GPU, native on the CPU) | native | f32 | bf16 | int8 | int4
  std::string kv_disk_bytes = "0";        // disk tier budget: bytes or K/M/G/T; 0: unlimited
  double kv_flush_timeout_s = 30;         // at a graceful stop, most seconds spent writing to disk
  std::string kv_restore_bytes = "4G";    // disk blocks background restores hold at most
  // Hybrid models: host memory for recurrent-state snapshots and their interval in tokens
  // (EngineConfig::state_snapshot_bytes, state_snapshot_interval).
  std::string state_snapshot_bytes = "1G";
  std::int32_t state_snapshot_interval = 1024;
  std::string kv_state_codec = "exact";  // snapshots in memory, on disk and in Redis: exact | bf16
  std::string kv_remote;                  // remote tier: redis://[[USER]:PASSWORD@]HOST:PORT[/DB] ("" : none)
  std::string kv_remote_bytes = "0";      // remote tier budget for this model: bytes or K/M/G/T; 0: unlimited
  std::string kv_remote_password_file;    // the Redis password's file (its first line); "": none
  // What requests that leave a sampling field out get: model (the model directory's
  // generation_config.json over the API's defaults) | api (the API's: temperature 1, nothing else).
  std::string sampling_defaults = "model";
  ServerOptions server;
};

int run_serve(const ServeOptions& options);

}  // namespace akv
