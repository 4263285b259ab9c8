// `agentkv serve`: load the model, start the engine and the HTTP server, serve until SIGINT or
// SIGTERM, then drain and exit.
#pragma once

#include <cstdint>
#include <string>

#include "server/serving.h"

namespace akv {

struct ServeOptions {
  std::string model_dir;
  std::string chat_template_file;  // overrides or supplies the model's template
  std::string backend = "cpu";
  int threads = 0;
  std::int64_t kv_cache_mb = 1024;  // KV memory on the compute device
  std::int32_t block_size = 16;
  std::int32_t max_batch_tokens = 512;
  std::int32_t prefill_chunk = 256;
  std::string kv_dir;                     // disk tier of the KV cache ("" : none)
  std::string kv_spill_codec = "native";  // native | f32 | bf16 | int8 | int4
  std::string kv_host_bytes = "0";        // host-RAM tier budget: bytes or K/M/G/T; 0: no host tier
  std::string kv_host_codec = "native";   // how the host tier keeps blocks
  std::string kv_disk_bytes = "0";        // disk tier budget: bytes or K/M/G/T; 0: unlimited
  std::string kv_restore_bytes = "4G";    // disk blocks background restores hold at most
  ServerOptions server;
};

int run_serve(const ServeOptions& options);

}  // namespace akv
