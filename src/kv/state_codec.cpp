#include "kv/state_codec.h"

#include <cstring>

#include "base/check.h"
#include "tensor/dtype.h"

namespace akv {

namespace {
constexpr std::uint32_t kExactId = 0x54415453;  // "STAT"
constexpr std::uint32_t kBf16Id = 0x46425453;   // "STBF"
}  // namespace

std::optional<StateCodec> find_state_codec(std::string_view name) {
  if (name == "exact") return StateCodec::Exact;
  if (name == "bf16") return StateCodec::Bf16;
  return std::nullopt;
}

std::string_view state_codec_name(StateCodec codec) {
  return codec == StateCodec::Bf16 ? "bf16" : "exact";
}

std::uint32_t state_codec_id(StateCodec codec) {
  return codec == StateCodec::Bf16 ? kBf16Id : kExactId;
}

std::optional<StateCodec> state_codec_from_id(std::uint32_t id) {
  if (id == kExactId) return StateCodec::Exact;
  if (id == kBf16Id) return StateCodec::Bf16;
  return std::nullopt;
}

std::size_t encoded_state_bytes(StateCodec codec, std::int64_t n_floats) {
  const auto n = static_cast<std::size_t>(n_floats);
  return codec == StateCodec::Bf16 ? n * sizeof(std::uint16_t) : n * sizeof(float);
}

void encode_state(StateCodec codec, std::span<const float> state, std::span<std::byte> out) {
  AKV_CHECK(out.size() == encoded_state_bytes(codec, static_cast<std::int64_t>(state.size())),
            "encode_state: output size");
  if (codec == StateCodec::Exact) {
    if (!state.empty()) std::memcpy(out.data(), state.data(), out.size());
    return;
  }
  for (std::size_t i = 0; i < state.size(); ++i) {  // [n_floats] bf16, little-endian
    const std::uint16_t h = f32_to_bf16(state[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
}

std::vector<std::byte> encode_state(StateCodec codec, std::span<const float> state) {
  std::vector<std::byte> out(encoded_state_bytes(codec, static_cast<std::int64_t>(state.size())));
  encode_state(codec, state, out);
  return out;
}

void decode_state(StateCodec codec, std::span<const std::byte> in, std::span<float> out) {
  AKV_CHECK(in.size() == encoded_state_bytes(codec, static_cast<std::int64_t>(out.size())),
            "decode_state: input size");
  if (out.empty()) return;
  convert_to_f32(codec == StateCodec::Bf16 ? DType::BF16 : DType::F32, in.data(), out.data(), out.size());
}

}  // namespace akv
