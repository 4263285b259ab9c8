// The scalar CPU backend: the oracle every other backend is tested against. Plain loops,
// dot products and softmax accumulated in double, no threads, no SIMD. Kept forever; never
// optimise it (make a fast path instead).
#pragma once

#include "backend/backend.h"

namespace akv {

class ReferenceBackend : public Backend {
 public:
  std::string_view name() const override { return "cpu-reference"; }
  // Every quantized dtype: matmul and embed dequantize one weight row at a time with the
  // scalar oracle (tensor/dequantize.h).
  bool takes_quantized_weight(DType t) const override { return dtype_is_quantized(t); }

  WeightRef upload_weight(const TensorInfo& t) override;
  std::unique_ptr<DeviceBuffer> alloc(DType dtype, std::int64_t rows, std::int64_t cols) override;
  KvStorage alloc_kv(const KvLayout& layout) override;
  void download(TensorRef x, std::span<float> host) override;
  void upload(std::span<const float> host, TensorRef x) override;
  void copy_kv_block(KvStorage& kv, std::int32_t src, std::int32_t dst) override;
  void read_kv_block(const KvStorage& kv, std::int32_t block, std::span<std::byte> host) override;
  void write_kv_block(KvStorage& kv, std::int32_t block, std::span<const std::byte> host) override;

  void embed(const WeightRef& table, std::span<const std::int32_t> ids, float scale,
             TensorRef out) override;
  void rms_norm(TensorRef x, const WeightRef& w, float eps, float weight_offset,
                TensorRef out) override;
  void matmul(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef out) override;
  void add(TensorRef acc, TensorRef x) override;
  void rope(TensorRef x, std::int64_t head_dim, const RopeParams& rope,
            std::span<const std::int32_t> positions) override;
  void store_kv(KvStorage& kv, std::int64_t layer, TensorRef k, TensorRef v,
                const ForwardBatch& batch) override;
  void attention(TensorRef q, const KvStorage& kv, std::int64_t layer, const ForwardBatch& batch,
                 const AttentionParams& p, TensorRef out) override;
  void glu(TensorRef gate, TensorRef up, GluActivation act, TensorRef out) override;
  void moe(TensorRef x, TensorRef router_logits, const MoeWeights& w, const MoeParams& p,
           const MoeScratch& scratch, TensorRef out) override;  // moe_reference.cpp
  void softcap(TensorRef x, float cap) override;
  void sigmoid_mul(TensorRef x, TensorRef gate) override;
  void causal_conv1d(TensorRef x, const WeightRef& w, KvStorage& kv, std::int64_t layer,
                     const ForwardBatch& batch) override;
  void gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log, const WeightRef& dt_bias,
                        KvStorage& kv, std::int64_t layer, const ForwardBatch& batch, TensorRef out) override;
  void gather_rows(TensorRef x, std::span<const std::int32_t> rows, TensorRef out) override;
  void sample_rows(TensorRef logits, std::span<const float> temperature, std::span<const double> u,
                   std::span<std::int32_t> out) override;

 private:
  void matmul_quantized(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef out);
};

// Scalar helpers shared by the CPU backends (the fast path uses them for its tails).
float silu(float x);
float gelu_tanh(float x);
// Row r of a quantized weight [rows, cols] as f32 (row.size() == w.cols) through the oracle.
void dequantize_weight_row(const WeightRef& w, std::int64_t r, std::span<float> row);

}  // namespace akv
