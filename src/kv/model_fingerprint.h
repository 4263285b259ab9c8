// The model fingerprint stored in every spilled block and manifest: a block is reused only by
// the exact model, tokenizer, chat template, KV layout and codec that wrote it. Reads every
// byte of the weights once per file version (weight_digests.h caches the digests in the KV
// directory, so a restart reads only the small files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/kv_storage.h"
#include "kv/block_codec.h"
#include "kv/block_key.h"
#include "kv/weight_digests.h"

namespace akv {

struct FingerprintInputs {
  std::string model_dir;      // config.json, weight files, tokenizer.json, tokenizer_config.json;
                              // or a .gguf file (the first of a split set), side files beside it
  std::string chat_template;  // the template in use when it overrides the model's ("" otherwise)
  KvLayout kv;  // n_blocks is ignored; block_size, heads, head_dim, layers, dtype count
  SpillCodec codec = SpillCodec::Native;
  std::string cache_dir{};  // where the weight digests are cached (the KV directory); "": none
  std::string quantize{};   // the --quantize type the weights were quantized to at load; "": none
};

// The checkpoint's weight files in `model_dir`, sorted: every *.safetensors file; for a .gguf
// path, the file itself or every part of its split set. The one place that says which files
// hold weights (a new weight format is added here).
std::vector<std::string> list_weight_files(const std::string& model_dir);

// Hash of: config.json bytes (RoPE parameters included; for GGUF, the metadata inside the
// weight file's digest), each weight file's name and the
// digest of all its bytes (weight_digests()), model.safetensors.index.json, tokenizer.json,
// tokenizer_config.json and chat_template.jinja when present, the chat template override, the
// KV layout, the load-time quantization (when any) and the codec id (a changed codec layout takes a new id). `stats` (optional) says
// how many weight files were hashed or found in the cache. Throws Error{NotFound or Io} when
// config.json or a weight file cannot be read.
Hash128 model_fingerprint(const FingerprintInputs& in, WeightDigestStats* stats = nullptr);

}  // namespace akv
