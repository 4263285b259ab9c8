// A diagnostic Backend that forwards every call to a CudaBackend and brackets each model op with
// two device events: the GPU time of each op kind, per step and in total. Steps run eagerly under
// it (begin_step/end_step are not forwarded: events cannot sit inside a recorded step), so decode
// steps measure the unrecorded path. A step ends where the host waits for its results
// (download, sample_rows); `collect_step` then folds that step's marks into the totals and, when
// a log is given, writes one line for it: tokens, host time from its first op to the results,
// the GPU span from its first op's start to its last op's end, the sum of op times (span minus
// sum = GPU idle between ops), and the op kinds by time. cuda_bench uses it for its per-op
// tables; `agentkv serve`/`generate` wrap their backend in it when AGENTKV_CUDA_OP_TIMES names a
// file (backend_factory.cpp; AGENTKV_CUDA_OP_TIMES_EACH=1 adds the every-op lines). Every virtual
// of Backend is forwarded: add new ones here too.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"

namespace akv {

class CudaOpTimer final : public Backend {
 public:
  // Times ops on `b` (not owned). `log`: per-step lines (may be null); only steps of at least
  // `log_min_tokens` tokens are logged. `each_op`: steps of more than one token also get a line
  // of every op in order (its start after the step's first op, its GPU time and the call's host
  // time).
  explicit CudaOpTimer(CudaBackend& b, std::FILE* log = nullptr, std::int64_t log_min_tokens = 1,
                       bool each_op = false);
  // The same, owning `b` and closing `log` at destruction.
  CudaOpTimer(std::unique_ptr<CudaBackend> b, std::FILE* log, std::int64_t log_min_tokens,
              bool each_op);
  ~CudaOpTimer() override;
  CudaOpTimer(const CudaOpTimer&) = delete;
  CudaOpTimer& operator=(const CudaOpTimer&) = delete;

  // Folds the marks of the step that just ended into the totals; download and sample_rows call it
  // once the results are on the host (a no-op when no op ran since).
  void collect_step();
  void reset();  // clears the totals
  // Markdown table: calls and GPU time of each op kind per step, averaged over collected steps.
  void print(const char* what) const;

  std::string_view name() const override { return b_.name(); }
  DType preferred_kv_dtype() const override { return b_.preferred_kv_dtype(); }
  std::optional<DeviceMemory> device_memory() const override { return b_.device_memory(); }
  bool takes_quantized_weight(DType t) const override { return b_.takes_quantized_weight(t); }
  WeightRef upload_weight(const TensorInfo& t) override { return b_.upload_weight(t); }
  void warm_up(std::int64_t max_rows) override { b_.warm_up(max_rows); }
  std::unique_ptr<DeviceBuffer> alloc(DType d, std::int64_t r, std::int64_t c) override {
    return b_.alloc(d, r, c);
  }
  KvStorage alloc_kv(const KvLayout& l) override { return b_.alloc_kv(l); }
  void download(TensorRef x, std::span<float> h) override;
  void upload(std::span<const float> h, TensorRef x) override { b_.upload(h, x); }
  void copy_kv_block(KvStorage& kv, std::int32_t a, std::int32_t d) override {
    b_.copy_kv_block(kv, a, d);
  }
  void read_kv_block(const KvStorage& kv, std::int32_t b, std::span<std::byte> h) override {
    b_.read_kv_block(kv, b, h);
  }
  void start_read_kv_block(const KvStorage& kv, std::int32_t b, std::span<std::byte> h) override {
    b_.start_read_kv_block(kv, b, h);
  }
  void start_read_kv_block_encoded(const KvStorage& kv, std::int32_t b, SpillCodec c,
                                   std::span<std::byte> h) override {
    b_.start_read_kv_block_encoded(kv, b, c, h);
  }
  void start_read_kv_blocks_encoded(const KvStorage& kv, std::span<const std::int32_t> b,
                                    SpillCodec c,
                                    std::span<const std::span<std::byte>> h) override {
    b_.start_read_kv_blocks_encoded(kv, b, c, h);
  }
  void finish_reads() override { b_.finish_reads(); }
  void write_kv_block(KvStorage& kv, std::int32_t b, std::span<const std::byte> h) override {
    b_.write_kv_block(kv, b, h);
  }
  std::unique_ptr<HostMemory> alloc_host(std::size_t n) override { return b_.alloc_host(n); }
  std::uint64_t write_kv_blocks(KvStorage& kv, std::span<const EncodedKvBlock> blocks) override {
    return b_.write_kv_blocks(kv, blocks);
  }
  bool kv_writes_done(std::uint64_t fence) override { return b_.kv_writes_done(fence); }

  void embed(const WeightRef& t, std::span<const std::int32_t> ids, float sc, TensorRef o) override;
  void rms_norm(TensorRef x, const WeightRef& w, float e, float off, TensorRef o) override;
  void matmul(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef o) override;
  void matmul_multi(TensorRef x, std::span<const MatmulTarget> t) override;
  void add(TensorRef a, TensorRef x) override;
  void add_rms_norm(TensorRef a, TensorRef x, const WeightRef& w, float e, float off,
                    TensorRef o) override;
  void rope(TensorRef x, std::int64_t hd, const RopeParams& r,
            std::span<const std::int32_t> p) override;
  void store_kv(KvStorage& kv, std::int64_t l, TensorRef k, TensorRef v,
                const ForwardBatch& b) override;
  void rope_store_kv(TensorRef qk, TensorRef v, std::int64_t hd, const RopeParams& r, KvStorage& kv,
                     std::int64_t l, const ForwardBatch& b) override;
  void attention(TensorRef q, const KvStorage& kv, std::int64_t l, const ForwardBatch& b,
                 const AttentionParams& p, TensorRef o) override;
  void glu(TensorRef g, TensorRef u, GluActivation a, TensorRef o) override;
  void gated_mlp(TensorRef x, const GatedMlpWeights& w, GluActivation a, TensorRef gu,
                 TensorRef act, TensorRef o) override;
  void moe(TensorRef x, TensorRef r, const MoeWeights& w, const MoeParams& p, const MoeScratch& sc,
           TensorRef o) override;
  void softcap(TensorRef x, float c) override;
  void sigmoid_mul(TensorRef x, TensorRef g) override;
  void causal_conv1d(TensorRef x, const WeightRef& w, KvStorage& kv, std::int64_t l,
                     const ForwardBatch& b) override;
  void gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log,
                        const WeightRef& dt_bias, KvStorage& kv, std::int64_t l,
                        const ForwardBatch& batch, TensorRef o) override;
  void gather_rows(TensorRef x, std::span<const std::int32_t> r, TensorRef o) override;
  void sample_rows(TensorRef x, std::span<const float> t, std::span<const double> u,
                   std::span<std::int32_t> ids) override;

 private:
  struct Mark {
    std::string op;
    double host_ms = 0;  // the call's own host time
    cudaEvent_t begin = nullptr, end = nullptr;
  };
  class Scope;
  Mark& next_mark(std::string op);

  std::unique_ptr<CudaBackend> owned_;
  CudaBackend& b_;
  std::FILE* log_ = nullptr;
  std::int64_t log_min_tokens_ = 1;
  bool each_op_ = false;
  bool owns_log_ = false;
  int depth_ = 0;  // ops in progress (a default op may call others)
  std::vector<Mark> marks_;
  std::size_t used_ = 0;
  std::int64_t step_tokens_ = 0;  // rows of the step's embed
  std::chrono::steady_clock::time_point step_start_;
  std::int64_t steps_ = 0;
  std::map<std::string, double> total_ms_;
  std::map<std::string, std::int64_t> calls_;
};

}  // namespace akv
