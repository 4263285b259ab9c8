// The CPU integer dot kernels alone (backend/cpu/quant_dot.h): one quantized input row against
// every row of a random weight matrix of one GGUF block type, the rows split into contiguous
// ranges over the threads; GB/s of weight bytes read, best of --passes passes
// (docs/perf/cpu_quant.md). A matrix of a fraction of a MiB stays in L2 (the kernel's compute
// rate); one of hundreds of MiB streams from memory. --layout repacked: Q5_0 / Q8_0 / Q4_K in the
// fast backend's load-time layout (backend/cpu/quant_repack.h), the thread ranges on whole groups.
//   quant_dot_bench --type q5_0 --cols 576 --mib 256 --threads 2 [--isa avx512] [--passes 5]
//                   [--layout gguf|repacked]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quant_repack.h"
#include "bench_util.h"
#include "tensor/quant_blocks.h"

namespace akv {
namespace {

// Byte offsets of a block's f16 scales (set to small finite values: random bytes could be
// NaN or infinite, which would not change the speed but make the results meaningless).
std::vector<std::size_t> scale_offsets(DType t) {
  switch (t) {
    case DType::Q4_K:
    case DType::Q5_K:
      return {0, 2};
    case DType::Q6_K:
      return {offsetof(quant::BlockQ6_K, d)};
    default:
      return {0};
  }
}

int run(const std::string& type_name, std::int64_t cols, double mib, int threads,
        const std::string& isa_flag, int passes, bool repacked) {
  const auto lower = [](std::string_view v) {
    std::string l(v);
    for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return l;
  };
  DType t{};
  bool found = false;
  for (DType c : {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    if (lower(dtype_name(c)) == lower(type_name)) t = c, found = true;
  Isa isa = best_isa();
  if (isa_flag == "avx2") isa = Isa::Avx2;
  const QuantDotFn dot =
      found && isa_supported(isa) && !repacked ? find_quant_dot(isa, t) : nullptr;
  const RepackedDotFn group_dot =
      found && isa_supported(isa) && repacked ? find_repacked_dot(isa, t) : nullptr;
  if (dot == nullptr && group_dot == nullptr) {
    std::fprintf(stderr, "quant_dot_bench: no %s kernel for --type %s on --isa %s\n",
                 repacked ? "repacked" : "integer", type_name.c_str(), isa_flag.c_str());
    return 2;
  }
  const std::size_t row_bytes = dtype_row_bytes(t, cols);
  const std::int64_t unit = repacked ? kRepackRows : 1;  // rows per thread range step
  const std::int64_t fit =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(mib * (1 << 20) / row_bytes));
  const std::int64_t rows = (fit + unit - 1) / unit * unit;
  std::vector<std::uint8_t> w(row_bytes * static_cast<std::size_t>(rows));
  std::mt19937 rng(1);
  for (auto& b : w) b = static_cast<std::uint8_t>(rng());
  const auto block_bytes = static_cast<std::size_t>(dtype_block_bytes(t));
  for (std::size_t off = 0; off < w.size(); off += block_bytes)
    for (std::size_t s : scale_offsets(t)) w[off + s] = 0, w[off + s + 1] = 0x20;  // f16 2^-7
  std::vector<float> x(static_cast<std::size_t>(cols));
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : x) v = u(rng);
  if (repacked) {
    std::vector<std::uint8_t> gguf = std::move(w);
    w.assign(repacked_bytes(t, rows, cols), 0);
    repack_groups(t, gguf.data(), rows, cols, 0, rows / kRepackRows, w.data());
  }
  const ActFormat format = repacked ? repacked_act_format(t) : act_format(t);
  std::vector<std::uint8_t> act(act_row_bytes(format, cols));
  quantize_act_row(isa, format, x.data(), cols, act.data());
  std::vector<float> out(static_cast<std::size_t>(rows));
  const std::int64_t n_blocks = cols / dtype_block_elems(t);
  // Passes of at least ~0.1 s: a small matrix is swept many times per pass.
  const int sweeps = std::max(1, static_cast<int>(64.0 / mib));
  double best = 1e30;
  for (int p = 0; p < passes; ++p) {
    const auto t0 = bench::Clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] {
        const std::int64_t b = rows / unit * i / threads * unit,
                           e = rows / unit * (i + 1) / threads * unit;
        for (int s = 0; s < sweeps; ++s) {
          if (repacked)
            dot_repacked_rows(group_dot, w.data(), row_bytes, n_blocks, act.data(), b, e,
                              out.data() + b);
          else
            dot(w.data() + static_cast<std::size_t>(b) * row_bytes, row_bytes, n_blocks, act.data(),
                e - b, out.data() + b);
        }
      });
    for (auto& th : pool) th.join();
    best = std::min(best, bench::seconds_since(t0) / sweeps);
  }
  std::printf("%s%s %s cols %lld, %.2f MiB, %d thread(s): %.1f GB/s\n",
              std::string(dtype_name(t)).c_str(), repacked ? " repacked" : "", isa_name(isa),
              static_cast<long long>(cols), static_cast<double>(w.size()) / (1 << 20), threads,
              static_cast<double>(w.size()) / best / 1e9);
  return 0;
}

}  // namespace
}  // namespace akv

int main(int argc, char** argv) {
  CLI::App app{"CPU integer dot kernels: GB/s of quantized weight rows read"};
  std::string type = "q5_0", isa = "avx512";
  std::int64_t cols = 576;
  double mib = 256;
  int threads = 1, passes = 5;
  std::string layout = "gguf";
  app.add_option("--type", type, "q8_0, q4_0, q5_0, q4_k, q5_k or q6_k");
  app.add_option("--cols", cols, "columns per row (a multiple of the block)");
  app.add_option("--mib", mib, "size of the weight matrix");
  app.add_option("--threads", threads)->check(CLI::Range(1, 256));
  app.add_option("--isa", isa, "avx512 (with VNNI where present) or avx2");
  app.add_option("--passes", passes)->check(CLI::Range(1, 1000));
  app.add_option("--layout", layout, "gguf (the GGUF blocks) or repacked (q5_0, q8_0, q4_k)")
      ->check(CLI::IsMember({"gguf", "repacked"}));
  CLI11_PARSE(app, argc, argv);
  return akv::run(type, cols, mib, threads, isa, passes, layout == "repacked");
}
