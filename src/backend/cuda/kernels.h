// Launchers of the CUDA backend's kernels: plain host functions, one per op, defined in the
// .cu files named for what they hold (elementwise, sample, norm_rope, gemv, attention,
// attention_prefill). Every launcher only enqueues work on `stream` and checks the launch.
// Tensors are f32 activations unless a dtype says otherwise; weights and KV keep their dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cuda/quant_gemv.h"
#include "backend/tensor_ref.h"

struct CUstream_st;

namespace akv::cuda {

using Stream = CUstream_st*;

// A ForwardBatch as the kernels see it: one int32 array in device memory.
//   seq_info  [n_seqs][4]  first_row, n_tokens, start_pos, offset of its block table in `tables`
//   token_seq [n_tokens]   index of the sequence each token row belongs to
//   tiles     [n_tiles][2] sequence, first token of a prefill attention tile (kPrefillTileRows)
//   tables    block tables, back to back
struct DeviceBatch {
  const std::int32_t* seq_info = nullptr;
  const std::int32_t* token_seq = nullptr;
  const std::int32_t* tiles = nullptr;
  const std::int32_t* tables = nullptr;
  std::int32_t n_seqs = 0;
  std::int32_t n_tokens = 0;
  std::int32_t n_tiles = 0;
  std::int32_t max_chunk = 0;     // most tokens of one sequence in this batch
  std::int32_t max_keys = 0;      // most keys one query attends to (window applied by caller; host only)
};

inline constexpr int kPrefillTileRows = 64;  // query rows per tensor-core attention block
inline constexpr int kGemvMaxRows = 8;       // matmuls with at most this many rows use the GEMV

// KV of one layer as the attention kernels read it.
struct KvView {
  const void* k = nullptr;  // [n_blocks * block_size, row_width]
  const void* v = nullptr;
  DType dtype = DType::F32;
  std::int64_t row_width = 0;
  std::int32_t block_size = 0;
};

struct AttentionArgs {
  std::int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0.0f;
  std::int32_t window = 0;    // 0: none
  float softcap = 0.0f;       // 0: none
  // [n_heads] F32 sink logits in device memory, or null. Only the CUDA-core split kernel and the
  // merge take them (attention.cu); the callers route attention with sinks there.
  const float* sinks = nullptr;
};

// elementwise.cu
void launch_embed(const WeightRef& table, const std::int32_t* ids, float scale, TensorRef out, Stream s);
void launch_add(TensorRef acc, TensorRef x, Stream s);
void launch_add_bias(TensorRef out, const WeightRef& bias, Stream s);
void launch_glu(TensorRef gate, TensorRef up, bool gelu_tanh, TensorRef out, Stream s);
// The same with gate, up and out all BF16 or all F16 (computed in f32, rounded once): the fused
// MLP's intermediates. 16-byte accesses where cols, strides and rows allow.
void launch_glu_half(TensorRef gate, TensorRef up, bool gelu_tanh, TensorRef out, Stream s);
// launch_glu (f32) that also writes the int8 codes of out [n, cols] into `a` by the rule of
// launch_quantize_activations (quant_gemv.h): the same floats and codes as the two launches, in
// one. cols % kQuantGroup == 0; a sized quant_activation_bytes(n, cols).
void launch_glu_quantize(TensorRef gate, TensorRef up, bool gelu_tanh, TensorRef out,
                         QuantActivations a, Stream s);
void launch_softcap(TensorRef x, float cap, Stream s);
void launch_gather_rows(TensorRef x, const std::int32_t* rows, TensorRef out, Stream s);
// dst [x.rows, x.cols] contiguous, of dtype BF16 or F16, from the f32 tensor x.
void launch_to_half(TensorRef x, DType dtype, void* dst, Stream s);
void launch_store_kv(void* k_cache, void* v_cache, DType dtype, std::int64_t row_width,
                     std::int32_t block_size, TensorRef k, TensorRef v, const DeviceBatch& b, Stream s);
// n_segments copies of `bytes` each, dst[i] <- src[i] (device pointer arrays in device memory),
// in one launch: a KV block's layers gathered into or scattered from one contiguous buffer.
// `aligned`: every pointer and `bytes` are multiples of 16 (16-byte loads), else byte copies.
void launch_copy_segments(void* const* dst, const void* const* src, std::size_t bytes, int n_segments, bool aligned,
                          Stream s);

// kv_codec.cu: a block's encoded form (backend/kv_codec.h, EncodedLayout) and the live KV dtype.
struct KvCodecArgs {
  int bits = 0;  // 0: element codec of elem_dtype; 8 or 4: quantized
  DType elem_dtype = DType::F32, live_dtype = DType::F32;
  int slab_tokens = 0, row_width = 0;
  std::size_t key_bytes = 0, value_bytes = 0;
  int key_group_tokens = 0, key_group_channels = 0, value_group_tokens = 0, value_group_channels = 0;
};
// Decodes n_blocks encoded blocks in one launch: block i's bytes at src[i] (device-readable:
// device memory or mapped page-locked host memory) into KV block dst_block[i], slab j (2 * layer
// + side) into the array at slab_base[j] ([n_kv_blocks * slab_tokens, row_width] of live_dtype).
// src, dst_block and slab_base are arrays in device memory. Equal to decode_block bit for bit.
void launch_decode_kv_blocks(const KvCodecArgs& a, const void* const* src, const std::int32_t* dst_block,
                             void* const* slab_base, int n_slabs, int n_blocks, Stream s);
// The inverse: KV block src_block[i] encoded into dst[i] (device-writable: device memory or
// mapped page-locked host memory). Equal to encode_block bit for bit.
void launch_encode_kv_blocks(const KvCodecArgs& a, void* const* dst, const std::int32_t* src_block,
                             const void* const* slab_base, int n_slabs, int n_blocks, Stream s);
// Shared memory the decoder (and the encoder) needs for a's quantization groups.
std::size_t decode_kv_smem_bytes(const KvCodecArgs& a);

// sample.cu: out[i] = argmax_row(x[i, :]) where temperature[i] <= 0, else draw_row(x[i, :],
// temperature[i], uniform[i]) (backend.h) for f32 x, equal to the host's except where the
// target lies within rounding of a boundary between two ids. temperature, uniform and out in
// device memory, [x.rows] each.
void launch_sample_rows(TensorRef x, const float* temperature, const double* uniform, std::int32_t* out, Stream s);

// norm_rope.cu
void launch_rms_norm(TensorRef x, const WeightRef& w, float eps, float weight_offset, TensorRef out, Stream s);
// acc += res, then out = rms_norm(acc).
void launch_add_rms_norm(TensorRef acc, TensorRef res, const WeightRef& w, float eps, float weight_offset,
                         TensorRef out, Stream s);
// Whether launch_rms_norm_quantize takes this norm: whole rows (w.cols == x.cols), cols a
// multiple of kQuantGroup, 16-byte aligned rows, more than 512 (or with res) and at most 4,096
// columns: the shapes whose plain norm runs the one-block register kernel.
bool rms_norm_quantize_fits(TensorRef x, const WeightRef& w, TensorRef out, const TensorRef* res);
// launch_rms_norm (res null) or launch_add_rms_norm (acc = x, res) that also writes the int8
// codes of out [n, cols] into `a` by the rule of launch_quantize_activations: the same floats and
// codes as the norm followed by that launch. Only shapes rms_norm_quantize_fits takes (AKV_CHECK).
void launch_rms_norm_quantize(TensorRef x, const TensorRef* res, const WeightRef& w, float eps,
                              float weight_offset, TensorRef out, QuantActivations a, Stream s);
void launch_rope(TensorRef x, std::int64_t head_dim, const double* inv_freq, std::int64_t rotary_dim,
                 double attention_scaling, const std::int32_t* positions, Stream s);
// launch_rope of qk [n, (n_q_heads + n_kv_heads) * head_dim] (k: its last row_width columns),
// then launch_store_kv of that k and v [n, row_width] into the KV arrays, in one launch over
// (token, head, pair): the same floats and KV bytes as the two launches. head_dim and rotary_dim
// even; b.n_tokens == n.
void launch_rope_store_kv(TensorRef qk, TensorRef v, std::int64_t head_dim, const double* inv_freq,
                          std::int64_t rotary_dim, double attention_scaling,
                          const std::int32_t* positions, void* k_cache, void* v_cache,
                          DType kv_dtype, std::int64_t row_width, std::int32_t block_size,
                          const DeviceBatch& b, Stream s);

// gemv.cu: out[n, m] = x[n, k] @ w[m, k]^T for n <= kGemvMaxRows (no bias), for up to
// kGemvMaxTargets weights of one dtype and width k in one launch.
inline constexpr int kGemvMaxTargets = 3;
struct GemvOutput {
  const WeightRef* w = nullptr;
  TensorRef out;  // [n, w->rows]
};
void launch_gemv(TensorRef x, std::span<const GemvOutput> outs, Stream s);

// skinny_gemm.cu: the same product for 2..kSkinnyMaxRows rows of x and BF16 weights on the
// tensor cores (f32 activations kept: x enters as two bf16 halves). A 16-64-row version (more
// 8-token tiles per warp) measured slower than cuBLAS at 32 rows, so larger batches stay there. Supported when k % 8 == 0 and
// x's rows are 16-byte aligned. When the rows alone do not fill the GPU, k is split over blocks:
// `partial` (at least skinny_gemm_partial_floats(...) floats; none: no split) holds the splits and
// `counters` (kSkinnyCounters, zero, left zero) elects the block that adds them.
inline constexpr int kSkinnyMaxRows = 8;
inline constexpr int kSkinnyCounters = 4096;
struct SkinnyScratch {
  float* partial = nullptr;
  std::size_t partial_floats = 0;
  unsigned* counters = nullptr;
};
bool skinny_gemm_supported(TensorRef x, std::span<const GemvOutput> outs);
// Floats of partial sums a launch over weights of `rows` rows each may need (0: it never splits).
std::size_t skinny_gemm_partial_floats(std::int64_t n, std::int64_t k, std::span<const std::int64_t> rows);
void launch_skinny_gemm(TensorRef x, std::span<const GemvOutput> outs, const SkinnyScratch& scratch, Stream s);

// attention.cu: CUDA-core attention, split over the keys (flash-decoding) when n_splits > 1.
// Token t uses min(n_splits, max(1, keys_t / kMinSplitKeys)) of the splits, decided on the device.
// `partial` holds n_tokens * n_heads * n_splits * (head_dim + 2) floats when n_splits > 1.
// group_tokens > 1 (only the value attention_split_group_tokens gives): each block takes that
// many consecutive tokens of a chunk on the tensor cores (groups aligned to the chunk's start,
// walked through the prefill tiles), so every K/V tile is read once per group rather than once
// per token; a group's splits follow from its keys (first token's window start to last token).
inline constexpr int kMinSplitKeys = 32;
void launch_attention_split(TensorRef q, const KvView& kv, const DeviceBatch& b, const AttentionArgs& a,
                            int n_splits, int group_tokens, float* partial, TensorRef out, Stream s);
// Tokens per block the tensor-core split kernel takes for multi-token chunks of this shape
// (16 rows of query heads x tokens), or 1 where only the per-token kernels run.
int attention_split_group_tokens(TensorRef q, const KvView& kv, const AttentionArgs& a);
// Token groups of a launch (grid x): one per token for group_tokens == 1, else the groups of
// every prefill tile (the chunk's first min(max_chunk, kPrefillTileRows) tokens, rounded up).
inline std::int64_t split_token_groups(const DeviceBatch& b, int group_tokens) {
  if (group_tokens == 1) return b.n_tokens;
  const std::int32_t rows = b.max_chunk < kPrefillTileRows ? b.max_chunk : kPrefillTileRows;
  return std::int64_t{b.n_tiles} * ((rows + group_tokens - 1) / group_tokens);
}

// attention_prefill.cu: tensor-core flash attention over kPrefillTileRows query tiles, only for
// BF16 KV and head_dim 64 or 128, or 256 where a block may opt in to 165 KB of shared memory
// (sm_90). On a compute capability 9.0 device with an even GQA group head_dim 64/128 runs the
// wgmma kernel (attention_prefill_wgmma.h: 2 or 4 heads per block); else mma.sync with 32 query
// rows per warp (16 for head_dim 256) and two query heads of a GQA group per block where the
// group is even.
// n_splits > 1 splits each tile's keys (runs of whole 64-key tiles, at least kMinSplitKeys keys a
// split, decided on the device as for the decode kernels); `partial` then holds
// n_tokens * n_heads * n_splits * (head_dim + 2) floats and a merge launch follows.
bool prefill_attention_supported(DType kv_dtype, std::int32_t head_dim);
void launch_attention_prefill(TensorRef q, const KvView& kv, const DeviceBatch& b, const AttentionArgs& a,
                              int n_splits, float* partial, TensorRef out, Stream s);
// Splits for a prefill launch whose tiles x head groups leave SMs idle (short chunks over long
// contexts): the count with the least modelled time (whole waves of resident blocks times the
// keys each walks, plus the merge's traffic), keeping at least kMinPrefillSplitKeys keys a split;
// 1 when the tiles alone fill the GPU twice. Reads b.max_keys and b.n_tokens (set by the caller).
inline constexpr int kMinPrefillSplitKeys = 512;
int prefill_attention_splits(const DeviceBatch& b, const AttentionArgs& a, int sm_count);

}  // namespace akv::cuda
