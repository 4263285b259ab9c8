// Launchers of linear_attention.cu and delta_rule_chunked.cu (hybrid models' linear-attention
// layers), apart from kernels.h so the other kernels do not rebuild with them. `seqs`
// [n_seqs][4]: first_row, n_tokens, start_pos, state slot of each chunk, in device memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels.h"

namespace akv::cuda {

void launch_sigmoid_mul(TensorRef x, TensorRef gate, Stream s);
// x [n, C] in place; state [n_slots * rows, C]; w [C, rows + 1].
void launch_causal_conv1d(TensorRef x, const WeightRef& w, TensorRef state, int rows,
                          const std::int32_t* seqs, int n_seqs, Stream s);
// The same in parallel over tiles of kConvTileTokens tokens (prefill chunks): a first launch
// copies each tile's window of earlier inputs (from x, or the carried state for the first tile)
// into `halo`, then every (channel, tile) runs at once and the last tile writes the state.
// `halo`: device memory of causal_conv1d_halo_bytes(sum over seqs of ceil(n_tokens /
// kConvTileTokens), rows, C); `max_tokens`: the most tokens of any chunk in `seqs`. Equal to the
// token-by-token kernel (the same f32 sums).
constexpr int kConvTileTokens = 16;
// Eager chunks of this many tokens or more take the tiled convolution (CudaBackend).
constexpr int kConvTileMinTokens = 16;
std::size_t causal_conv1d_halo_bytes(std::int64_t n_tiles, int rows, std::int64_t channels);
void launch_causal_conv1d_tiled(TensorRef x, const WeightRef& w, TensorRef state, int rows,
                                const std::int32_t* seqs, int n_seqs, int max_tokens, float* halo,
                                Stream s);
// state [n_slots * n_v_heads * k_dim, v_dim]; see Backend::gated_delta_rule.
void launch_gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log,
                             const WeightRef& dt_bias, TensorRef state, const std::int32_t* seqs,
                             int n_seqs, int n_k_heads, int n_v_heads, int k_dim, int v_dim,
                             TensorRef out, Stream s);

// The same op in chunks of kDeltaChunkTokens tokens (delta_rule_chunked.cu, for prefill): per
// chunk and value head in parallel the UT transform's inverse and the decayed q k^T, then the
// state through the chunks in order, per value head and 32 state columns. Equal to the
// token-by-token kernel up to f32 rounding, for any chunk length (1 token included); only for
// delta_rule_chunked_fits() shapes. `max_tokens`: the most tokens of any chunk in `seqs`.
// `scratch` (device memory of scratch_bytes, at least delta_rule_chunked_scratch_bytes(n_seqs,
// 1, n_v_heads)) holds the per-chunk matrices of as many chunks as fit; longer sequences go in
// several launches. Stream-ordered: no host wait.
constexpr int kDeltaChunkTokens = 64;
// Eager prefill chunks of this many tokens or more take the chunked kernels (CudaBackend): on
// the tensor cores they beat the token-by-token kernel from 16 tokens at Qwen3.5's shape.
constexpr int kDeltaChunkMinTokens = 16;
bool delta_rule_chunked_fits(int k_dim, int v_dim);  // k_dim a multiple of 4, at most 128
// How both launches multiply: f32 FMA from shared memory; or the tensor cores (mma.sync m16n8k8
// tf32, f32 accumulators, the state kept f32), each f32 operand split into two tf32 parts and
// three products (Tf32x3, the default: as exact as the FMA form), or one tf32 product (Tf32:
// ~5e-4 relative error in the op and 2e-3 to 2e-2 in the hybrid fixtures' logits, too inexact
// for a model; kept for measurements). The tensor-core forms take delta_rule_chunk_mma_fits() shapes (k_dim a
// multiple of 16); others fall back to Fma.
enum class DeltaChunkMath { Fma, Tf32x3, Tf32 };
bool delta_rule_chunk_mma_fits(int k_dim, int v_dim);
// Scratch for all chunks of `max_tokens` tokens at once, capped near 64 MiB (at least one chunk).
std::size_t delta_rule_chunked_scratch_bytes(int n_seqs, int max_tokens, int n_v_heads);
// `launches`: PrepareOnly / StateOnly run one of the two launches alone, to time each (the
// result is only right with Both).
enum class DeltaChunkLaunches { Both, PrepareOnly, StateOnly };
void launch_gated_delta_rule_chunked(TensorRef qkv, TensorRef a, TensorRef b,
                                     const WeightRef& a_log, const WeightRef& dt_bias,
                                     TensorRef state, const std::int32_t* seqs, int n_seqs,
                                     int max_tokens, int n_k_heads, int n_v_heads, int k_dim,
                                     int v_dim, TensorRef out, void* scratch,
                                     std::size_t scratch_bytes, DeltaChunkMath math, Stream s,
                                     DeltaChunkLaunches launches = DeltaChunkLaunches::Both);

}  // namespace akv::cuda
