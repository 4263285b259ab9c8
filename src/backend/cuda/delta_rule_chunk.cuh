// What the two passes of the chunked delta rule share (delta_rule_chunked.cu, the prepare pass
// and the f32 FMA state pass; delta_rule_mma.cu, the state pass on the tensor cores): the chunk
// length, the per-chunk scratch layout the prepare pass writes and the state passes read, and
// the kernels' arguments. Device-side only; the launchers are in linear_attention.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/linear_attention.h"

namespace akv::cuda {

constexpr int kC = kDeltaChunkTokens;
constexpr int kStateTile = 32;  // state columns per block of either state pass
constexpr int kStateThreads = 512;
constexpr int kChunkMaxKeyDim = 128;

// One (window chunk, sequence, value head)'s state-independent values in scratch:
//   t    [kC, kC]  (I + A)^-1, lower with unit diagonal, A[i][j] = beta_i e^(cum_i - cum_j) k_i.k_j
//                  for j < i (the UT transform: U = t R, R_i = beta_i (v_i - e^cum_i S^T k_i))
//   p    [kC, kC]  e^(cum_i - cum_j) q_i.k_j for j <= i, else 0
//   kinv [kC], qinv [kC]  the l2 normalisations (qinv with k_dim^-1/2), so that the state pass
//                  reads the raw q, k rows of qkv
//   beta [kC], cum [kC]   sigmoid(b); the running sum of the log decays g within the chunk
// Rows past the chunk's last token hold zero inputs (t the identity there, p zero, g zero).
constexpr int kChunkFloats = 2 * kC * kC + 4 * kC;
constexpr int kT = 0, kP = kC * kC, kKinv = 2 * kC * kC, kQinv = kKinv + kC, kBeta = kQinv + kC,
              kCum = kBeta + kC;

struct ChunkedArgs {
  const float* qkv;
  std::int64_t qkv_stride;
  const float* a;
  std::int64_t a_stride;
  const float* b;
  std::int64_t b_stride;
  float* state;              // [n_slots * n_v_heads * k_dim, v_dim]
  const std::int32_t* seqs;  // [n_seqs][4] first_row, n_tokens, start_pos, slot
  int n_k_heads, n_v_heads, k_dim, v_dim;
  float* out;
  std::int64_t out_stride;
  float* scratch;     // [n_seqs][window_chunks][n_v_heads][kChunkFloats]
  int window_first;   // chunk index (within each sequence) of the window's first chunk
  int window_chunks;  // chunks per sequence in this window
};

__device__ __forceinline__ float* chunk_scratch(const ChunkedArgs& p, int seq, int window_chunk,
                                                int h) {
  return p.scratch +
         ((static_cast<std::int64_t>(seq) * p.window_chunks + window_chunk) * p.n_v_heads + h) *
             kChunkFloats;
}

// The tensor-core state pass (delta_rule_mma.cu) on grid (n_v_heads, column tiles, n_seqs) of
// kStateThreads threads; `split`: 3xTF32 products, else one tf32 product each.
std::size_t delta_chunk_state_mma_smem_bytes(int k_dim);
void launch_delta_chunk_state_mma(const ChunkedArgs& p, dim3 grid, bool split, Stream s);

}  // namespace akv::cuda
