#include "kv/model_fingerprint.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "base/error.h"
#include "base/mapped_file.h"
#include "kv/weight_digests.h"
#include "tensor/gguf.h"

namespace akv {

namespace {

class Hasher {
 public:
  Hasher() { XXH3_128bits_reset_withSeed(&state_, 0x666970u); }
  void add(const void* p, std::size_t n) { XXH3_128bits_update(&state_, p, n); }
  template <typename T>
  void add_value(const T& v) {
    add(&v, sizeof v);
  }
  void add_bytes(std::span<const std::uint8_t> b) {
    add_value(static_cast<std::uint64_t>(b.size()));
    add(b.data(), b.size());
  }
  void add_string(const std::string& s) {
    add_value(static_cast<std::uint64_t>(s.size()));
    add(s.data(), s.size());
  }
  Hash128 digest() {
    const XXH128_hash_t h = XXH3_128bits_digest(&state_);
    return {h.high64, h.low64};
  }

 private:
  XXH3_state_t state_;
};

void add_optional_file(Hasher& h, const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) {
    h.add_value(std::uint64_t{0});
    return;
  }
  h.add_string(read_file_or_throw(p.string()));
}

}  // namespace

std::vector<std::string> list_weight_files(const std::string& model_dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  if (is_gguf_path(model_dir)) {
    // One file, or every part of a split set (named from the first, as the reader opens them).
    const std::optional<GgufSplitName> split = parse_gguf_split_name(model_dir);
    if (!split) return {model_dir};
    for (int i = 1; i <= split->count; ++i) out.push_back(gguf_split_path(split->prefix, i, split->count));
    return out;
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(model_dir, ec))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

Hash128 model_fingerprint(const FingerprintInputs& in, WeightDigestStats* stats) {
  namespace fs = std::filesystem;
  const fs::path dir(in.model_dir);
  Hasher h;
  h.add_string("agentkv model fingerprint v2");
  // A GGUF file holds its config (metadata), tensor types and data: its whole-file digest below
  // covers all three, so a Q4 file never shares KV with its bf16 sibling. Side files (tokenizer)
  // sit next to it.
  const bool gguf = is_gguf_path(in.model_dir);
  const fs::path side_dir = gguf ? (dir.has_parent_path() ? dir.parent_path() : fs::path(".")) : dir;
  if (gguf)
    h.add_string("gguf");
  else
    h.add_string(read_file_or_throw((dir / "config.json").string()));
  const std::vector<std::string> weights = list_weight_files(in.model_dir);
  const std::vector<Hash128> digests = weight_digests(weights, in.cache_dir, stats);
  h.add_value(static_cast<std::uint64_t>(weights.size()));
  for (std::size_t i = 0; i < weights.size(); ++i) {
    h.add_string(fs::path(weights[i]).filename().string());
    h.add_value(digests[i].hi);
    h.add_value(digests[i].lo);
  }
  if (!gguf) add_optional_file(h, dir / "model.safetensors.index.json");
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
    add_optional_file(h, side_dir / name);
  h.add_string(in.chat_template);
  for (std::int64_t v : {in.kv.n_layers, in.kv.block_size, in.kv.n_kv_heads, in.kv.head_dim})
    h.add_value(v);
  h.add_value(static_cast<std::uint8_t>(in.kv.dtype));
  h.add_value(static_cast<std::uint8_t>(in.codec));
  // Only when set, so fingerprints of unquantized models are what they were.
  if (!in.quantize.empty()) h.add_string("quantize:" + in.quantize);
  return h.digest();
}

}  // namespace akv
