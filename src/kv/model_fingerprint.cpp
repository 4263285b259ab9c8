#include "kv/model_fingerprint.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "base/error.h"
#include "base/mapped_file.h"

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

// Header bytes, the first and last 4 KiB of the data and 64 samples of 256 bytes in between.
void add_safetensors(Hasher& h, const std::filesystem::path& p) {
  const MappedFile f = MappedFile::open_or_throw(p.string());
  const auto bytes = f.bytes();
  h.add_string(p.filename().string());
  h.add_value(static_cast<std::uint64_t>(bytes.size()));
  std::uint64_t header = 0;
  if (bytes.size() >= 8) std::copy_n(bytes.data(), 8, reinterpret_cast<std::uint8_t*>(&header));
  const std::size_t data_begin =
      static_cast<std::size_t>(std::min<std::uint64_t>(bytes.size(), 8 + header));
  h.add_bytes(bytes.subspan(0, data_begin));
  const auto data = bytes.subspan(data_begin);
  const std::size_t edge = std::min<std::size_t>(4096, data.size());
  h.add_bytes(data.subspan(0, edge));
  h.add_bytes(data.subspan(data.size() - edge));
  const std::size_t window = std::min<std::size_t>(256, data.size());
  for (std::size_t i = 0; i < 64 && data.size() > window; ++i) {
    const std::size_t at = (data.size() - window) / 64 * i;
    h.add_bytes(data.subspan(at, window));
  }
}

}  // namespace

Hash128 model_fingerprint(const FingerprintInputs& in) {
  namespace fs = std::filesystem;
  const fs::path dir(in.model_dir);
  Hasher h;
  h.add_string("agentkv model fingerprint v1");
  h.add_string(read_file_or_throw((dir / "config.json").string()));
  std::vector<fs::path> weights;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") weights.push_back(e.path());
  std::sort(weights.begin(), weights.end());
  h.add_value(static_cast<std::uint64_t>(weights.size()));
  for (const fs::path& w : weights) add_safetensors(h, w);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
    add_optional_file(h, dir / name);
  h.add_string(in.chat_template);
  for (std::int64_t v : {in.kv.n_layers, in.kv.block_size, in.kv.n_kv_heads, in.kv.head_dim})
    h.add_value(v);
  h.add_value(static_cast<std::uint8_t>(in.kv.dtype));
  h.add_value(static_cast<std::uint8_t>(in.codec));
  return h.digest();
}

}  // namespace akv
