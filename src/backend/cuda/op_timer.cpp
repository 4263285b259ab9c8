#include "backend/cuda/op_timer.h"

#include <algorithm>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace akv {

// Brackets one op with its mark's events; an op inside another (a default that composes ops)
// records nothing of its own.
class CudaOpTimer::Scope {
 public:
  Scope(CudaOpTimer& t, std::string op) : t_(t), outer_(t.depth_++ == 0) {
    if (!outer_) return;
    mark_ = &t_.next_mark(std::move(op));
    AKV_CUDA_CHECK(cudaEventRecord(mark_->begin, t_.b_.stream()));
    start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    --t_.depth_;
    if (!outer_) return;
    mark_->host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
            .count();
    AKV_CUDA_CHECK(cudaEventRecord(mark_->end, t_.b_.stream()));
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  CudaOpTimer& t_;
  bool outer_;
  Mark* mark_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

CudaOpTimer::CudaOpTimer(CudaBackend& b, std::FILE* log, std::int64_t log_min_tokens, bool each_op)
    : b_(b), log_(log), log_min_tokens_(log_min_tokens), each_op_(each_op) {}

CudaOpTimer::CudaOpTimer(std::unique_ptr<CudaBackend> b, std::FILE* log,
                         std::int64_t log_min_tokens, bool each_op)
    : owned_(std::move(b)),
      b_(*owned_),
      log_(log),
      log_min_tokens_(log_min_tokens),
      each_op_(each_op),
      owns_log_(true) {}

CudaOpTimer::~CudaOpTimer() {
  for (Mark& m : marks_) {
    cudaEventDestroy(m.begin);
    cudaEventDestroy(m.end);
  }
  if (owns_log_ && log_ != nullptr) std::fclose(log_);
}

CudaOpTimer::Mark& CudaOpTimer::next_mark(std::string op) {
  if (used_ == 0) step_start_ = std::chrono::steady_clock::now();
  if (used_ == marks_.size()) {
    Mark& m = marks_.emplace_back();
    AKV_CUDA_CHECK(cudaEventCreate(&m.begin));
    AKV_CUDA_CHECK(cudaEventCreate(&m.end));
  }
  Mark& m = marks_[used_++];
  m.op = std::move(op);
  return m;
}

void CudaOpTimer::collect_step() {
  if (used_ == 0) return;
  // A download may wait only for its own copy (a hybrid model's mid-step reads): wait for the
  // step's last op too.
  AKV_CUDA_CHECK(cudaEventSynchronize(marks_[used_ - 1].end));
  const double host_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start_)
          .count();
  std::map<std::string, double> step_ms;
  double sum_ms = 0;
  for (std::size_t i = 0; i < used_; ++i) {
    float ms = 0;
    AKV_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[i].begin, marks_[i].end));
    step_ms[marks_[i].op] += ms;
    calls_[marks_[i].op] += 1;
    sum_ms += ms;
  }
  for (const auto& [op, ms] : step_ms) total_ms_[op] += ms;
  ++steps_;
  if (log_ != nullptr && step_tokens_ >= log_min_tokens_) {
    float span_ms = 0;
    AKV_CUDA_CHECK(cudaEventElapsedTime(&span_ms, marks_[0].begin, marks_[used_ - 1].end));
    std::vector<std::pair<double, std::string>> by_time;
    for (const auto& [op, ms] : step_ms) by_time.emplace_back(ms, op);
    std::sort(by_time.rbegin(), by_time.rend());
    std::fprintf(log_, "step tokens=%lld ops=%zu host_ms=%.2f gpu_span_ms=%.2f ops_ms=%.2f |",
                 static_cast<long long>(step_tokens_), used_, host_ms, span_ms, sum_ms);
    for (const auto& [ms, op] : by_time) std::fprintf(log_, " %s=%.2f", op.c_str(), ms);
    std::fprintf(log_, "\n");
    if (each_op_ &&
        step_tokens_ > 1) {  // every op in order: start after the step's first, and time
      std::fprintf(log_, "ops");
      for (std::size_t i = 0; i < used_; ++i) {
        float start = 0, ms = 0;
        AKV_CUDA_CHECK(cudaEventElapsedTime(&start, marks_[0].begin, marks_[i].begin));
        AKV_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[i].begin, marks_[i].end));
        std::fprintf(log_, " %s@%.3f:%.3f/%.3f", marks_[i].op.c_str(), start, ms,
                     marks_[i].host_ms);
      }
      std::fprintf(log_, "\n");
    }
    std::fflush(log_);
  }
  used_ = 0;
  step_tokens_ = 0;
}

void CudaOpTimer::reset() {
  total_ms_.clear();
  calls_.clear();
  steps_ = 0;
}

void CudaOpTimer::print(const char* what) const {
  std::printf("\n| %s | calls | GPU time |\n| --- | --- | --- |\n", what);
  double sum = 0;
  for (const auto& [op, ms] : total_ms_) {
    std::printf("| %s | %.0f | %.1f us |\n", op.c_str(), double(calls_.at(op)) / double(steps_),
                ms * 1e3 / double(steps_));
    sum += ms;
  }
  std::printf("| sum of ops | | %.1f us |\n", sum * 1e3 / double(steps_));
}

// --- the timed ops -----------------------------------------------------------------------------

void CudaOpTimer::download(TensorRef x, std::span<float> h) {
  {
    Scope s(*this, "download");
    b_.download(x, h);
  }
  if (depth_ == 0) collect_step();
}

void CudaOpTimer::sample_rows(TensorRef x, std::span<const float> t, std::span<const double> u,
                              std::span<std::int32_t> ids) {
  {
    Scope s(*this, "sample_rows + ids download");
    b_.sample_rows(x, t, u, ids);
  }
  if (depth_ == 0) collect_step();
}

void CudaOpTimer::embed(const WeightRef& t, std::span<const std::int32_t> ids, float sc,
                        TensorRef o) {
  if (depth_ == 0) step_tokens_ += static_cast<std::int64_t>(ids.size());
  Scope s(*this, "embed");
  b_.embed(t, ids, sc, o);
}

void CudaOpTimer::rms_norm(TensorRef x, const WeightRef& w, float e, float off, TensorRef o) {
  Scope s(*this, "rms_norm");
  b_.rms_norm(x, w, e, off, o);
}

void CudaOpTimer::matmul(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef o) {
  Scope s(*this, "matmul " + std::to_string(w.rows) + "x" + std::to_string(w.cols));
  b_.matmul(x, w, bias, o);
}

void CudaOpTimer::matmul_multi(TensorRef x, std::span<const MatmulTarget> t) {
  Scope s(*this, t.size() == 3 ? "matmul q/k/v (one call)"
                               : "matmul " + std::to_string(t.size()) + " targets (one call)");
  b_.matmul_multi(x, t);
}

void CudaOpTimer::add(TensorRef a, TensorRef x) {
  Scope s(*this, "add");
  b_.add(a, x);
}

void CudaOpTimer::add_rms_norm(TensorRef a, TensorRef x, const WeightRef& w, float e, float off,
                               TensorRef o) {
  Scope s(*this, "add_rms_norm");
  b_.add_rms_norm(a, x, w, e, off, o);
}

void CudaOpTimer::rope(TensorRef x, std::int64_t hd, const RopeParams& r,
                       std::span<const std::int32_t> p) {
  Scope s(*this, "rope");
  b_.rope(x, hd, r, p);
}

void CudaOpTimer::store_kv(KvStorage& kv, std::int64_t l, TensorRef k, TensorRef v,
                           const ForwardBatch& b) {
  Scope s(*this, "store_kv");
  b_.store_kv(kv, l, k, v, b);
}

void CudaOpTimer::rope_store_kv(TensorRef qk, TensorRef v, std::int64_t hd, const RopeParams& r,
                                KvStorage& kv, std::int64_t l, const ForwardBatch& b) {
  Scope s(*this, "rope_store_kv");
  b_.rope_store_kv(qk, v, hd, r, kv, l, b);
}

void CudaOpTimer::attention(TensorRef q, const KvStorage& kv, std::int64_t l, const ForwardBatch& b,
                            const AttentionParams& p, TensorRef o) {
  Scope s(*this, "attention");
  b_.attention(q, kv, l, b, p, o);
}

void CudaOpTimer::glu(TensorRef g, TensorRef u, GluActivation a, TensorRef o) {
  Scope s(*this, "glu");
  b_.glu(g, u, a, o);
}

void CudaOpTimer::gated_mlp(TensorRef x, const GatedMlpWeights& w, GluActivation a, TensorRef gu,
                            TensorRef act, TensorRef o) {
  Scope s(*this, "gated_mlp");
  b_.gated_mlp(x, w, a, gu, act, o);
}

void CudaOpTimer::moe(TensorRef x, TensorRef r, const MoeWeights& w, const MoeParams& p,
                      const MoeScratch& sc, TensorRef o) {
  Scope s(*this, "moe");
  b_.moe(x, r, w, p, sc, o);
}

void CudaOpTimer::softcap(TensorRef x, float c) {
  Scope s(*this, "softcap");
  b_.softcap(x, c);
}

void CudaOpTimer::sigmoid_mul(TensorRef x, TensorRef g) {
  Scope s(*this, "sigmoid_mul");
  b_.sigmoid_mul(x, g);
}

void CudaOpTimer::causal_conv1d(TensorRef x, const WeightRef& w, KvStorage& kv, std::int64_t l,
                                const ForwardBatch& b) {
  Scope s(*this, "causal_conv1d");
  b_.causal_conv1d(x, w, kv, l, b);
}

void CudaOpTimer::gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log,
                                   const WeightRef& dt_bias, KvStorage& kv, std::int64_t l,
                                   const ForwardBatch& batch, TensorRef o) {
  Scope s(*this, "gated_delta_rule");
  b_.gated_delta_rule(qkv, a, b, a_log, dt_bias, kv, l, batch, o);
}

void CudaOpTimer::gather_rows(TensorRef x, std::span<const std::int32_t> r, TensorRef o) {
  Scope s(*this, "gather_rows");
  b_.gather_rows(x, r, o);
}

}  // namespace akv
