// Launchers of the MoE kernels behind CudaBackend::moe (cuda_moe.cpp): the device routing every
// path starts from, the decode kernels (few tokens, recordable), the pieces of the grouped
// prefill (tokens sorted by expert for one GEMM per expert), and the correctness-first per-pair
// path kept as the on-device baseline. Every launcher only enqueues work on `s`.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/moe.h"

namespace akv::cuda {

// moe.cu: the first CUDA MoE (one thread routes a token; one warp per output row of each
// (token, choice) pair, re-reading the expert's rows per pair; then the weighted sum). Any shape
// and format; no host round trip. The before/after baseline and the fallback for shapes the
// fast kernels do not take.
void launch_moe_per_pair(TensorRef x, TensorRef router_logits, const MoeWeights& w, const MoeParams& p,
                         const MoeScratch& scratch, TensorRef out, Stream s);

// moe_route.cu: route[t] = top_k expert ids (as floats), then their weights, for each row of
// `logits` (route_experts in moe.h: the same picks, ties to the lower id; weights in f32). One
// warp per token. At most kMoeMaxExperts experts and 32 choices.
inline constexpr int kMoeMaxExperts = 1024;
void launch_moe_route(TensorRef logits, const MoeParams& p, TensorRef route, Stream s);

// moe_decode.cu: the experts of a few tokens after launch_moe_route, reading only the chosen
// experts' rows with 16-byte loads (F32, BF16, F16 or MXFP4): one launch computes every chosen
// expert's gate and up rows together and applies the activation into scratch.act (x of the
// token in shared memory); a second computes each output row of the down projection over all k
// choices of a token at once, weighted and summed with the down biases, straight into `out`.
// scratch.gate_up and scratch.down are not used. No host round trip: recordable.
// moe_decode_supported: the shapes these kernels take (rows whole 16-byte chunks, x and one
// token's activations within 96 KiB of shared memory, 16-byte aligned weights).
bool moe_decode_supported(TensorRef x, const MoeWeights& w, const MoeParams& p);
void launch_moe_decode(TensorRef x, const MoeWeights& w, const MoeParams& p, const MoeScratch& scratch,
                       TensorRef out, Stream s);
// moe_decode_pipelined.cu: the same two launches, grids and results (the same per-lane order of
// operations), arranged to hide DRAM latency: each warp's first expert-row loads are issued
// before x or the activations are staged in shared memory, later loads stay several chunks
// ahead of the sums, and MXFP4 values index the E2M1 table by byte offset. The default.
void launch_moe_decode_pipelined(TensorRef x, const MoeWeights& w, const MoeParams& p, const MoeScratch& scratch,
                                 TensorRef out, Stream s);

// moe_decode_quant.cu: the experts of GGUF-block experts (ExpertFormat::GgufBlocks, gate_up and
// down each of a type quant_kernels_support takes), or of MXFP4 experts in the layout GPT-OSS
// releases (ExpertFormat::Mxfp4: each window's nibbles and scales staged side by side, decoded to
// the same int8 codes and scales as GGUF's MXFP4 blocks of the same values, so the results match
// those blocks' bit for bit) after launch_moe_route, for any number of
// tokens (the decode path of eager steps up to kMoeDecodeMaxRows and of every recorded step), in
// two launches: a block per (pair, 32 hidden units) copies the chosen expert's gate and up rows
// into shared memory (cp.async) while it quantizes x to int8 per 32 columns (the quantized GEMV's
// rule) beside them, decodes them (dp4a against the int8 x, quant_lane.cuh's decode) and
// quantizes its 32 activations the same way into scratch.gate_up; a warp per (token, output row)
// copies the token's k down rows (issued before it waits for gate/up) and sums them against the
// token's int8 activations, weighted, with the down biases, into `out`. scratch.act and
// scratch.down are not used. Only the chosen experts' blocks are read; no atomics; no host round
// trip: recordable. Results differ from the oracle by the int8 rounding of x and of the
// activations (as the dense quantized GEMV, quant_gemv.h). Fails (AKV_CHECK) where a block's
// shared memory would pass 200 KiB (x past about 130,000 columns; down: top_k times the expert
// width past about 160,000).
// moe_quant_supported: GgufBlocks of supported types, or Mxfp4 with 16-byte aligned gate_up and
// down (rows are whole 16-byte words: widths of whole groups of 32) and both scales; at most
// kMoeMaxExperts and 32 choices.
// staging: Runs (the default) stages each warp's rows whole, as runs of consecutive rows
// (moe_decode_runs.cu), in each launch whose block then fits 112 KiB of shared memory (two
// blocks a multiprocessor; the other launch, or both, stage windows); Windows always stages a
// window of each row at a time (the first form; before/after measurements and tests). Gate/up's
// results are the same bit for bit either way; down's sums meet in another order.
enum class MoeQuantStaging { Runs, Windows };
bool moe_quant_supported(const MoeWeights& w, const MoeParams& p);
// sm_count: the device's multiprocessors (the runs' forms follow whether a launch's grid fits one
// wave at two blocks a multiprocessor).
void launch_moe_decode_quant(TensorRef x, const MoeWeights& w, const MoeParams& p, const MoeScratch& scratch,
                             TensorRef out, Stream s, int sm_count,
                             MoeQuantStaging staging = MoeQuantStaging::Runs);

// moe_prefill.cu: tokens grouped by expert. The (token, choice) pairs a = t * top_k + k of n
// tokens, sorted by expert: pairs of expert e are sorted[offsets[e], offsets[e + 1]), and
// position[a] is where pair a sits (order within an expert unspecified). Device int32 arrays in
// one caller-owned allocation of moe_groups_bytes.
struct MoeGroups {
  std::int32_t* offsets = nullptr;   // [n_experts + 1]
  std::int32_t* sorted = nullptr;    // [n_pairs]
  std::int32_t* position = nullptr;  // [n_pairs]
};
std::size_t moe_groups_bytes(std::int64_t n_pairs, std::int64_t n_experts);
MoeGroups moe_groups_in(void* memory, std::int64_t n_pairs, std::int64_t n_experts);
// Histogram, prefix sum and scatter of the pairs of `route` (launch_moe_route's) in one block.
void launch_moe_group(TensorRef route, const MoeParams& p, std::int64_t n_tokens, const MoeGroups& g, Stream s);
// xg[i, :] = x[token of sorted[i], :] converted to `dtype` (F32, BF16, F16), rows x.cols apart.
void launch_moe_gather(TensorRef x, const MoeGroups& g, std::int64_t n_pairs, int top_k, DType dtype, void* xg,
                       Stream s);
// act[i, j] = activation of gate_up[i] (+ the expert's gate_up bias) for each sorted row i < n_pairs;
// gate_up and act of `dtype` (F32, BF16, F16) with their row strides in elements.
void launch_moe_grouped_activation(const void* gate_up, std::int64_t gate_up_stride, void* act,
                                   std::int64_t act_stride, DType dtype, TensorRef route, const MoeGroups& g,
                                   std::int64_t n_pairs, const WeightRef& gate_up_bias, const MoeParams& p,
                                   Stream s);
// out[t, :] = sum over k of weight(t, k) * (down[position[t * top_k + k], :] + down bias of its
// expert): the weighted scatter back per token, as a gather (no atomics, deterministic). down of
// `dtype` (F32, BF16, F16), rows down_stride elements apart.
void launch_moe_combine(const void* down, std::int64_t down_stride, DType dtype, TensorRef route, const MoeGroups& g,
                        const WeightRef& down_bias, const MoeParams& p, TensorRef out, Stream s);
// dst [rows, cols] bf16, contiguous = rows [row0, row0 + rows) of a stacked MXFP4 expert matrix
// (MoeWeights' layout; every value exact in bf16).
void launch_mxfp4_rows_to_bf16(const WeightRef& blocks, const WeightRef& scales, std::int64_t row0,
                               std::int64_t rows, void* dst, Stream s);

}  // namespace akv::cuda
