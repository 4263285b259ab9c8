// The quantized weight kernels (backend/cuda/quant_*.h) against the scalar oracle
// (tensor/dequantize.h) on random blocks of every type they take: the bf16 dequantizer bit for
// bit, the activation quantizer code for code against its documented rule replayed here, and
// the GEMV and the tensor-core (MMA) kernel for 1 to 64 rows against f64 dot products over the
// oracle's weights; then the backend's choice between them and dequantize + cuBLAS.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant_dequant.h"
#include "backend/cuda/quant_gemv.h"
#include "parity_util.h"
#include "tensor/dequantize.h"
#include "tensor/dtype.h"

namespace akv::test {
namespace {

constexpr GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::MXFP4,
                               GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// The set-up copies and memsets run on the legacy default stream, which the backend's
// non-blocking stream does not wait for (a host-to-device copy from pageable memory may even
// return before its DMA lands): kernels launched on the backend's stream after them must wait.
void settle_setup() { AKV_CUDA_CHECK(cudaDeviceSynchronize()); }

// Device bytes, zeroed, freed at scope end; sized up to 16 bytes past `bytes` (the kernels'
// alignment contract).
struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(std::size_t bytes) {
    AKV_CUDA_CHECK(cudaMalloc(&p, bytes + 16));
    AKV_CUDA_CHECK(cudaMemset(p, 0, bytes + 16));
  }
  ~DeviceBytes() { cudaFree(p); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
};

std::uint16_t random_f16(std::mt19937& g, float lo, float hi) {
  const float v = std::uniform_real_distribution<float>(lo, hi)(g);
  return f32_to_f16(g() % 2 == 0 ? v : -v);
}

void put_u16(std::uint8_t* p, std::uint16_t v) { std::memcpy(p, &v, 2); }

// Random blocks of `type`: random codes and scales, the f16 scale fields set to moderate values
// (random bits would give inf and NaN) and MXFP4 exponents near 1.
std::vector<std::uint8_t> random_blocks(GgmlType type, std::int64_t n_blocks) {
  const GgmlTypeTraits tr = ggml_type_traits(type);
  std::mt19937& g = rng();
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n_blocks * tr.block_bytes));
  for (auto& b : bytes) b = static_cast<std::uint8_t>(g());
  for (std::int64_t i = 0; i < n_blocks; ++i) {
    std::uint8_t* b = bytes.data() + i * tr.block_bytes;
    switch (type) {
      case GgmlType::Q8_0:
      case GgmlType::Q4_0: put_u16(b, random_f16(g, 1e-3f, 2e-2f)); break;
      case GgmlType::MXFP4: b[0] = static_cast<std::uint8_t>(120 + g() % 8); break;
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        put_u16(b, f32_to_f16(std::uniform_real_distribution<float>(1e-4f, 2e-3f)(g)));
        put_u16(b + 2, f32_to_f16(std::uniform_real_distribution<float>(1e-4f, 2e-3f)(g)));
        break;
      case GgmlType::Q6_K: put_u16(b + 208, random_f16(g, 1e-4f, 2e-3f)); break;
      default: AKV_CHECK(false, "no generator for this type");
    }
  }
  return bytes;
}

struct QuantCase {
  GgmlType type;
  std::int64_t rows, cols;
  std::vector<std::uint8_t> bytes;
  std::vector<float> oracle;  // [rows, cols] by dequantize()

  static QuantCase make(GgmlType type, std::int64_t rows, std::int64_t cols) {
    const GgmlTypeTraits tr = ggml_type_traits(type);
    QuantCase c{type, rows, cols, random_blocks(type, rows * cols / tr.block_elems), {}};
    c.oracle.resize(static_cast<std::size_t>(rows * cols));
    dequantize(type, c.bytes, c.oracle);
    return c;
  }
};

// Shapes: rows not a multiple of the kernel's 4 rows per block, rows whose byte length is not a
// multiple of 16 (the 32-element types), a row ending in a partial 1,024-element stage, and a
// Llama-width row.
std::vector<std::pair<std::int64_t, std::int64_t>> shapes(GgmlType t) {
  // 14,336 columns: 14 weight stages, so a warp's ring of stages wraps around (and each warp of
  // the split form gets several).
  if (ggml_type_traits(t).block_elems == 256) return {{37, 1280}, {64, 4096}, {9, 14336}};
  return {{37, 1184}, {64, 4096}, {9, 14336}};
}

TEST(CudaQuant, DequantizeBf16MatchesOracleBitForBit) {
  AKV_SKIP_WITHOUT_CUDA();
  for (GgmlType t : kTypes) {
    for (auto [rows, cols] : shapes(t)) {
      const QuantCase c = QuantCase::make(t, rows, cols);
      DeviceBytes w(c.bytes.size()), out(static_cast<std::size_t>(rows * cols) * 2);
      AKV_CUDA_CHECK(cudaMemcpy(w.p, c.bytes.data(), c.bytes.size(), cudaMemcpyHostToDevice));
      AKV_CUDA_CHECK(cudaMemset(out.p, 0xff, static_cast<std::size_t>(rows * cols) * 2));  // NaN poison
      settle_setup();
      cuda::launch_dequantize_bf16({w.p, t, rows, cols}, out.p, backends().gpu.stream());
      backends().gpu.synchronize();
      std::vector<std::uint16_t> got(static_cast<std::size_t>(rows * cols));
      AKV_CUDA_CHECK(cudaMemcpy(got.data(), out.p, got.size() * 2, cudaMemcpyDeviceToHost));
      std::int64_t mismatches = 0;
      for (std::size_t i = 0; i < got.size(); ++i) mismatches += got[i] != f32_to_bf16(c.oracle[i]);
      EXPECT_EQ(mismatches, 0) << ggml_type_name(t) << " " << rows << "x" << cols;
    }
  }
}

// The activation quantizer's documented rule, on the host.
void quantize_host(const std::vector<float>& x, std::int64_t n, std::int64_t cols, std::vector<std::int8_t>& codes,
                   std::vector<float>& scales, std::vector<double>& dequantized) {
  codes.assign(static_cast<std::size_t>(n * cols), 0);
  scales.assign(static_cast<std::size_t>(n * cols / cuda::kQuantGroup * 2), 0.0f);
  dequantized.assign(codes.size(), 0.0);
  for (std::int64_t g = 0; g < n * cols / cuda::kQuantGroup; ++g) {
    const float* v = x.data() + g * cuda::kQuantGroup;
    float amax = 0.0f;
    for (int i = 0; i < cuda::kQuantGroup; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float d = amax / 127.0f;
    int sum = 0;
    for (int i = 0; i < cuda::kQuantGroup; ++i) {
      const int q = amax == 0.0f ? 0 : static_cast<int>(std::nearbyint(v[i] / d));
      codes[static_cast<std::size_t>(g * cuda::kQuantGroup + i)] = static_cast<std::int8_t>(q);
      dequantized[static_cast<std::size_t>(g * cuda::kQuantGroup + i)] = double(d) * q;
      sum += q;
    }
    scales[2 * g] = d;
    scales[2 * g + 1] = d * static_cast<float>(sum);
  }
}

// [n, rows] f64 products of x [n, cols] with the oracle's weights.
std::vector<double> reference_product(const QuantCase& c, const std::vector<double>& x, std::int64_t n) {
  std::vector<double> y(static_cast<std::size_t>(n * c.rows));
  for (std::int64_t m = 0; m < n; ++m)
    for (std::int64_t r = 0; r < c.rows; ++r) {
      double acc = 0;
      for (std::int64_t k = 0; k < c.cols; ++k) acc += double(c.oracle[r * c.cols + k]) * x[m * c.cols + k];
      y[m * c.rows + r] = acc;
    }
  return y;
}

enum class Kernel { Gemv, Mma };

// The MMA kernel's activation layout (quant_gemv.h) of quantize_host's [n, cols] codes and
// [n, cols / 32] scales: [cols / 32][n8][32] and [cols / 32][n8], rows n..n8-1 zero.
void group_major(std::int64_t n, std::int64_t cols, std::vector<std::int8_t>& codes,
                 std::vector<float>& scales) {
  const std::int64_t n8 = (n + 7) / 8 * 8, groups = cols / cuda::kQuantGroup;
  std::vector<std::int8_t> c(static_cast<std::size_t>(n8 * cols), 0);
  std::vector<float> sc(static_cast<std::size_t>(n8 * groups * 2), 0.0f);
  for (std::int64_t m = 0; m < n; ++m)
    for (std::int64_t g = 0; g < groups; ++g) {
      for (int i = 0; i < cuda::kQuantGroup; ++i)
        c[static_cast<std::size_t>((g * n8 + m) * cuda::kQuantGroup + i)] =
            codes[static_cast<std::size_t>(m * cols + g * cuda::kQuantGroup + i)];
      for (int i = 0; i < 2; ++i)
        sc[static_cast<std::size_t>((g * n8 + m) * 2 + i)] =
            scales[static_cast<std::size_t>((m * groups + g) * 2 + i)];
    }
  codes = std::move(c);
  scales = std::move(sc);
}

// A host copy of one quantized weight on the device (zero-padded past its end, as uploads are).
struct DeviceQuant {
  QuantCase c;
  DeviceBytes w;
  explicit DeviceQuant(QuantCase qc) : c(std::move(qc)), w(c.bytes.size()) {
    AKV_CUDA_CHECK(cudaMemcpy(w.p, c.bytes.data(), c.bytes.size(), cudaMemcpyHostToDevice));
  }
  cuda::QuantWeight weight() const { return {w.p, c.type, c.rows, c.cols}; }
};

// y_t [n, rows_t] of every weight (one type and width) by `kernel` in one launch, checked against
// the f64 products: with the int8 activations (only f32 rounding: accumulation over <= 4096
// terms) and with the f32 ones (int8 codes per 32 columns round each x by up to amax / 254, about
// 0.5% RMS for normal data, so the product's relative error is ~0.5% too). Also checks the
// quantized activations code for code against the documented rule.
void check_products(Kernel kernel, const std::vector<const DeviceQuant*>& ws, std::int64_t n,
                    cuda::QuantGemvForm form = cuda::QuantGemvForm::Auto) {
  const std::int64_t cols = ws[0]->c.cols;
  std::string what = std::string(kernel == Kernel::Gemv ? "GEMV " : "MMA ") +
                     std::string(ggml_type_name(ws[0]->c.type));
  for (const DeviceQuant* w : ws)
    what += " " + std::to_string(w->c.rows) + "x" + std::to_string(cols);
  what += " n " + std::to_string(n);
  if (form != cuda::QuantGemvForm::Auto)
    what += form == cuda::QuantGemvForm::WarpRows ? " warp rows" : " block stages";
  // x, with a stride of cols + 32 on the device, and one all-zero group (scale 0).
  std::vector<float> x(static_cast<std::size_t>(n * cols));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng());
  std::fill(x.begin() + cols / 2, x.begin() + cols / 2 + 32, 0.0f);
  const std::int64_t xs = cols + 32;
  const bool mma = kernel == Kernel::Mma;
  DeviceBytes xd(static_cast<std::size_t>(n * xs) * 4),
      qa(mma ? cuda::quant_mma_activation_bytes(n, cols) : cuda::quant_activation_bytes(n, cols));
  AKV_CUDA_CHECK(
      cudaMemcpy2D(xd.p, xs * 4, x.data(), cols * 4, cols * 4, n, cudaMemcpyHostToDevice));
  std::vector<std::unique_ptr<DeviceBytes>> yd;  // each [n, rows + 3], NaN-poisoned
  std::vector<cuda::QuantTarget> targets;
  for (const DeviceQuant* w : ws) {
    const std::int64_t rows = w->c.rows;
    yd.push_back(std::make_unique<DeviceBytes>(static_cast<std::size_t>(n * (rows + 3)) * 4));
    AKV_CUDA_CHECK(cudaMemset(yd.back()->p, 0xff, static_cast<std::size_t>(n * (rows + 3)) * 4));
    targets.push_back({w->weight(), static_cast<float*>(yd.back()->p), rows + 3});
  }
  settle_setup();
  const auto* xf = static_cast<const float*>(xd.p);
  const cuda::QuantActivations a = mma ? cuda::quant_mma_activations_in(qa.p, n, cols)
                                       : cuda::quant_activations_in(qa.p, n, cols);
  if (mma)
    cuda::launch_quantize_mma_activations(xf, xs, n, cols, a, backends().gpu.stream());
  else
    cuda::launch_quantize_activations(xf, xs, n, cols, a, backends().gpu.stream());
  if (!mma)
    cuda::launch_quant_gemv_multi(targets.data(), static_cast<int>(targets.size()), a, n,
                                  backends().gpu.stream(), form);
  else
    cuda::launch_quant_mma_multi(targets.data(), static_cast<int>(targets.size()), a, n,
                                 backends().gpu.stream());
  backends().gpu.synchronize();

  std::vector<std::int8_t> codes;
  std::vector<float> scales;
  std::vector<double> xq;
  quantize_host(x, n, cols, codes, scales, xq);
  if (mma) group_major(n, cols, codes, scales);
  std::vector<std::int8_t> got_codes(codes.size());
  std::vector<float> got_scales(scales.size());
  AKV_CUDA_CHECK(cudaMemcpy(got_codes.data(), a.codes, got_codes.size(), cudaMemcpyDeviceToHost));
  AKV_CUDA_CHECK(
      cudaMemcpy(got_scales.data(), a.scales, got_scales.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got_codes, codes) << what;
  EXPECT_EQ(got_scales, scales) << what;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const std::int64_t rows = ws[i]->c.rows;
    std::vector<float> y(static_cast<std::size_t>(n * rows));
    AKV_CUDA_CHECK(cudaMemcpy2D(y.data(), rows * 4, yd[i]->p, (rows + 3) * 4, rows * 4, n,
                                cudaMemcpyDeviceToHost));
    const std::vector<double> exact = reference_product(ws[i]->c, xq, n);
    EXPECT_LE(note_error(rel_error(y, exact)), 1e-5)
        << what << " target " << i << " vs int8 activations";
    const std::vector<double> full =
        reference_product(ws[i]->c, std::vector<double>(x.begin(), x.end()), n);
    // Against the f32 activations: the int8 rounding (~0.5% RMS a product over many outputs; a
    // handful of outputs, e.g. 9 rows at one activation row, spread it up to ~2x).
    EXPECT_LE(rel_error(y, full), 3e-2) << what << " target " << i << " vs f32 activations";
    // The stride's padding columns stay poisoned: nothing is written past a target's rows.
    std::vector<float> pad(static_cast<std::size_t>(n * 3));
    AKV_CUDA_CHECK(cudaMemcpy2D(pad.data(), 12, static_cast<const float*>(yd[i]->p) + rows,
                                (rows + 3) * 4, 12, n, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(std::all_of(pad.begin(), pad.end(), [](float v) { return std::isnan(v); })) << what;
  }
}

TEST(CudaQuant, GemvMatchesOracleProducts) {
  AKV_SKIP_WITHOUT_CUDA();
  for (GgmlType t : kTypes)
    for (auto [rows, cols] : shapes(t)) {
      const DeviceQuant w(QuantCase::make(t, rows, cols));
      for (std::int64_t n : {1, 2, 7, 33, 64}) check_products(Kernel::Gemv, {&w}, n);
      // One row through each form whatever the default picks for this width: a warp's own
      // rows, or the block's warps sharing its rows' stages (another summation order).
      for (const cuda::QuantGemvForm form : {cuda::QuantGemvForm::WarpRows, cuda::QuantGemvForm::BlockStages})
        check_products(Kernel::Gemv, {&w}, 1, form);
    }
}

constexpr GgmlType kMmaTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K,
                                  GgmlType::Q6_K};

// The MMA kernel takes 16 weight rows a block and 8 activation rows an mma: rows 37 leave a
// partial tile, n not a multiple of 8 partial activation tiles (their rows past n are repeats,
// never stored); the 1184- and 1280-column rows end in a partial 256-column stage (32-element
// types) or give the block's four warps unequal numbers of stages.
TEST(CudaQuant, MmaMatchesOracleProducts) {
  AKV_SKIP_WITHOUT_CUDA();
  for (GgmlType t : kMmaTypes) {
    EXPECT_TRUE(cuda::quant_mma_supports(t)) << ggml_type_name(t);
    for (auto [rows, cols] : shapes(t)) {
      const DeviceQuant w(QuantCase::make(t, rows, cols));
      for (std::int64_t n : {1, 2, 3, 8, 9, 16, 17, 33, 64}) check_products(Kernel::Mma, {&w}, n);
    }
  }
  EXPECT_FALSE(cuda::quant_mma_supports(GgmlType::MXFP4));
}

// Three weights of one type in one launch (q/k/v): each target's rows a run of the grid, each
// output its own weight's product; a 4096-row Q4_K weight among them as in an 8B layer's q.
TEST(CudaQuant, MmaMultiTargetMatchesOracle) {
  AKV_SKIP_WITHOUT_CUDA();
  for (GgmlType t : kMmaTypes) {
    const DeviceQuant q(QuantCase::make(t, 50, 512)), k(QuantCase::make(t, 16, 512)),
        v(QuantCase::make(t, 37, 512));
    for (std::int64_t n : {2, 9, 16, 40}) check_products(Kernel::Mma, {&q, &k, &v}, n);
  }
  const DeviceQuant q(QuantCase::make(GgmlType::Q4_K, 4096, 1024)),
      k(QuantCase::make(GgmlType::Q4_K, 24, 1024));
  check_products(Kernel::Mma, {&q, &k}, 8);
}

// --- through the backend: upload_weight keeps the blocks; matmul, matmul_multi and embed -----

struct UploadedQuant {
  QuantCase c;
  TensorInfo info;
  WeightRef gpu;

  static std::unique_ptr<UploadedQuant> make(GgmlType t, std::int64_t rows, std::int64_t cols) {
    auto u = std::make_unique<UploadedQuant>(UploadedQuant{QuantCase::make(t, rows, cols), {}, {}});
    EXPECT_TRUE(backends().gpu.takes_quantized_weight(*find_dtype_of(t))) << ggml_type_name(t);
    u->info.name = "w";
    u->info.dtype = *find_dtype_of(t);
    u->info.shape = {rows, cols};
    u->info.bytes = u->c.bytes;
    u->gpu = backends().gpu.upload_weight(u->info);
    return u;
  }
  // [n, rows] in f64: x [n, cols] times the oracle's weights.
  std::vector<double> product(const std::vector<float>& x, std::int64_t n) const {
    return reference_product(c, std::vector<double>(x.begin(), x.end()), n);
  }
};

// The GEMV and the MMA kernel on int8 activations (~0.5% error, see above); dequantize + cuBLAS:
// the oracle's weights rounded to bf16 and activations rounded to bf16 (bf16 tolerance).
double quant_matmul_tolerance(const CudaBackend& gpu, DType w, std::int64_t n) {
  return gpu.quant_matmul_path(w, n) == CudaBackend::QuantPath::Dequant ? tolerance(DType::BF16)
                                                                        : 2e-2;
}
double quant_matmul_tolerance(DType w, std::int64_t n) {
  return quant_matmul_tolerance(backends().gpu, w, n);
}

TEST(CudaQuant, BackendMatmulMatchesOracle) {
  AKV_SKIP_WITHOUT_CUDA();
  for (GgmlType t : kTypes) {
    const std::int64_t rows = 96, cols = 512;
    const auto w = UploadedQuant::make(t, rows, cols);
    for (std::int64_t n : {1, 5, 16, 17, 64, 65, 130}) {
      Pair x = Pair::random(n, cols, 8), out = Pair::make(n, rows, 4);
      out.poison_gpu();
      backends().gpu.matmul(x.gpu, w->gpu, nullptr, out.gpu);
      const double err = note_error(rel_error(out.get_gpu(), w->product(x.get_cpu(), n)));
      EXPECT_LE(err, quant_matmul_tolerance(w->gpu.dtype, n)) << ggml_type_name(t) << " n " << n;
    }
  }
}

// Each choice of paths (set_quant_matmul_rows) on a backend of its own: the one before the MMA
// kernel ({16, 16}), a split between the three paths, and every row count on the MMA kernel; the
// path is the one the setting names and the product matches the oracle's, MXFP4 (no MMA) on the
// GEMV up to 16 rows.
TEST(CudaQuant, BackendMatmulPathChoice) {
  AKV_SKIP_WITHOUT_CUDA();
  using P = CudaBackend::QuantPath;
  const std::int64_t rows = 40, cols = 512;
  struct Setting {
    CudaBackend::QuantMatmulRows r;
    P at[6];  // Q4_K at 1, 8, 9, 16, 17, 65 rows
  };
  const Setting settings[] = {
      {{16, 16}, {P::Gemv, P::Gemv, P::Gemv, P::Gemv, P::Dequant, P::Dequant}},
      {{8, 16}, {P::Gemv, P::Gemv, P::Mma, P::Mma, P::Dequant, P::Dequant}},
      {{0, 64}, {P::Mma, P::Mma, P::Mma, P::Mma, P::Mma, P::Dequant}}};
  const std::int64_t ns[] = {1, 8, 9, 16, 17, 65};
  for (const Setting& set : settings) {
    CudaBackend gpu;
    gpu.set_quant_matmul_rows(set.r);
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(gpu.quant_matmul_path(DType::Q4_K, ns[i]), set.at[i])
          << set.r.gemv << "/" << set.r.mma << " n " << ns[i];
      EXPECT_EQ(gpu.quant_matmul_path(DType::MXFP4, ns[i]), ns[i] <= 16 ? P::Gemv : P::Dequant)
          << ns[i];
    }
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4}) {
      const QuantCase c = QuantCase::make(t, rows, cols);
      TensorInfo info{.name = "w",
                      .dtype = *find_dtype_of(t),
                      .shape = {rows, cols},
                      .bytes = c.bytes,
                      .file = "random"};
      const WeightRef w = gpu.upload_weight(info);
      for (std::int64_t n : ns) {
        const auto x_buf = gpu.alloc(DType::F32, n, cols), out_buf = gpu.alloc(DType::F32, n, rows);
        const std::vector<float> x = random_floats(static_cast<std::size_t>(n * cols));
        gpu.upload(x, x_buf->tensor());
        gpu.upload(std::vector<float>(static_cast<std::size_t>(n * rows),
                                      std::numeric_limits<float>::quiet_NaN()),
                   out_buf->tensor());
        gpu.matmul(x_buf->tensor(), w, nullptr, out_buf->tensor());
        std::vector<float> got(static_cast<std::size_t>(n * rows));
        gpu.download(out_buf->tensor(), got);
        const double err =
            rel_error(got, reference_product(c, std::vector<double>(x.begin(), x.end()), n));
        EXPECT_LE(note_error(err), quant_matmul_tolerance(gpu, w.dtype, n))
            << ggml_type_name(t) << " " << set.r.gemv << "/" << set.r.mma << " n " << n;
      }
    }
  }
}

// A weight larger than the dequantization chunk goes through the prefill path in row chunks
// (40 + 40 + 16 rows here), each writing its own columns of the output.
TEST(CudaQuant, BackendPrefillMatmulInRowChunks) {
  AKV_SKIP_WITHOUT_CUDA();
  const std::int64_t rows = 96, cols = 512, n = 70;
  CudaBackend gpu;
  gpu.set_dequant_chunk_elems(40 * cols);
  const QuantCase c = QuantCase::make(GgmlType::Q6_K, rows, cols);
  TensorInfo info{.name = "w", .dtype = DType::Q6_K, .shape = {rows, cols}, .bytes = c.bytes, .file = "random"};
  const WeightRef w = gpu.upload_weight(info);
  const auto x_buf = gpu.alloc(DType::F32, n, cols), out_buf = gpu.alloc(DType::F32, n, rows);
  const std::vector<float> x = random_floats(static_cast<std::size_t>(n * cols));
  gpu.upload(x, x_buf->tensor());
  gpu.upload(std::vector<float>(static_cast<std::size_t>(n * rows), std::numeric_limits<float>::quiet_NaN()),
             out_buf->tensor());
  gpu.matmul(x_buf->tensor(), w, nullptr, out_buf->tensor());
  std::vector<float> got(static_cast<std::size_t>(n * rows));
  gpu.download(out_buf->tensor(), got);
  const double err = rel_error(got, reference_product(c, std::vector<double>(x.begin(), x.end()), n));
  EXPECT_LE(note_error(err), tolerance(DType::BF16));
}

// q/k/v-style: two quantized weights of different types and a bf16 one in one matmul_multi, with
// biases; x is quantized once for both quantized targets.
TEST(CudaQuant, BackendMatmulMultiMixesQuantizedAndPlain) {
  AKV_SKIP_WITHOUT_CUDA();
  const std::int64_t cols = 256;
  const auto q = UploadedQuant::make(GgmlType::Q4_K, 64, cols);
  const auto k = UploadedQuant::make(GgmlType::Q8_0, 32, cols);
  auto v = WeightPair::random(DType::BF16, 32, cols, 0.05f);
  auto bias = WeightPair::random(DType::F32, 1, 64, 0.1f, true);
  for (std::int64_t n : {1, 3, 80}) {
    Pair x = Pair::random(n, cols), oq = Pair::make(n, 64), ok = Pair::make(n, 32), ov = Pair::make(n, 32);
    oq.poison_gpu();
    ok.poison_gpu();
    ov.poison_gpu();
    const MatmulTarget gpu_targets[] = {{&q->gpu, &bias->gpu, oq.gpu}, {&k->gpu, nullptr, ok.gpu}, {&v->gpu, nullptr, ov.gpu}};
    backends().gpu.matmul_multi(x.gpu, gpu_targets);
    backends().ref.matmul(x.cpu, v->cpu, nullptr, ov.cpu);
    const std::vector<float> xs = x.get_cpu();
    std::vector<double> want_q = q->product(xs, n);
    std::vector<float> b(64);
    std::memcpy(b.data(), bias->bytes.data(), b.size() * sizeof(float));
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < 64; ++c) want_q[r * 64 + c] += b[c];
    EXPECT_LE(note_error(rel_error(oq.get_gpu(), want_q)), quant_matmul_tolerance(DType::Q4_K, n))
        << "Q4_K n " << n;
    EXPECT_LE(note_error(rel_error(ok.get_gpu(), k->product(xs, n))),
              quant_matmul_tolerance(DType::Q8_0, n))
        << "Q8_0 n " << n;
    EXPECT_LE(ov.error(), n <= 8 ? 1e-5 : tolerance(DType::BF16)) << "BF16 n " << n;
  }
}

// Quantized targets of one type share a GEMV launch (at most three a launch): four Q4_K weights of
// different row counts and a Q8_0 one between them, each output its own weight's product.
TEST(CudaQuant, BackendMatmulMultiGroupsTargetsByType) {
  AKV_SKIP_WITHOUT_CUDA();
  const std::int64_t cols = 512;
  const std::int64_t rows[] = {64, 32, 40, 96, 16};
  const GgmlType types[] = {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q4_K};
  std::vector<std::unique_ptr<UploadedQuant>> w;
  for (int i = 0; i < 5; ++i) w.push_back(UploadedQuant::make(types[i], rows[i], cols));
  for (std::int64_t n : {1, 3, 16, 17}) {
    Pair x = Pair::random(n, cols);
    std::vector<Pair> outs;
    for (int i = 0; i < 5; ++i) {
      outs.push_back(Pair::make(n, rows[i]));
      outs.back().poison_gpu();
    }
    std::vector<MatmulTarget> targets;
    for (int i = 0; i < 5; ++i) targets.push_back({&w[i]->gpu, nullptr, outs[i].gpu});
    backends().gpu.matmul_multi(x.gpu, targets);
    const std::vector<float> xs = x.get_cpu();
    for (int i = 0; i < 5; ++i)
      EXPECT_LE(note_error(rel_error(outs[i].get_gpu(), w[i]->product(xs, n))),
                quant_matmul_tolerance(w[i]->gpu.dtype, n))
          << "target " << i << " (" << ggml_type_name(types[i]) << ") n " << n;
  }
}

TEST(CudaQuant, BackendEmbedMatchesOracleExactly) {
  AKV_SKIP_WITHOUT_CUDA();
  for (GgmlType t : kTypes) {
    const std::int64_t rows = 50, cols = 512;
    const auto w = UploadedQuant::make(t, rows, cols);
    std::vector<std::int32_t> ids(9);
    for (auto& id : ids) id = static_cast<std::int32_t>(rng()() % rows);
    Pair out = Pair::make(9, cols, 8);
    out.poison_gpu();
    backends().gpu.embed(w->gpu, ids, 1.5f, out.gpu);
    const std::vector<float> got = out.get_gpu();
    std::int64_t mismatches = 0;
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (std::int64_t c = 0; c < cols; ++c)
        mismatches += got[i * cols + c] != w->c.oracle[ids[i] * cols + c] * 1.5f;
    EXPECT_EQ(mismatches, 0) << ggml_type_name(t);
  }
}

// A quantized matmul inside recorded decode steps (CUDA graphs): captured once per batch size,
// then replayed with new activations; each step's result must follow its own x. One sequence
// takes the GEMV, 9 and 24 the MMA kernel, 40 the dequantize + cuBLAS path (all recordable).
TEST(CudaQuant, MatmulInsideRecordedSteps) {
  AKV_SKIP_WITHOUT_CUDA();
  CudaBackend& gpu = backends().gpu;
  const std::int64_t rows = 128, cols = 1024;
  const auto w = UploadedQuant::make(GgmlType::Q4_K, rows, cols);
  for (const std::int32_t n : {1, 9, 24, 40}) {
    const DecodeBatch d(gpu, n);
    Pair x = Pair::make(n, cols), out = Pair::make(n, rows);
    const CudaBackend::StepStats before = gpu.step_stats();
    gpu.set_step_graphs(true);
    for (int step = 0; step < 4; ++step) {
      x.set(random_floats(static_cast<std::size_t>(n * cols)));
      std::vector<float> got(static_cast<std::size_t>(n * rows));
      gpu.begin_step(d.batch, d.kv, &d.kv);
      gpu.matmul(x.gpu, w->gpu, nullptr, out.gpu);
      gpu.download(out.gpu, got);
      gpu.end_step();
      EXPECT_LE(note_error(rel_error(got, w->product(x.get_cpu(), n))),
                quant_matmul_tolerance(DType::Q4_K, n))
          << "n " << n << " step " << step;
    }
    const CudaBackend::StepStats after = gpu.step_stats();
    EXPECT_EQ(after.captured - before.captured, 1) << "n " << n;
    EXPECT_EQ(after.replayed - before.replayed, 3) << "n " << n;
  }
}

}  // namespace
}  // namespace akv::test
