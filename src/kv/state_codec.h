// State codecs: how a hybrid model's recurrent-state snapshot (f32, StateLayout::slot_floats:
// every linear-attention layer's conv and delta-rule state of one sequence) is kept in the
// engine's snapshot store and written as a state block (disk tier, Redis).
//   exact: the f32 values as they are (the default: a resumed sequence gets its state bit for bit)
//   bf16:  each value rounded to bf16 (nearest even; NaN stays NaN), half the bytes; relative
//          error per value <= 2^-8 (8 significant bits). Its effect on resumed logits:
//          docs/perf/hybrid.md.
// Each state block's header names its codec (state_codec_id), so a reader decodes whatever a
// writer chose: a store written under one --kv-state-codec is read under another. Pure
// functions, any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace akv {

enum class StateCodec : std::uint8_t { Exact = 0, Bf16 = 1 };

std::optional<StateCodec> find_state_codec(std::string_view name);  // "exact", "bf16"
std::string_view state_codec_name(StateCodec codec);

// The id stored in a state block header's codec field ("STAT": exact, the only one before
// codecs; "STBF": bf16), and back (nullopt: an id this build does not know).
std::uint32_t state_codec_id(StateCodec codec);
std::optional<StateCodec> state_codec_from_id(std::uint32_t id);

// Bytes of a state of n_floats values under `codec`.
std::size_t encoded_state_bytes(StateCodec codec, std::int64_t n_floats);

// out.size() == encoded_state_bytes(codec, state.size()) (AKV_CHECK).
void encode_state(StateCodec codec, std::span<const float> state, std::span<std::byte> out);
std::vector<std::byte> encode_state(StateCodec codec, std::span<const float> state);
// in.size() == encoded_state_bytes(codec, out.size()) (AKV_CHECK).
void decode_state(StateCodec codec, std::span<const std::byte> in, std::span<float> out);

}  // namespace akv
