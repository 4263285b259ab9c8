// RoPE frequency tables for every rope_type we support (default, linear, dynamic NTK, YaRN,
// Llama 3, LongRoPE), computed in double on the host, as transformers' rope init functions do.
#pragma once

#include <cstdint>
#include <vector>

#include "models/config.h"

namespace akv {

struct RopeFrequencies {
  std::int64_t rotary_dim = 0;    // leading dims of each head that rotate (pairs i, i + rotary_dim/2)
  std::vector<double> inv_freq;   // [rotary_dim / 2]
  double attention_scaling = 1.0; // multiplies cos and sin (YaRN, LongRoPE)
};

// Frequencies for a sequence whose longest position so far is `seq_len` - 1. Only the dynamic
// and LongRoPE types depend on it; the others ignore it.
RopeFrequencies rope_frequencies(const RopeConfig& rope, std::int64_t head_dim,
                                 std::int64_t max_position_embeddings, std::int64_t seq_len);

// True when the table depends on seq_len (the model must recompute it per forward).
bool rope_depends_on_length(const RopeConfig& rope);

}  // namespace akv
