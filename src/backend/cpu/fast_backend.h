// The fast CPU backend: the reference backend's memory model (host memory, zero-copy weights)
// with the hot ops replaced by threaded SIMD kernels (decode matmul, element-wise ops) and
// OpenBLAS sgemm (prefill matmul, attention tiles). Activations are f32; weights F32, BF16 or
// F16, or quantized (GGUF blocks: input rows quantized to int8 blocks, integer dot products,
// quant_dot.h; types without an integer kernel dequantized one weight row at a time). Q5_0 and
// Q8_0 matrices are repacked at upload into groups of 8 rows (quant_repack.h): the WeightRef
// keeps its dtype but points into this backend's copy, which only its own ops read.
// Anything else (other dtypes, rare ops) falls back to the reference implementation.
// Results differ from the reference by f32 rounding, and for quantized weights by the int8
// rounding of the inputs (see tests/backend for the bounds).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "backend/cpu/attention_fast.h"
#include "backend/cpu/delta_rule.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quant_repack.h"
#include "backend/cpu/reference_backend.h"

namespace akv {

// The weight dtypes the fast kernels read (others fall back to the reference).
bool fast_weight_dtype(DType t);

class FastBackend : public ReferenceBackend {
 public:
  // Matmuls with at least this many input rows go to sgemm; fewer stream each weight row once
  // through the GEMV kernel (decode and small batches).
  static constexpr std::int64_t kGemmMinRows = 8;
  // Quantized matmuls of several input rows stream this many weight rows at a time past all
  // the inputs (the tile stays in cache; decode's single input row takes its rows in one go).
  static constexpr std::int64_t kQuantRowTile = 16;

  // How long idle pool threads poll for the next op before sleeping (see ThreadPool): covers
  // the gaps between the ops of a decode step, not the gaps between steps.
  static constexpr int kSpinMicros = 50;

  // n_threads <= 0: one per hardware thread. `isa` must be supported by the CPU (tests pick
  // each one in turn). spin_micros: 0 when the cores are shared with other heavy work. Puts
  // OpenBLAS in single-threaded mode for the whole process: the backend's own pool supplies
  // the parallelism, and two pools spinning on the same cores would slow each other down.
  explicit FastBackend(int n_threads = 0, Isa isa = best_isa(), int spin_micros = kSpinMicros);

  std::string_view name() const override { return "cpu-fast"; }
  int n_threads() const { return pool_.n_threads(); }
  Isa isa() const { return isa_; }

  // Q5_0 / Q8_0 / Q4_K matrices of at least kRepackRows rows, when isa has their repacked kernel:
  // a repacked copy this backend owns (the source is not read again; it may be freed or shared
  // with another backend); anything else zero copy as the reference. Expensive: reads and
  // rewrites the matrix (on the pool).
  WeightRef upload_weight(const TensorInfo& t) override;

  void embed(const WeightRef& table, std::span<const std::int32_t> ids, float scale,
             TensorRef out) override;
  void rms_norm(TensorRef x, const WeightRef& w, float eps, float weight_offset,
                TensorRef out) override;
  void matmul(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef out) override;
  // Targets that all take the same quantized input (integer kernels, one activation format):
  // x quantized once and every target's rows in one pool job; otherwise matmul per target.
  void matmul_multi(TensorRef x, std::span<const MatmulTarget> targets) override;
  // Separate gate and up with integer kernels (and down too): one pool job computes each chunk
  // of gate and up rows, their GLU, and the down projection's quantized input for that chunk
  // (chunks aligned to its activation blocks); then down. Bit-identical to the unfused
  // composition. Otherwise the default composition.
  void gated_mlp(TensorRef x, const GatedMlpWeights& w, GluActivation act, TensorRef gate_up,
                 TensorRef act_out, TensorRef out) override;
  void add(TensorRef acc, TensorRef x) override;
  void rope(TensorRef x, std::int64_t head_dim, const RopeParams& rope,
            std::span<const std::int32_t> positions) override;
  void attention(TensorRef q, const KvStorage& kv, std::int64_t layer, const ForwardBatch& batch,
                 const AttentionParams& p, TensorRef out) override;
  void glu(TensorRef gate, TensorRef up, GluActivation act, TensorRef out) override;
  // Greedy rows through the SIMD argmax (the same ids as argmax_row); draws as the reference.
  void sample_rows(TensorRef logits, std::span<const float> temperature, std::span<const double> u,
                   std::span<std::int32_t> out) override;
  void moe(TensorRef x, TensorRef router_logits, const MoeWeights& w, const MoeParams& p,
           const MoeScratch& scratch, TensorRef out) override;  // moe_fast.cpp
  // The chunked form for prefill chunks, token by token for decode; (chunk, head) pairs on the pool.
  void gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log, const WeightRef& dt_bias,
                        KvStorage& kv, std::int64_t layer, const ForwardBatch& batch, TensorRef out) override;
  // Tokens per chunk of the chunked delta rule.
  static constexpr std::int64_t kDeltaRuleChunk = 64;

 private:
  // Expert e's rows of a stacked matrix as a matmul weight: a view for Float and GgufBlocks,
  // MXFP4 decoded to f32 into `decoded` (which it then points into).
  // out[n, rows] = x @ (expert e's rows of the MXFP4 matrix w)^T + bias, one weight row decoded
  // at a time (no f32 copy of the matrix).
  // matmul with a quantized weight: integer kernel or dequantized-row fallback, rows of w on
  // the pool.
  void matmul_quantized(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef out);
  // The integer kernel of one quantized weight: GGUF rows, or a repacked matrix (w a view of
  // its rows, as upload_weight returned it or an expert slice of it).
  struct QuantKernel {
    ActFormat format = ActFormat::None;
    QuantDotFn dot = nullptr;          // GGUF rows
    RepackedDotFn repacked = nullptr;  // repacked rows, from `base`
    const std::uint8_t* base = nullptr;
    std::int64_t first_row = 0;  // w's row 0 in the repacked matrix
    bool found() const { return dot != nullptr || repacked != nullptr; }
  };
  QuantKernel quant_kernel(const WeightRef& w) const;
  // The repacked matrix w's bytes lie in, or null.
  struct Repacked;
  const Repacked* find_repacked(const WeightRef& w) const;
  // w in GGUF blocks: w itself, or the rows of a repacked w unpacked into `gguf` (for the
  // reference paths: rare shapes and dtypes).
  WeightRef gguf_form(const WeightRef& w, std::vector<std::uint8_t>& gguf) const;
  // Whether every target is a quantized weight with an integer kernel on isa_, taking x's
  // shape, all with the same activation format (f32 x and outputs, float or no bias).
  bool shared_quantized_input(TensorRef x, std::span<const MatmulTarget> targets) const;
  // x's rows quantized into act_q8_ in `format`; returns the bytes of one row.
  std::size_t quantize_inputs(TensorRef x, ActFormat format);
  // out[r, m] (+ bias[m]) for weight rows [m0, m1) of w (integer kernel on isa_) against
  // n_rows quantized input rows, act_bytes apart.
  void quantized_rows(const WeightRef& w, const QuantKernel& kernel, const WeightRef* bias,
                      const std::uint8_t* act, std::size_t act_bytes, std::int64_t n_rows,
                      TensorRef out, std::int64_t m0, std::int64_t m1) const;
  void mxfp4_gemv(TensorRef x, const WeightRef& w, const WeightRef& scales, std::int64_t e, std::int64_t rows,
                  const WeightRef& bias, TensorRef out);
  WeightRef expert_matrix(ExpertFormat format, const WeightRef& w, const WeightRef& scales, std::int64_t e,
                          std::int64_t rows, std::vector<float>& decoded);

  // Runs fn(row_begin, row_end) over n rows, on the pool when the op is big enough to pay
  // for waking it (elements = rows x cols).
  template <typename Fn>
  void for_rows(std::int64_t n_rows, std::int64_t cols, const Fn& fn);
  // cos/sin of every (row, frequency) of a rope call; kept while q and k of a layer (and
  // the layers after it) ask for the same positions and frequencies.
  void update_rope_table(const RopeParams& rope, std::span<const std::int32_t> positions);

  Isa isa_;
  const Kernels& kernels_;
  ThreadPool pool_;
  ThreadScratch scratch_;
  AttentionScratch attention_;
  std::vector<float> norm_weight_;  // rms_norm weight + offset as f32
  std::vector<std::uint8_t> act_q8_;  // [n, act_row_bytes] the quantized inputs of a matmul
  std::vector<std::uint8_t> act_down_;  // [n, act_row_bytes] gated_mlp: down's quantized inputs
  PreparedDeltaRule delta_rule_;

  // upload_weight's repacked matrices by first byte: [bytes, bytes + size) holds rows
  // [0, rows) of a [rows, cols] matrix of `dtype`, padded to whole groups.
  struct Repacked {
    std::unique_ptr<std::uint8_t[]> bytes;
    std::size_t size = 0;
    DType dtype = DType::F32;
    std::int64_t rows = 0, cols = 0;
  };
  std::map<const std::uint8_t*, Repacked> repacked_;
  std::vector<QuantKernel> target_kernels_;  // matmul_multi: one per target
  std::vector<std::uint8_t> embed_row_;      // embed: a repacked table's row in GGUF blocks

  // The moe op's routing of one call, kept to reuse the memory. a = token * top_k + choice.
  struct MoeRouting {
    std::vector<std::int32_t> ids;     // [n * k] expert of choice a
    std::vector<float> weights;        // [n * k]
    std::vector<std::int64_t> first;   // [n_experts + 1] first sorted slot of each expert
    std::vector<std::int64_t> next;    // [n_experts] fill cursor
    std::vector<std::int64_t> slot;    // [n * k] sorted slot of choice a
    std::vector<std::int64_t> order;   // [n * k] choice at each sorted slot
    std::vector<float> decoded;        // one MXFP4 expert matrix as f32
  } moe_routing_;

  struct RopeTable {
    std::vector<double> inv_freq;
    double scaling = 0.0;
    std::vector<std::int32_t> positions;
    std::vector<float> cos, sin;  // [n_rows, rotary_dim / 2]
  } rope_table_;
};

}  // namespace akv
