// cuda_bench --quant-gemv 1: the quantized GEMV (backend/cuda/quant_gemv.h) per GGUF type on the
// matrices of an 8B Llama-3.1-shaped layer, for 1 to 64 activation rows: weight bytes read per
// second and that rate as a fraction of the device copy bandwidth measured in the same run (the
// decode bound; per matrix for one row, per layer for each row count), then the bf16 dequantizer
// of the path for more rows (dequantize, then a cuBLAS GEMM) over the whole layer. Each matrix is timed over enough
// copies to exceed the L2 cache, so the weights come from device memory as in a forward.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant_dequant.h"
#include "backend/cuda/quant_gemv.h"

namespace akv::bench {
void fill_bf16(void* p, std::int64_t n, std::uint64_t seed, float center, float scale);

namespace {

constexpr std::size_t kRotateBytes = std::size_t{256} << 20;  // > L2 (50 MB on an H100)

struct Matrix {
  const char* name;
  std::int64_t rows, cols;
};
// One Llama-3.1-8B layer: q/k/v fused, o, gate and up, down.
constexpr Matrix kLayer[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate", 14336, 4096},
                             {"up", 14336, 4096}, {"down", 4096, 14336}};
constexpr GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::Q5_K,
                               GgmlType::Q4_K, GgmlType::Q4_0, GgmlType::MXFP4};
constexpr std::int64_t kRows[] = {1, 2, 4, 8, 16, 32, 64};

// Seconds per call of f (median of 20 timed passes over `copies` calls each, after 3 warm-ups).
template <typename F>
double seconds_per_call(cudaStream_t s, int copies, F&& f) {
  cudaEvent_t a, b;
  AKV_CUDA_CHECK(cudaEventCreate(&a));
  AKV_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int rep = 0; rep < 23; ++rep) {
    AKV_CUDA_CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < copies; ++i) f(i);
    AKV_CUDA_CHECK(cudaEventRecord(b, s));
    AKV_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    AKV_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (rep >= 3) t.push_back(ms * 1e-3 / copies);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DevicePtr = std::unique_ptr<void, DeviceFree>;
DevicePtr device_alloc(std::size_t bytes) {
  void* p = nullptr;
  AKV_CUDA_CHECK(cudaMalloc(&p, bytes));
  return DevicePtr(p);
}

// One activation row (batch-1 decode) through both forms of the GEMV (quant_gemv.h
// QuantGemvForm), per matrix and for the whole layer, for the types of Q4_K_M and Q8_0 files.
void one_row_by_form(cudaStream_t s, const float* x, void* qa, float* y, double copy_bw) {
  constexpr cuda::QuantGemvForm kForms[] = {cuda::QuantGemvForm::WarpRows, cuda::QuantGemvForm::BlockStages,
                                            cuda::QuantGemvForm::Auto};
  constexpr const char* kFormNames[] = {"warp rows", "block stages", "auto (the default)"};
  std::printf("\n| type | matrix | one row, form | us per call | weight GB/s | of copy bandwidth |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::Q4_K}) {
    double layer_bytes = 0, layer_s[std::size(kForms)] = {};
    for (const Matrix& m : kLayer) {
      const std::size_t bytes = static_cast<std::size_t>(m.rows * cuda::quant_row_bytes(t, m.cols));
      const int copies = static_cast<int>(std::max<std::size_t>(2, kRotateBytes / bytes + 1));
      DevicePtr w = device_alloc(bytes * static_cast<std::size_t>(copies) + 16);
      fill_bf16(w.get(), static_cast<std::int64_t>(bytes * static_cast<std::size_t>(copies) / 2), 11, 0.0f, 1.0f);
      layer_bytes += static_cast<double>(bytes);
      const cuda::QuantActivations a = cuda::quant_activations_in(qa, 1, m.cols);
      cuda::launch_quantize_activations(x, m.cols, 1, m.cols, a, s);
      for (std::size_t f = 0; f < std::size(kForms); ++f) {
        const double sec = seconds_per_call(s, copies, [&](int i) {
          const cuda::QuantWeight qw{static_cast<const char*>(w.get()) + static_cast<std::size_t>(i) * bytes, t,
                                     m.rows, m.cols};
          cuda::launch_quant_gemv(qw, a, 1, y, m.rows, s, kForms[f]);
        });
        layer_s[f] += sec;
        const double rate = static_cast<double>(bytes) / sec;
        std::printf("| %s | %s %lldx%lld | %s | %.1f | %.0f | %.1f%% |\n", ggml_type_name(t).data(), m.name,
                    static_cast<long long>(m.rows), static_cast<long long>(m.cols), kFormNames[f], sec * 1e6,
                    rate * 1e-9, 100.0 * rate / copy_bw);
      }
    }
    for (std::size_t f = 0; f < std::size(kForms); ++f)
      std::printf("| %s | whole layer (%.1f MB) | %s | %.1f | %.0f | %.1f%% |\n", ggml_type_name(t).data(),
                  layer_bytes * 1e-6, kFormNames[f], layer_s[f] * 1e6, layer_bytes / layer_s[f] * 1e-9,
                  100.0 * layer_bytes / layer_s[f] / copy_bw);
  }
}

}  // namespace

int run_quant_gemv_bench(double copy_bw) {
  cudaStream_t s = nullptr;
  AKV_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::int64_t max_cols = 14336, max_rows = 14336;
  DevicePtr x = device_alloc(static_cast<std::size_t>(64 * max_cols) * 4);
  DevicePtr y = device_alloc(static_cast<std::size_t>(64 * max_rows) * 4);
  DevicePtr qa = device_alloc(cuda::quant_activation_bytes(64, max_cols));
  DevicePtr bf16 = device_alloc(static_cast<std::size_t>(max_rows * 4096) * 2);
  fill_bf16(x.get(), 64 * max_cols * 2, 7, 0.0f, 1.0f);  // finite f32 bit patterns from bf16 pairs
  AKV_CUDA_CHECK(cudaDeviceSynchronize());

  std::printf("\n| type | matrix | rows n | us per call | weight GB/s | of copy bandwidth |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (GgmlType t : kTypes) {
    double layer_bytes = 0;
    std::vector<double> layer_s(std::size(kRows), 0.0);
    double dequant_s = 0, dequant_moved = 0;
    for (const Matrix& m : kLayer) {
      const std::size_t bytes = static_cast<std::size_t>(m.rows * cuda::quant_row_bytes(t, m.cols));
      const int copies = static_cast<int>(std::max<std::size_t>(2, kRotateBytes / bytes + 1));
      DevicePtr w = device_alloc(bytes * static_cast<std::size_t>(copies) + 16);
      fill_bf16(w.get(), static_cast<std::int64_t>(bytes * static_cast<std::size_t>(copies) / 2), 11, 0.0f, 1.0f);
      layer_bytes += static_cast<double>(bytes);
      for (std::size_t ri = 0; ri < std::size(kRows); ++ri) {
        const std::int64_t n = kRows[ri];
        const cuda::QuantActivations a = cuda::quant_activations_in(qa.get(), n, m.cols);
        cuda::launch_quantize_activations(static_cast<const float*>(x.get()), m.cols, n, m.cols, a, s);
        const double sec = seconds_per_call(s, copies, [&](int i) {
          const cuda::QuantWeight qw{static_cast<const char*>(w.get()) + static_cast<std::size_t>(i) * bytes, t,
                                     m.rows, m.cols};
          cuda::launch_quant_gemv(qw, a, n, static_cast<float*>(y.get()), m.rows, s);
        });
        layer_s[ri] += sec;
        const double rate = static_cast<double>(bytes) / sec;
        if (n == 1)
          std::printf("| %s | %s %lldx%lld | %lld | %.1f | %.0f | %.1f%% |\n", ggml_type_name(t).data(), m.name,
                    static_cast<long long>(m.rows), static_cast<long long>(m.cols), static_cast<long long>(n),
                    sec * 1e6, rate * 1e-9, 100.0 * rate / copy_bw);
      }
      {  // the dequantizer of the path for more rows: reads blocks, writes bf16
        const double sec = seconds_per_call(s, copies, [&](int i) {
          cuda::launch_dequantize_bf16({static_cast<const char*>(w.get()) + static_cast<std::size_t>(i) * bytes, t,
                                        m.rows, m.cols},
                                       bf16.get(), s);
        });
        dequant_s += sec;
        dequant_moved += static_cast<double>(bytes) + static_cast<double>(m.rows * m.cols) * 2;
      }
    }
    for (std::size_t ri = 0; ri < std::size(kRows); ++ri)
      std::printf("| %s | whole layer (%.1f MB) | %lld | %.1f | %.0f | %.1f%% |\n", ggml_type_name(t).data(),
                  layer_bytes * 1e-6, static_cast<long long>(kRows[ri]), layer_s[ri] * 1e6,
                  layer_bytes / layer_s[ri] * 1e-9, 100.0 * layer_bytes / layer_s[ri] / copy_bw);
    std::printf("| %s | dequantize whole layer to bf16 | - | %.1f | %.0f (read + write) | %.1f%% |\n",
                ggml_type_name(t).data(), dequant_s * 1e6, dequant_moved / dequant_s * 1e-9,
                100.0 * dequant_moved / dequant_s / copy_bw);
  }
  one_row_by_form(s, static_cast<const float*>(x.get()), qa.get(), static_cast<float*>(y.get()), copy_bw);
  cudaStreamDestroy(s);
  return 0;
}

}  // namespace akv::bench
