// Launchers of linear_attention.cu (hybrid models' linear-attention layers), apart from
// kernels.h so the other kernels do not rebuild with them. `seqs` [n_seqs][4]: first_row,
// n_tokens, start_pos, state slot of each chunk, in device memory.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace akv::cuda {

void launch_sigmoid_mul(TensorRef x, TensorRef gate, Stream s);
// x [n, C] in place; state [n_slots * rows, C]; w [C, rows + 1].
void launch_causal_conv1d(TensorRef x, const WeightRef& w, TensorRef state, int rows,
                          const std::int32_t* seqs, int n_seqs, Stream s);
// state [n_slots * n_v_heads * k_dim, v_dim]; see Backend::gated_delta_rule.
void launch_gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log,
                             const WeightRef& dt_bias, TensorRef state, const std::int32_t* seqs,
                             int n_seqs, int n_k_heads, int n_v_heads, int k_dim, int v_dim,
                             TensorRef out, Stream s);

}  // namespace akv::cuda
