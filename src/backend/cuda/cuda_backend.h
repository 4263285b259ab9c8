// The CUDA backend: weights, activations and paged KV in device memory; ops enqueued on one
// stream (asynchronous to the caller; download() waits). Activations are f32; weights keep their
// checkpoint dtype (F32/BF16/F16); KV is F32, BF16 or F16 per KvLayout::dtype. Matmuls of at most
// kGemvMaxRows rows use our GEMV kernel (matmul_multi: one launch for q/k/v), with BF16 weights
// and 2 to kSkinnyMaxRows rows our tensor-core skinny GEMM (f32 activations kept); larger ones
// cuBLAS (F32 weights: SGEMM; BF16/F16 weights: activations rounded to the weight
// dtype, f32 accumulate and output; the gated MLP keeps its gate/up and act intermediates in
// the weight dtype there). Quantized weights (GGUF blocks: Q8_0, Q4_0, MXFP4, Q4_K, Q5_K, Q6_K)
// stay as raw blocks on the device: matmuls of up to 4 rows run the quantized GEMV (quant_gemv.h,
// int8 activations), 5 to 32 rows the int8 tensor-core kernel on the blocks (quant_mma.cu; the
// GEMV up to 16 rows for the types it does not take), larger ones, in recorded steps too,
// dequantize the weight into a bf16 scratch matrix (allocated at upload, sized by the largest
// quantized weight up to 128 MiB; larger weights go in row chunks) for cuBLAS. Attention uses
// tensor cores for prefill chunks with BF16 KV and head_dim 64/128, else CUDA cores with split-K
// (flash-decoding). Decode steps bracketed by begin_step/end_step run as CUDA graphs, one per batch
// size (step_graph.cpp); everything else runs eagerly. KV blocks move to and from host memory
// through a pinned staging ring on a copy stream of their own, or, for the host tier's mapped
// page-locked slots (alloc_host), read and written in place by the gather, encode and decode
// kernels (kv_transfer.cpp, kv_codec.cu). Engine thread only, like every Backend.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_attention.h"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/quant_gemv.h"

struct CUstream_st;
struct CUevent_st;
struct cublasContext;

namespace akv {

namespace cuda {
struct StepGraph;
class GemmPlans;
}

class CudaBackend final : public Backend {
 public:
  // Uses CUDA device `device`; aborts (AKV_CUDA_CHECK) when it cannot be initialised.
  explicit CudaBackend(int device = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // True when at least one CUDA device is usable (tests skip otherwise).
  static bool device_available();

  std::string_view name() const override { return "cuda"; }
  // BF16: the tensor-core decode and prefill attention kernels read it, and it halves the bytes
  // every tier moves.
  DType preferred_kv_dtype() const override { return DType::BF16; }
  std::optional<DeviceMemory> device_memory() const override;
  // The block types the quantized kernels read (quant_gemv.h), for matmul and embed.
  bool takes_quantized_weight(DType t) const override;

  WeightRef upload_weight(const TensorInfo& t) override;
  void warm_up(std::int64_t max_rows) override;
  std::unique_ptr<DeviceBuffer> alloc(DType dtype, std::int64_t rows, std::int64_t cols) override;
  KvStorage alloc_kv(const KvLayout& layout) override;
  void download(TensorRef x, std::span<float> host) override;
  void upload(std::span<const float> host, TensorRef x) override;
  void copy_kv_block(KvStorage& kv, std::int32_t src, std::int32_t dst) override;
  // Gathers the block into a staging slot on the compute stream; the KV copy stream copies it to
  // the slot's pinned half; waits for that copy only (which follows the queued compute work).
  void read_kv_block(const KvStorage& kv, std::int32_t block, std::span<std::byte> host) override;
  // The same gather and copy, without the wait: the slot is held (not reused) until
  // finish_reads() waits for its copy and copies its pinned bytes out to `host`. When no slot is
  // free, any copy first finishes the pending reads. Into mapped memory (alloc_host) the block is
  // gathered straight into `host` on the compute stream, and finish_reads only waits for it.
  void start_read_kv_block(const KvStorage& kv, std::int32_t block, std::span<std::byte> host) override;
  // start_read_kv_blocks_encoded of the one block.
  void start_read_kv_block_encoded(const KvStorage& kv, std::int32_t block, SpillCodec codec,
                                   std::span<std::byte> host) override;
  // Encoded on the device (kv_codec.cu): the blocks whose host bytes lie in mapped memory with
  // one table upload and one encode launch on the compute stream, written there in place; the
  // others as many as fit a staging slot per launch, copied down on the KV copy stream and out
  // at finish_reads. A raw codec is start_read_kv_block per block.
  void start_read_kv_blocks_encoded(const KvStorage& kv, std::span<const std::int32_t> blocks, SpillCodec codec,
                                    std::span<const std::span<std::byte>> host) override;
  void finish_reads() override;
  // Asynchronous: `host` is copied into a pinned staging slot, the KV copy stream copies it to the
  // device and the compute stream scatters it into the block after that copy (no host wait).
  // Waits only when every staging slot is still in flight.
  void write_kv_block(KvStorage& kv, std::int32_t block, std::span<const std::byte> host) override;
  // Page-locked, mapped host memory (cudaHostAlloc): tier copies read and write it in place.
  std::unique_ptr<HostMemory> alloc_host(std::size_t bytes) override;
  // Blocks whose bytes lie in mapped memory (alloc_host): one decode kernel per codec on the
  // compute stream reads them in place over PCIe (kv_codec.cu); no host copy, no wait. Others
  // are staged through the ring like write_kv_block and decoded from the slot. The fence is an
  // event recorded on the compute stream after the last of those kernels.
  std::uint64_t write_kv_blocks(KvStorage& kv, std::span<const EncodedKvBlock> blocks) override;
  bool kv_writes_done(std::uint64_t fence) override;

  void embed(const WeightRef& table, std::span<const std::int32_t> ids, float scale, TensorRef out) override;
  void rms_norm(TensorRef x, const WeightRef& w, float eps, float weight_offset, TensorRef out) override;
  void matmul(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef out) override;
  void matmul_multi(TensorRef x, std::span<const MatmulTarget> targets) override;
  void add(TensorRef acc, TensorRef x) override;
  void add_rms_norm(TensorRef acc, TensorRef x, const WeightRef& w, float eps, float weight_offset,
                    TensorRef out) override;
  void rope(TensorRef x, std::int64_t head_dim, const RopeParams& rope,
            std::span<const std::int32_t> positions) override;
  void store_kv(KvStorage& kv, std::int64_t layer, TensorRef k, TensorRef v, const ForwardBatch& batch) override;
  // With decode fusion on: one kernel over (token, head, pair) (cuda::launch_rope_store_kv);
  // off: rope, then store_kv.
  void rope_store_kv(TensorRef qk, TensorRef v, std::int64_t head_dim, const RopeParams& rope,
                     KvStorage& kv, std::int64_t layer, const ForwardBatch& batch) override;
  void attention(TensorRef q, const KvStorage& kv, std::int64_t layer, const ForwardBatch& batch,
                 const AttentionParams& p, TensorRef out) override;
  void glu(TensorRef gate, TensorRef up, GluActivation act, TensorRef out) override;
  // With more than kGemvMaxRows rows and gate/up/down all BF16 or all F16: x rounded to half once,
  // gate/up GEMMs writing half, a half GLU, the down GEMM reading half act (f32 accumulate, f32
  // out). The half intermediates live in gate_up's and act_out's memory where those are
  // contiguous, else in scratch. With decode fusion on and a quantized down weight on the GEMV
  // path (at most quant_rows_.gemv rows): gate/up through matmul_multi, then the GLU writing act
  // and the down GEMV's int8 codes in one kernel, then the down GEMV. Otherwise the default
  // composition.
  void gated_mlp(TensorRef x, const GatedMlpWeights& w, GluActivation act, TensorRef gate_up, TensorRef act_out,
                 TensorRef out) override;
  // cuda_moe.cpp. Routing always on the device. At most kMoeDecodeMaxRows rows, and inside a
  // recorded step: the decode kernels (only the chosen experts' rows read; scratch.gate_up and
  // scratch.down unused). More rows, eagerly: pairs grouped by expert, one host wait for the
  // experts' row counts, then the tensor cores through cuBLAS for gate/up and for down (BF16/F16
  // experts: activations rounded to their dtype, f32 accumulate; MXFP4: each expert dequantized
  // to bf16 first; F32: f32 throughout), the intermediates in the GEMM dtype kept in
  // scratch.gate_up, scratch.act and scratch.down's memory. Shapes neither path takes run the
  // per-pair kernels (moe_kernels.h).
  void moe(TensorRef x, TensorRef router_logits, const MoeWeights& w, const MoeParams& p,
           const MoeScratch& scratch, TensorRef out) override;
  static constexpr std::int64_t kMoeDecodeMaxRows = 8;
  // Which MoE kernels run (before/after measurements and tests): the per-pair kernels only, or
  // the decode kernels and the grouped prefill with one cublasGemmEx per non-empty expert, or
  // (the default) with one cublasGemmGroupedBatchedEx for all of them (float experts whose
  // operands are 16-byte aligned; MXFP4 experts and other shapes go one GEMM per expert).
  enum class MoeKernels { PerPair, ExpertLoop, Grouped };
  void set_moe_kernels(MoeKernels k);
  // The decode kernels (when MoeKernels is not PerPair): the two launches of moe_decode.cu, or
  // (the default) the same work arranged to hide DRAM latency (moe_decode_pipelined.cu).
  // AGENTKV_CUDA_MOE_DECODE=two_launch in the environment starts the backend with the former.
  enum class MoeDecodeKernels { TwoLaunch, Pipelined };
  void set_moe_decode_kernels(MoeDecodeKernels k) { moe_decode_kernels_ = k; }
  // MXFP4 experts (ExpertFormat::Mxfp4, GPT-OSS as released) in decode: F32, the kernels above
  // (E2M1 values in f32, parity 1e-5 with the oracle), or (the default) Int8, the staged kernels
  // of GGUF blocks (moe_decode_quant.cu) reading the released layout: dp4a against x and the
  // activations quantized to int8 per 32 columns, as the quantized GEMV. Shapes the int8 kernels
  // do not take (unaligned stacks) fall back to F32. AGENTKV_CUDA_MOE_MXFP4=f32 in the
  // environment starts the backend with F32.
  enum class MoeMxfp4Decode { F32, Int8 };
  void set_moe_mxfp4_decode(MoeMxfp4Decode d) { moe_mxfp4_decode_ = d; }
  // How those int8 kernels stage expert rows (cuda::MoeQuantStaging, moe_kernels.h): whole runs of
  // each warp's rows where they fit (the default), or a window of each row at a time.
  // AGENTKV_CUDA_MOE_STAGING=windows in the environment starts the backend with the latter.
  void set_moe_quant_staging(cuda::MoeQuantStaging s) { moe_quant_staging_ = s; }
  // cublasGemmGroupedBatchedEx launches so far (tests and benchmarks check the path ran).
  std::int64_t moe_grouped_gemm_launches() const { return moe_grouped_gemm_launches_; }
  void softcap(TensorRef x, float cap) override;
  void sigmoid_mul(TensorRef x, TensorRef gate) override;
  // Eager chunks of at least the tile minimum (below) run the tiled kernels, the others and
  // every chunk of a recorded step the token-by-token kernel (linear_attention.cu).
  void causal_conv1d(TensorRef x, const WeightRef& w, KvStorage& kv, std::int64_t layer,
                     const ForwardBatch& batch) override;
  // cuda::kConvTileMinTokens by default; a value past any chunk: none (tests, measurements).
  void set_conv1d_tile_min_tokens(std::int32_t n) { conv1d_tile_min_tokens_ = std::max(n, 1); }
  // Eager chunks of at least the chunk minimum (below) run the chunked kernels
  // (delta_rule_chunked.cu) where cuda::delta_rule_chunked_fits the head dims; the others, and
  // every chunk of a recorded step, the token-by-token kernel (linear_attention.cu).
  void gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log, const WeightRef& dt_bias,
                        KvStorage& kv, std::int64_t layer, const ForwardBatch& batch, TensorRef out) override;
  // cuda::kDeltaChunkMinTokens by default; 1 sends every eager chunk to the chunked kernels, a
  // value past any chunk none (tests, before/after measurements).
  void set_delta_rule_chunk_min_tokens(std::int32_t n) { delta_rule_chunk_min_tokens_ = std::max(n, 1); }
  // The chunked kernels' products (cuda::DeltaChunkMath): Tf32x3 (tensor cores) by default;
  // AGENTKV_CUDA_DELTA_CHUNK=fma|tf32x3|tf32 in the environment starts the backend with another.
  void set_delta_chunk_math(cuda::DeltaChunkMath m) { delta_chunk_math_ = m; }
  void gather_rows(TensorRef x, std::span<const std::int32_t> rows, TensorRef out) override;
  // Greedy picks and plain temperature draws on the device (sample.cu), one block per row; only
  // the ids are copied back (at end_step inside a step). temperature and u travel with the
  // step's host arrays; a draw's id equals the host's except where its target lies within
  // rounding (~1e-12 relative) of a boundary between two ids.
  void sample_rows(TensorRef logits, std::span<const float> temperature, std::span<const double> u,
                   std::span<std::int32_t> out) override;

  // Decode-only batches of at most kMaxGraphTokens tokens are captured once per key
  // (cuda::StepKey) and replayed; other steps, and all steps while graphs are off, run eagerly.
  void begin_step(const ForwardBatch& batch, const KvStorage& kv, const void* caller) override;
  void end_step() override;
  static constexpr std::int32_t kMaxGraphTokens = 64;
  // Which kernel a quantized matmul of n activation rows runs (docs/perf/cuda.md): the GEMV on
  // the raw blocks (dp4a: its work per weight byte grows with the rows), the int8 tensor-core
  // kernel on the raw blocks (types cuda::quant_mma_supports), or the weight dequantized to bf16
  // for a cuBLAS GEMM (whose time hardly depends on the rows). Recorded steps take each of them.
  enum class QuantPath { Gemv, Mma, Dequant };
  // Rows up to which the types the MMA kernel does not take run the GEMV.
  static constexpr std::int64_t kQuantGemvRows = 16;
  static_assert(kQuantGemvRows <= cuda::kQuantGemvMaxRows, "the GEMV takes that many rows");
  // For the types the MMA kernel takes: up to `gemv` rows the GEMV, up to `mma` rows the MMA
  // kernel, more rows dequantize + cuBLAS. {16, 16} is the choice before the MMA kernel (for
  // before/after measurements); gemv 0 sends every row count up to `mma` to the MMA kernel.
  struct QuantMatmulRows {
    std::int64_t gemv = 4, mma = 32;
  };
  void set_quant_matmul_rows(QuantMatmulRows r);
  QuantPath quant_matmul_path(DType w, std::int64_t n) const;
  // Decode fusion (on by default; AGENTKV_CUDA_FUSE=0 in the environment starts the backend with
  // it off, for before/after measurements): rope_store_kv as one kernel; a whole-row rms_norm or
  // add_rms_norm also writing the int8 codes of its output for the quantized GEMV that follows
  // (see norm_codes_); gated_mlp's GLU writing the down GEMV's int8 codes; q/k and v of two
  // quantized types (Q4_K/Q5_K + Q6_K) in one GEMV launch (mixed_gemv). Results are the same bit
  // for bit either way.
  // Drops the recorded steps (their ops were the other choice's); not inside a step.
  void set_decode_fusion(bool on);
  bool decode_fusion() const { return decode_fusion_; }
  // Graphs on (the default; AGENTKV_CUDA_GRAPHS=0 in the environment turns them off) or off.
  // Recorded graphs stay while off (they go when a device buffer is allocated or freed).
  void set_step_graphs(bool on);
  struct StepStats {
    std::int64_t captured = 0, replayed = 0, eager = 0;  // steps, counted at end_step
  };
  StepStats step_stats() const { return step_stats_; }
  // cuBLASLt heuristic queries so far: one per class of half-precision GEMM (gemm_plans.h).
  std::int64_t gemm_heuristic_queries() const;
  // Attention for chunks over long contexts (on by default): several tokens of a short chunk per
  // split-K block, and key splits for prefill launches that do not fill the GPU. Off: one token a
  // block and unsplit prefill tiles (the earlier kernels, for before/after measurements).
  void set_chunk_attention(bool on);
  // Prefill chunks of head_dim 256 on the tensor cores (on by default where the kernel fits the
  // device); off: the CUDA-core kernel, as before it (before/after measurements).
  void set_prefill_attention_d256(bool on) { prefill_attention_d256_ = on; }

  // Most elements of a quantized weight dequantized at once for a prefill GEMM (default 64M: 128
  // MiB of bf16; larger weights, an lm_head, go through in row chunks). Set before uploading.
  static constexpr std::int64_t kDequantChunkElems = std::int64_t{64} << 20;
  void set_dequant_chunk_elems(std::int64_t elems) { dequant_chunk_elems_ = elems; }

  // A device copy of raw bytes as a weight (benchmarks fill it on the device themselves).
  WeightRef alloc_weight(DType dtype, std::int64_t rows, std::int64_t cols);
  // Waits for all queued work.
  void synchronize();
  CUstream_st* stream();
  // The device's multiprocessors.
  int sm_count() const { return sm_count_; }
  // Bytes of weights held on the device.
  std::int64_t weight_bytes() const { return weight_bytes_; }
  // The KV staging ring's shape (zeros before the first read_kv_block or write_kv_block).
  struct KvStaging {
    std::size_t slots = 0, slot_bytes = 0;
  };
  KvStaging kv_staging() const { return {kv_ring_.free.size(), kv_ring_.slot_bytes}; }

 private:
  // Small host arrays (ids, positions, batch descriptors, RoPE tables) uploaded through pinned
  // slots and reused while their bytes repeat (every layer of a forward sees the same batch).
  struct UploadSlot {
    void* host = nullptr;    // pinned
    void* device = nullptr;
    std::size_t capacity = 0, size = 0;
    CUevent_st* copied = nullptr;
    std::uint64_t last_use = 0;
  };
  const void* upload_small(const void* data, std::size_t bytes);
  // Fills batch_host_ with the descriptor of `batch` (see cuda::DeviceBatch); the returned
  // DeviceBatch has its counts and offsets from `base`.
  cuda::DeviceBatch build_batch(const ForwardBatch& batch, const std::int32_t* base);
  cuda::DeviceBatch upload_batch(const ForwardBatch& batch);
  void* scratch(std::size_t bytes, int which);

  // The tier copies' staging ring (kv_transfer.cpp): slot i is the `slot_bytes` at
  // host + i * slot_bytes (pinned) and at device + i * slot_bytes, each holding a segment pointer
  // table and one block's bytes; free[i] is recorded after the slot's last use on the GPU.
  // held[i]: the slot keeps a started read's bytes until finish_reads().
  struct KvRing {
    char* host = nullptr;
    char* device = nullptr;
    std::size_t slot_bytes = 0;
    std::vector<CUevent_st*> free;
    std::vector<bool> held;
    std::size_t next = 0;
  };
  // A started read: slot `slot`'s bytes from `data_at` on go to `host` at finish_reads().
  struct KvPendingRead {
    std::size_t slot = 0, data_at = 0;
    std::span<std::byte> host;
  };
  // The next slot of at least `slot_bytes` that no pending read holds, once its previous use has
  // ended (the ring grows, after finishing the pending reads and draining, for a larger block).
  std::size_t take_kv_slot(std::size_t slot_bytes);
  // Gathers `block` into a fresh slot on the compute stream and queues its copy to the slot's
  // pinned half on the KV copy stream (free[slot] recorded after it). Returns the slot.
  std::size_t gather_kv_block(const KvStorage& kv, std::int32_t block, std::size_t& data_at);
  // start_read_kv_blocks_encoded's two paths: blocks `ids` encoded into mapped memory at the
  // device addresses `dst`; and the leading blocks[which[j]] that fit one staging slot encoded
  // there, their copies out to host[which[j]] left to finish_reads (returns how many).
  void encode_kv_blocks_mapped(const KvStorage& kv, SpillCodec codec, std::span<const void* const> dst,
                               std::span<const std::int32_t> ids);
  std::size_t encode_kv_blocks_staged(const KvStorage& kv, SpillCodec codec, std::span<const std::int32_t> blocks,
                                      std::span<const std::span<std::byte>> host, std::span<const std::size_t> which);

  // Recorded steps (step_graph.cpp).
  enum class StepMode { Eager, Capture, Replay };
  // Called by every op inside a step with its signature: true when the op must not launch
  // (replaying: the graph holds it).
  bool replaying(std::uint64_t signature);
  bool recording() const { return step_mode_ != StepMode::Eager; }
  const void* step_upload(const void* data, std::size_t bytes);
  void drop_graphs(bool stale_only);
  void launch_step(cuda::StepGraph& g);
  // A device-to-host copy of `rows` rows of `row_bytes` (source rows `stride_bytes` apart) into
  // `host`: queued now and synchronised, or, inside a recorded step, recorded and handed out at
  // end_step. `signature` identifies the op.
  void copy_out(const void* device, std::size_t stride_bytes, std::size_t row_bytes, std::size_t rows,
                std::span<std::byte> host, std::uint64_t signature);
  // out = x @ w^T for every target through the skinny GEMM (one launch).
  void skinny(TensorRef x, std::span<const MatmulTarget> targets);
  // out = x @ w^T for a quantized weight on QuantPath::Dequant: the weight dequantized to bf16
  // in row chunks, each through cuBLAS.
  void matmul_dequantized(TensorRef x, const WeightRef& w, TensorRef out);
  // The kernels' view of a quantized weight (its dtype one the kernels read: AKV_CHECK).
  static cuda::QuantWeight quant_weight(const WeightRef& w);
  // moe's grouped path (after routing into scratch.route).
  void moe_grouped(TensorRef x, const MoeWeights& w, const MoeParams& p, const MoeScratch& scratch, TensorRef out);
  // out rows of expert e = in rows of expert e @ (its `rows` rows of `weights`)^T for every
  // non-empty expert e (rows placed by moe_offsets_); in and out of `dtype`, strides in elements.
  struct MoeExpertGemms {
    ExpertFormat format;
    WeightRef weights, scales;  // stacked experts (MXFP4: blocks and scales)
    std::int64_t rows;          // per expert
    DType dtype;                // of in, out and the multiply (BF16 for MXFP4)
    const char* in;
    std::int64_t in_stride;
    char* out;
    std::int64_t out_stride;
    void* dequant;              // MXFP4: bf16 [rows, weights.cols] scratch
  };
  void moe_expert_gemms(const MoeExpertGemms& a);
  // The same as one cublasGemmGroupedBatchedEx launch (float experts); false (nothing queued)
  // where an operand is not 16-byte aligned or cuBLAS lacks the kernel.
  bool moe_grouped_gemm(const MoeExpertGemms& a);
  const void* moe_expert_weights(const MoeExpertGemms& a, std::int64_t e) const;
  // The plain-dtype matmuls of matmul_multi (bias not added).
  void matmul_plain(TensorRef x, std::span<const MatmulTarget> targets);
  // out = x @ w^T through cuBLAS; xh is x already rounded to w's dtype (null for F32 weights).
  void gemm(TensorRef x, const void* xh, const WeightRef& w, TensorRef out);
  // out[n, w.rows] = a[n, w.cols] @ w^T through cublasGemmEx for half (or F32) weights: a of w's dtype
  // (rows a_stride elements apart), out F32 or of w's dtype (rows out_stride apart); f32 accumulate.
  void gemm_half(const void* a, std::int64_t a_stride, std::int64_t n, const WeightRef& w, void* out,
                 DType out_dtype, std::int64_t out_stride);

  int device_ = 0;
  int sm_count_ = 0;
  CUstream_st* stream_ = nullptr;
  CUstream_st* copy_stream_ = nullptr;      // weight uploads
  CUstream_st* kv_stream_ = nullptr;        // KV tier copies (host <-> staging ring)
  CUevent_st* kv_handoff_ = nullptr;        // between kv_stream_ and the compute stream
  KvRing kv_ring_;
  std::vector<KvPendingRead> kv_reads_;     // started, not yet finished, in start order
  CUevent_st* kv_direct_read_ = nullptr;    // after the last gather straight into mapped memory
  bool kv_direct_reads_pending_ = false;
  // write_kv_blocks fences: an event per call, oldest first; fences up to kv_writes_done_ passed.
  struct KvWriteEvent {
    std::uint64_t fence = 0;
    CUevent_st* event = nullptr;
  };
  std::deque<KvWriteEvent> kv_write_events_;
  std::vector<CUevent_st*> kv_spare_events_;
  std::uint64_t kv_write_fence_ = 0, kv_writes_done_ = 0;
  std::vector<std::byte> decode_table_;     // the codec kernels' table, kept to avoid allocation
  CUevent_st* weights_copied_ = nullptr;
  bool weights_pending_ = false;
  cublasContext* blas_ = nullptr;
  void* blas_workspace_ = nullptr;
  std::unique_ptr<cuda::GemmPlans> gemm_plans_;  // half-precision GEMMs (shares blas_workspace_)
  // The half GEMMs' weight shapes seen at upload (for warm_up); data null: a quantized weight's
  // rows dequantized into dequant_scratch_.
  struct GemmWeight {
    const void* data = nullptr;
    std::int64_t rows = 0, cols = 0;
    DType dtype = DType::BF16;
  };
  std::vector<GemmWeight> gemm_weights_;
  void note_gemm_weight(const WeightRef& w);
  std::vector<void*> weights_;              // device allocations owned by this backend
  std::int64_t weight_bytes_ = 0, progress_bytes_ = 0;
  std::vector<void*> staging_;              // pinned, for weight uploads
  std::vector<CUevent_st*> staging_free_;   // recorded when the copy out of a staging buffer ends
  std::size_t staging_next_ = 0;
  std::vector<UploadSlot> slots_;
  std::uint64_t use_counter_ = 0;
  // [n_seqs][4] first_row, n_tokens, start_pos, state slot of the batch's chunks of
  // [min_tokens, below_tokens) tokens (linear attention); their count in *n_seqs when given.
  const std::int32_t* upload_state_seqs(const KvStorage& kv, const ForwardBatch& batch, std::int32_t min_tokens = 0,
                                        std::int32_t below_tokens = INT32_MAX, int* n_seqs = nullptr);
  std::int32_t delta_rule_chunk_min_tokens_ = cuda::kDeltaChunkMinTokens;
  cuda::DeltaChunkMath delta_chunk_math_ = cuda::DeltaChunkMath::Tf32x3;
  std::int32_t conv1d_tile_min_tokens_ = cuda::kConvTileMinTokens;
  bool prefill_attention_d256_ = true;
  std::vector<std::int32_t> state_seqs_host_;
  std::vector<std::int32_t> batch_host_;    // descriptor being built (kept to avoid allocation)
  struct Scratch {
    void* ptr = nullptr;
    std::size_t capacity = 0;
  };
  Scratch scratch_[8];                      // 0: half-precision matmul input (and moe's grouped
                                            // rows), 1: attention partials (moe's expert groups,
                                            // the chunked delta rule's per-chunk matrices),
                                            // 2: skinny GEMM partial sums (moe's dequantized MXFP4
                                            // expert), 3: sample_rows ids,
                                            // 4 and 5: gated_mlp's half gate/up and act when
                                            // the caller's buffers are strided, 6: int8
                                            // activations of the quantized GEMV and MMA,
                                            // 7: the int8 codes of a norm's output (norm_codes_)
  void* dequant_scratch_ = nullptr;         // bf16 rows of a quantized weight (prefill GEMMs)
  std::size_t dequant_scratch_bytes_ = 0;
  std::int64_t dequant_chunk_elems_ = kDequantChunkElems;
  QuantMatmulRows quant_rows_;
  // Decode fusion's handoff from a norm to the quantized GEMV of its output. A whole-row
  // rms_norm/add_rms_norm of at most quant_rows_.gemv rows (fusion on, quantized weights
  // uploaded) also writes its output's GEMV activation codes (cuda::QuantActivations) into
  // scratch 7 and records them here with op_seq_ after its own bump. matmul_multi takes them
  // instead of quantizing x when x is that output (data, rows, cols, stride) and op_seq_ has not
  // moved since: every op that may write an activation (upload included) bumps op_seq_ on entry,
  // composite ops (matmul, gated_mlp) only after the matmul_multi they start with, and
  // begin_step/end_step too (a recorded step's codes live in its graph's scratch). The same op
  // order replays in a recorded step, so captured and eager steps decide alike. Writes to the
  // norm's output from outside the backend's ops (raw cudaMemcpy) are not seen: do not.
  struct NormCodes {
    const void* data = nullptr;
    std::int64_t rows = 0, cols = 0, stride = 0;
    std::uint64_t seq = 0;
    cuda::QuantActivations a{};
  };
  NormCodes norm_codes_;
  std::uint64_t op_seq_ = 1;        // norm_codes_.seq 0: none
  bool quantized_weights_ = false;  // a quantized weight was uploaded
  // The norm ops with decode fusion's codes (see norm_codes_); res null: rms_norm.
  void norm_with_codes(TensorRef x, const TensorRef* res, const WeightRef& w, float eps,
                       float weight_offset, TensorRef out);
  // norm_codes_'s codes when x is the output they were written for and no op ran since, else null.
  const cuda::QuantActivations* norm_codes_for(TensorRef x) const;
  // matmul_multi's GEMV of quantized targets of two types in one launch (decode fusion: v in
  // Q6_K next to q/k in Q4_K or Q5_K, cuda::launch_quant_gemv_mixed), biases not added; false
  // (nothing queued) for other targets. x's codes: norm_codes, else quantized into scratch 6
  // (quant_scratch, allocated here when null).
  bool mixed_gemv(TensorRef x, std::span<const MatmulTarget> targets,
                  const cuda::QuantActivations* norm_codes, std::uint8_t*& quant_scratch);
  // gated_mlp's quantized decode path (fusion on, down on the GEMV): gate/up through
  // matmul_multi, then GLU and the down codes in one kernel, then the down GEMV.
  void gated_mlp_quantized(TensorRef x, const GatedMlpWeights& w, GluActivation act,
                           TensorRef gate_up, TensorRef act_out, TensorRef out);
  unsigned* skinny_counters_ = nullptr;     // [cuda::kSkinnyCounters], zero between launches

  std::uint64_t alloc_epoch_ = 0;           // CudaBuffer constructions and destructions
  bool graphs_on_ = true;
  bool decode_fusion_ = true;
  bool chunk_attention_ = true;
  MoeKernels moe_kernels_ = MoeKernels::Grouped;
  MoeDecodeKernels moe_decode_kernels_ = MoeDecodeKernels::Pipelined;
  MoeMxfp4Decode moe_mxfp4_decode_ = MoeMxfp4Decode::Int8;
  cuda::MoeQuantStaging moe_quant_staging_ = cuda::MoeQuantStaging::Runs;
  bool moe_grouped_gemm_unsupported_ = false;  // cuBLAS answered NOT_SUPPORTED once
  std::int64_t moe_grouped_gemm_launches_ = 0;
  std::vector<std::int32_t> moe_offsets_;      // moe_grouped: the experts' first rows, read back
  StepMode step_mode_ = StepMode::Eager;
  bool in_step_ = false;
  std::vector<std::unique_ptr<cuda::StepGraph>> graphs_;
  cuda::StepGraph* step_ = nullptr;         // captured or replayed now
  std::uint64_t step_count_ = 0;
  std::size_t step_op_ = 0, step_upload_ = 0, step_download_ = 0;
  const SequenceChunk* step_seqs_ = nullptr;  // the step's batch, as store_kv/attention see it
  std::int32_t step_keys_bound_ = 0;
  cuda::DeviceBatch step_batch_;            // in the step graph's arena
  std::vector<std::span<std::byte>> step_out_;  // download targets, filled at end_step
  StepStats step_stats_;
};

}  // namespace akv
