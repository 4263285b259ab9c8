// The Backend interface: device memory and the coarse ops a transformer forward pass needs.
// Models are written once against it; cpu/ (scalar reference and fast path) and cuda/
// implement it. All ops are called from the engine thread only and are synchronous from the
// caller's point of view (a device backend may queue work; download() waits for it).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "backend/batch.h"
#include "backend/kv_storage.h"
#include "backend/moe.h"
#include "backend/tensor_ref.h"
#include "backend/tier_io.h"
#include "tensor/dtype.h"

namespace akv {

struct TensorInfo;

// The greedy pick of one logits row, the rule sample_rows (temperature 0) and the Sampler's
// greedy path follow: scan from id 0 and move on only to a strictly larger value. So ties go to the lowest
// id, NaN never wins, and a NaN at id 0 is never beaten (the answer is 0; so is an all-NaN row).
inline std::int32_t argmax_row(std::span<const float> row) {
  std::int32_t best = 0;
  for (std::size_t i = 1; i < row.size(); ++i)
    if (row[i] > row[best]) best = static_cast<std::int32_t>(i);
  return best;
}

// The plain temperature draw from one logits row, the rule every sample_rows and the Sampler's
// unfiltered draw follow (u in [0, 1) is the request's uniform): x = logit * (1 / temperature)
// in float, max = the largest x, total = the sum of exp(double(x) - max) in id order; then the
// first id at which u * total minus the weights so far (subtracted in id order) drops below 0,
// which is never an id of zero weight (-inf x). When rounding leaves a sliver (u near 1), the
// last id, whatever its weight. A NaN or +inf x, or a row all -inf, makes total NaN: the last id.
inline std::int32_t draw_row(std::span<const float> logits, float temperature, double u) {
  AKV_CHECK(!logits.empty(), "draw_row: empty row");
  const float inv_t = 1.0f / temperature;
  float max = logits[0] * inv_t;
  for (float l : logits) max = std::max(max, l * inv_t);  // NaN at 0 sticks; later NaN skipped
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l * inv_t) - max);
  double left = u * total;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    left -= std::exp(static_cast<double>(logits[i] * inv_t) - max);
    if (left < 0) return static_cast<std::int32_t>(i);
  }
  return static_cast<std::int32_t>(logits.size() - 1);
}

enum class GluActivation { Silu, GeluTanh };

// RoPE for one op call: rotate the first rotary_dim dims of every head, pairs (i, i + rotary_dim/2)
// (the "rotate_half" convention of Hugging Face checkpoints).
struct RopeParams {
  std::span<const double> inv_freq;  // [rotary_dim / 2]
  std::int64_t rotary_dim = 0;
  double attention_scaling = 1.0;
};

struct AttentionParams {
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;
  std::int64_t head_dim = 0;
  double scale = 0.0;             // multiplies q.k
  std::int64_t window = 0;        // 0: causal over all earlier positions; else keys with pos > q_pos - window
  double logit_softcap = 0.0;     // 0: none; else scores = cap * tanh(scores / cap)
  // Empty: none. Else [1, n_heads] F32 learned sink logits (GPT-OSS): one more softmax term per
  // head, exp(sink), that takes probability mass and adds no value.
  WeightRef sinks = {};
};

// One product of a matmul_multi call: out[n, w.rows] = x @ w^T (+ bias).
struct MatmulTarget {
  const WeightRef* w = nullptr;
  const WeightRef* bias = nullptr;  // null or empty: none
  TensorRef out;
};

// The weights of a gated MLP (Llama, Gemma, Phi-3): either gate and up fused in one matrix
// (gate rows first) or the two apart; down always apart.
struct GatedMlpWeights {
  WeightRef gate_up;   // fused [2 * inter, k]; empty: gate and up below
  WeightRef gate, up;  // [inter, k] each
  WeightRef down;      // [hidden, inter]
};

// Free and total bytes of a device's own memory (a GPU's; CPU backends have none to report).
struct DeviceMemory {
  std::int64_t free_bytes = 0;
  std::int64_t total_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // The KV cache dtype this backend runs fastest with: what `serve` and the benchmarks allocate
  // unless told otherwise (F32 on the CPU, where attention reads it without conversion).
  virtual DType preferred_kv_dtype() const { return DType::F32; }
  // The device's memory now (after the weights and buffers allocated so far); nullopt when the
  // backend computes in host memory.
  virtual std::optional<DeviceMemory> device_memory() const { return std::nullopt; }
  // Whether weights of quantized dtype `t` (GGUF blocks, a WeightRef of whole-block rows) may
  // be handed to matmul (and matmul_multi, gated_mlp) and embed as they are; the loader
  // dequantizes the others at load. Default: none.
  virtual bool takes_quantized_weight(DType t) const {
    (void)t;
    return false;
  }

  // Once, after the weights are uploaded and before the first step: a backend may prepare what
  // its first steps of up to `max_rows` tokens would otherwise pay for inside them (the CUDA
  // backend: cuBLASLt's algorithm choice and kernel loading for every class of GEMM rows, see
  // cuda/gemm_plans.h). Default: nothing.
  virtual void warm_up(std::int64_t max_rows) { (void)max_rows; }

  // --- memory -------------------------------------------------------------------------------
  // A weight usable by matmul/embed/rms_norm. The backend may keep the host bytes as they are
  // (CPU, zero copy from the mmap) or copy them to the device. The source must outlive it.
  virtual WeightRef upload_weight(const TensorInfo& t) = 0;
  // A zero-filled [rows, cols] tensor owned by the returned buffer.
  virtual std::unique_ptr<DeviceBuffer> alloc(DType dtype, std::int64_t rows, std::int64_t cols) = 0;
  virtual KvStorage alloc_kv(const KvLayout& layout) = 0;
  // Copies a [rows, cols] F32 tensor to host memory (rows*cols floats). Waits for queued work.
  virtual void download(TensorRef x, std::span<float> host) = 0;
  // Copies host rows in (rows*cols floats) into an F32 tensor.
  virtual void upload(std::span<const float> host, TensorRef x) = 0;

  // Copies every layer's K and V of block `src` to block `dst` (copy-on-write of a shared block).
  virtual void copy_kv_block(KvStorage& kv, std::int32_t src, std::int32_t dst) = 0;
  // Copies every layer's K and V of `block` to host memory, laid out as
  // [n_layers][K, V][block_size, row_width] in the KV dtype (host.size() == layout.block_bytes()).
  // Waits for queued work; `host` is filled on return. Spilling a block to another tier starts
  // here.
  virtual void read_kv_block(const KvStorage& kv, std::int32_t block, std::span<std::byte> host) = 0;
  // A deferred read_kv_block: the bytes are the block as it is at this call (later writes to it,
  // write_kv_block included, do not change them), and they are in `host` once finish_reads()
  // returns; `host` must stay valid and untouched until then. A device backend queues the copy
  // and waits for nothing here, so a caller moving many blocks waits once, in finish_reads().
  // The defaults read at once and finish nothing.
  virtual void start_read_kv_block(const KvStorage& kv, std::int32_t block, std::span<std::byte> host) {
    read_kv_block(kv, block, host);
  }
  // A deferred read of `block` encoded with `codec` (kv_codec.h): `host` (encoded_bytes of the
  // block shape) holds encode_block of the block as it is at this call once finish_reads()
  // returns. The default reads and encodes at once on the host; the CUDA backend encodes on the
  // device, writing alloc_host memory in place.
  virtual void start_read_kv_block_encoded(const KvStorage& kv, std::int32_t block, SpillCodec codec,
                                           std::span<std::byte> host);
  // start_read_kv_block_encoded of blocks[i] into host[i] for every i, byte for byte as those
  // calls in order (host spans do not overlap). The default makes those calls; the CUDA backend
  // encodes every block in one launch, so a demotion of many blocks pays for one.
  virtual void start_read_kv_blocks_encoded(const KvStorage& kv, std::span<const std::int32_t> blocks,
                                            SpillCodec codec, std::span<const std::span<std::byte>> host) {
    AKV_CHECK(blocks.size() == host.size(), "start_read_kv_blocks_encoded: one host span per block");
    for (std::size_t i = 0; i < blocks.size(); ++i) start_read_kv_block_encoded(kv, blocks[i], codec, host[i]);
  }
  // Fills the host bytes of every start_read_kv_block so far; waits for their copies.
  virtual void finish_reads() {}
  // The inverse: fills `block` from host memory in the same layout (restoring a block). May
  // return before the copy lands (a device backend queues it); `host` may be reused or freed on
  // return, and every later op, copy or read sees the block's new contents.
  virtual void write_kv_block(KvStorage& kv, std::int32_t block, std::span<const std::byte> host) = 0;
  // Host memory for the host tier's slots (tier_io.h), 4096-byte aligned, uninitialised. The CUDA
  // backend's is page-locked and mapped (cudaHostAlloc), so its tier copies read and write it in
  // place; the default is plain memory. Expensive: allocate in large chunks.
  virtual std::unique_ptr<HostMemory> alloc_host(std::size_t bytes) { return alloc_plain_host(bytes); }
  // Restores many blocks from their encoded host form: for each, like decode_block (kv_codec.h)
  // then write_kv_block. Every later op, copy or read sees the blocks' new contents. Returns a
  // fence: the host bytes must stay valid and unchanged until kv_writes_done(fence). The
  // default decodes on the host and writes each block (done on return); the CUDA backend decodes
  // on the device, reading alloc_host memory in place and staging other memory.
  virtual std::uint64_t write_kv_blocks(KvStorage& kv, std::span<const EncodedKvBlock> blocks);
  // True once the host bytes of the write_kv_blocks calls up to `fence` may be reused or freed.
  // Never waits.
  virtual bool kv_writes_done(std::uint64_t fence) {
    (void)fence;
    return true;
  }

  // --- ops (shapes in brackets; n = tokens in the batch) ------------------------------------
  // out[n, d] = table[ids[i], :] * scale
  virtual void embed(const WeightRef& table, std::span<const std::int32_t> ids, float scale,
                     TensorRef out) = 0;
  // out[n, c] = x / rms(x) * (w + weight_offset), normalising each group of w.cols elements of a
  // row on its own (w.cols == c for a layer norm, == head_dim for per-head q/k norms).
  virtual void rms_norm(TensorRef x, const WeightRef& w, float eps, float weight_offset,
                        TensorRef out) = 0;
  // out[n, m] = x[n, k] @ w[m, k]^T (+ bias[m])
  virtual void matmul(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef out) = 0;
  // Several matmuls of the same x (q/k/v, gate/up); a backend may run them as one launch.
  // The default calls matmul once per target.
  virtual void matmul_multi(TensorRef x, std::span<const MatmulTarget> targets) {
    for (const MatmulTarget& t : targets) matmul(x, *t.w, t.bias, t.out);
  }
  // acc[n, c] += x[n, c]
  virtual void add(TensorRef acc, TensorRef x) = 0;
  // acc += x, then out = rms_norm(acc) as rms_norm above (the residual add before a norm).
  // The default calls add, then rms_norm.
  virtual void add_rms_norm(TensorRef acc, TensorRef x, const WeightRef& w, float eps, float weight_offset,
                            TensorRef out) {
    add(acc, x);
    rms_norm(acc, w, eps, weight_offset, out);
  }
  // x[n, h * head_dim] rotated in place at positions[n].
  virtual void rope(TensorRef x, std::int64_t head_dim, const RopeParams& rope,
                    std::span<const std::int32_t> positions) = 0;
  // Writes k, v [n, n_kv_heads * head_dim] into the layer's KV blocks at each token's position.
  virtual void store_kv(KvStorage& kv, std::int64_t layer, TensorRef k, TensorRef v,
                        const ForwardBatch& batch) = 0;
  // rope of qk [n, (n_heads + n_kv_heads) * head_dim] at batch.positions (q heads first, then
  // k: its last kv.layout.row_width() columns), then store_kv of that k and v into `layer`: the
  // attention's position step as one op, so a device backend may run it as one kernel. Results
  // equal to the two calls. The default makes them.
  virtual void rope_store_kv(TensorRef qk, TensorRef v, std::int64_t head_dim,
                             const RopeParams& rope, KvStorage& kv, std::int64_t layer,
                             const ForwardBatch& batch) {
    const std::int64_t kv_width = kv.layout.row_width();
    this->rope(qk, head_dim, rope, batch.positions);
    store_kv(kv, layer, qk.cols_slice(qk.cols - kv_width, kv_width), v, batch);
  }
  // out[n, n_heads * head_dim] = causal softmax(q k^T * scale) v over each sequence's cached
  // positions (including the tokens just stored).
  virtual void attention(TensorRef q, const KvStorage& kv, std::int64_t layer,
                         const ForwardBatch& batch, const AttentionParams& p, TensorRef out) = 0;
  // out[n, c] = act(gate[n, c]) * up[n, c]
  virtual void glu(TensorRef gate, TensorRef up, GluActivation act, TensorRef out) = 0;
  // out[n, hidden] = down(act(gate(x)) * up(x)) for x [n, k]: the whole gated MLP as one op, so a
  // backend may keep the intermediates in a narrower type (CUDA: bf16/f16 for half weights on
  // its cuBLAS path). gate_up [n, 2 * inter] and act_out [n, inter] are the caller's f32 scratch:
  // their contents are unspecified afterwards (a backend may store other types in their memory).
  // None of x, gate_up, act_out and out may overlap. The default is the unfused composition:
  // matmul (fused weights) or matmul_multi into gate_up's two halves, glu into act_out, matmul
  // down into out.
  virtual void gated_mlp(TensorRef x, const GatedMlpWeights& w, GluActivation act, TensorRef gate_up,
                         TensorRef act_out, TensorRef out) {
    const std::int64_t inter = act_out.cols;
    const TensorRef gate = gate_up.cols_slice(0, inter);
    const TensorRef up = gate_up.cols_slice(inter, inter);
    if (!w.gate_up.empty()) {
      matmul(x, w.gate_up, nullptr, gate_up);
    } else {
      const MatmulTarget targets[] = {{&w.gate, nullptr, gate}, {&w.up, nullptr, up}};
      matmul_multi(x, targets);
    }
    glu(gate, up, act, act_out);
    matmul(act_out, w.down, nullptr, out);
  }
  // out[n, hidden] = sum over the p.top_k experts e that p.gating picks for each row from
  // router_logits[n, n_experts] of weight_e * (down_e(act(gate_e(x), up_e(x))) + down_bias_e),
  // gate/up with gate_up_bias_e added. Routing is decided where the op runs (no host round trip)
  // and only the chosen experts' weights are read. Ties in the top-k go to the lower expert id.
  virtual void moe(TensorRef x, TensorRef router_logits, const MoeWeights& w, const MoeParams& p,
                   const MoeScratch& scratch, TensorRef out) = 0;
  // x = cap * tanh(x / cap)
  virtual void softcap(TensorRef x, float cap) = 0;
  // x[n, c] *= sigmoid(gate[n, c]) (the output gate of Qwen3-Next / Qwen3.5 attention), or with
  // gate [n, 1] x[n, c] *= sigmoid(gate[n, 0]) (one gate per row: a MoE block's shared expert).
  virtual void sigmoid_mul(TensorRef x, TensorRef gate) = 0;

  // --- linear-attention (Gated DeltaNet) layers of hybrid models; `layer` indexes the
  // linear layers (kv.state), each chunk's state is its state_slot (batch.h) ----------
  // x[n, C] = silu(causal depthwise conv of x with w [C, conv_rows + 1]) in place, each chunk
  // continuing its slot's conv state (the inputs before start_pos; zeros at start_pos 0) and
  // leaving its last conv_rows inputs there.
  virtual void causal_conv1d(TensorRef x, const WeightRef& w, KvStorage& kv, std::int64_t layer,
                             const ForwardBatch& batch) = 0;
  // out[n, n_v_heads * v_head_dim] = the gated delta rule over each chunk, continuing its slot's
  // recurrent state S [n_v_heads][k_head_dim, v_head_dim] (zeros at start_pos 0) and leaving the
  // state after its last token there. qkv [n, 2 * n_k_heads * k_head_dim + n_v_heads * v_head_dim]
  // ([q | k | v], value head h reads q/k head h / (n_v_heads / n_k_heads)); a, b [n, n_v_heads];
  // a_log, dt_bias [n_v_heads]. Per token and value head:
  //   q, k = l2norm(q, k) (eps 1e-6), q *= k_head_dim^-1/2, beta = sigmoid(b),
  //   g = -exp(a_log) * softplus(a + dt_bias), S = exp(g) S, S += k (beta (v - S^T k))^T, o = S^T q.
  virtual void gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log,
                                const WeightRef& dt_bias, KvStorage& kv, std::int64_t layer,
                                const ForwardBatch& batch, TensorRef out) = 0;
  // out[i, :] = x[rows[i], :]
  virtual void gather_rows(TensorRef x, std::span<const std::int32_t> rows, TensorRef out) = 0;
  // out[i] = argmax_row(logits[i, :]) where temperature[i] <= 0, else
  // draw_row(logits[i, :], temperature[i], u[i]), for an F32 logits [n, vocab] (temperature, u
  // and out of size n): greedy and plain temperature sampling without copying the rows to the
  // host. Waits for queued work, like download(); inside a recorded step `out` is filled when
  // end_step() returns, and `temperature` and `u` must stay valid and unchanged until then. The
  // default downloads the rows (one host allocation per call) and picks on the host; the CPU
  // backends read the rows in place, the CUDA backend picks on the device.
  virtual void sample_rows(TensorRef logits, std::span<const float> temperature, std::span<const double> u,
                           std::span<std::int32_t> out) {
    const auto n = static_cast<std::size_t>(logits.rows);
    AKV_CHECK(out.size() == n && temperature.size() == n && u.size() == n, "sample_rows: one value per row");
    std::vector<float> rows(static_cast<std::size_t>(logits.rows * logits.cols));
    download(logits, rows);
    const auto cols = static_cast<std::size_t>(logits.cols);
    for (std::size_t i = 0; i < n; ++i) {
      const std::span<const float> row = std::span<const float>(rows).subspan(i * cols, cols);
      out[i] = temperature[i] <= 0.0f ? argmax_row(row) : draw_row(row, temperature[i], u[i]);
    }
  }

  // --- recorded steps (optional: CUDA graphs; the defaults do nothing) ----------------------
  // A caller may bracket one forward pass over `batch` with begin_step() ... end_step(). A
  // backend may then record the ops of the first step of a shape and replay the recording for
  // later steps of that shape (the CUDA backend: decode-only batches, one graph per batch size),
  // copying only the host arrays the ops receive (ids, positions, block tables, logit rows, RoPE
  // tables) in one transfer. The caller promises:
  //   - the ops between the two calls, their order and every argument other than those host
  //     arrays' contents depend only on `caller`, `kv` and the batch's shape (chunks, tokens per
  //     chunk, logit rows); the device buffers they touch stay allocated (allocate before
  //     begin_step). The backend checks this as the ops come and aborts on a difference;
  //   - only ops on `batch` and download() run inside (no upload, KV block copies or reads);
  //   - host arrays passed to ops stay valid and unchanged until end_step() returns.
  // download() inside a step fills its host span when end_step() returns, not before.
  virtual void begin_step(const ForwardBatch& batch, const KvStorage& kv, const void* caller) {
    (void)batch, (void)kv, (void)caller;
  }
  virtual void end_step() {}
};

}  // namespace akv
