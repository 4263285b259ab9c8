// The model fingerprint stored in every spilled block and manifest: a block is reused only by
// the exact model, tokenizer, chat template, KV layout and codec that wrote it. Reads the model
// directory's files once at start-up (headers and samples of the weights, not all of them).
#pragma once

#include <cstdint>
#include <string>

#include "backend/kv_storage.h"
#include "kv/block_codec.h"
#include "kv/block_key.h"

namespace akv {

struct FingerprintInputs {
  std::string model_dir;      // config.json, *.safetensors, tokenizer.json, tokenizer_config.json
  std::string chat_template;  // the template in use when it overrides the model's ("" otherwise)
  KvLayout kv;  // n_blocks is ignored; block_size, heads, head_dim, layers, dtype count
  SpillCodec codec = SpillCodec::Native;
};

// Hash of: config.json bytes (RoPE parameters included), every *.safetensors file's header
// (tensor names, dtypes, shapes, offsets) and 64 evenly spaced 256-byte samples of its data plus
// its first and last 4 KiB (so two random models with equal shapes differ), tokenizer.json,
// tokenizer_config.json and chat_template.jinja when present, the chat template override, the
// KV layout and the codec id (a changed codec layout takes a new id). Throws Error{NotFound or
// Io} when config.json or a weight file cannot be read.
Hash128 model_fingerprint(const FingerprintInputs& in);

}  // namespace akv
