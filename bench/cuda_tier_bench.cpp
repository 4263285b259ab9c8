// cuda_bench --tier-copy 1: the host tier's copies on the CUDA backend for Llama-3.1-8B-shaped
// KV blocks (32 layers x [K, V] x 16 tokens x 8 KV heads x 128, bf16: 2 MiB a block), next to
// the link they use. First the PCIe link itself (one pinned buffer copied host-to-device and
// back by the copy engine, as one copy and as one copy per block); then, through the backend's
// own calls on a scattered pool, demotions (started reads into the host tier's mapped slots: a
// call per block; int8 also as one batched call, batched into pageable memory through the
// staging ring, and the encode kernel alone into device memory) and restores (write_kv_blocks
// from the slots), native and int8. GB/s count the host bytes moved, "of link" is that rate over
// the same run's DMA rate in that direction, and "16K agent" scales the time to 1,024 blocks
// (16,384 tokens).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_codec_args.h"
#include "backend/kv_codec.h"

namespace akv::bench {
void fill_bf16(void* p, std::int64_t n, std::uint64_t seed, float center, float scale);

namespace {

constexpr std::int32_t kBlocks = 512;  // 1 GiB of native blocks
constexpr int kPasses = 5;             // timed, after one warm-up

// Median seconds of f() over kPasses passes after a warm-up; f queues work, this waits for it.
template <typename F>
double median_seconds(CudaBackend& be, F&& f) {
  std::vector<double> t;
  for (int pass = 0; pass <= kPasses; ++pass) {
    be.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    be.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pass > 0) t.push_back(s);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// One table row; link_gbs: the DMA rate in the copy's direction (0: the row is the link).
// Returns the row's GB/s.
double row(const std::string& what, std::size_t bytes, double seconds, double link_gbs = 0) {
  const double gbs = double(bytes) / seconds * 1e-9;
  if (link_gbs > 0)
    std::printf("| %s | %.1f GB/s | %.0f%% | %.1f ms |\n", what.c_str(), gbs, 100.0 * gbs / link_gbs,
                seconds * 1e3 * 1024.0 / kBlocks);
  else
    std::printf("| %s | %.1f GB/s | - | %.1f ms |\n", what.c_str(), gbs, seconds * 1e3 * 1024.0 / kBlocks);
  return gbs;
}

// Median seconds of the encode kernel alone: one launch over `ids` into device memory (no PCIe),
// the ceiling of a batched demote; with `dma_to` (one span per id), each block then copied there
// by the copy engine (a DMA a block, after the whole launch): the staged alternative to the
// kernel writing mapped memory itself.
double encode_kernel_seconds(CudaBackend& be, const KvStorage& kv, std::span<const std::int32_t> ids,
                             SpillCodec codec, std::span<const std::span<std::byte>> dma_to = {}) {
  const BlockShape shape = block_shape_of(kv.layout);
  const std::size_t bytes = encoded_bytes(codec, shape), n = ids.size();
  const auto n_slabs = static_cast<std::size_t>(2 * kv.layout.n_layers);
  void* out = nullptr;
  AKV_CUDA_CHECK(cudaMalloc(&out, n * bytes));
  std::vector<void*> ptrs(n_slabs + n);  // [slab bases | destinations], then the block ids
  for (std::size_t s = 0; s < n_slabs; ++s) ptrs[s] = (s % 2 == 0 ? kv.k[s / 2] : kv.v[s / 2]).data;
  for (std::size_t i = 0; i < n; ++i) ptrs[n_slabs + i] = static_cast<char*>(out) + i * bytes;
  char* table = nullptr;
  AKV_CUDA_CHECK(cudaMalloc(&table, ptrs.size() * sizeof(void*) + n * sizeof(std::int32_t)));
  AKV_CUDA_CHECK(cudaMemcpy(table, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice));
  AKV_CUDA_CHECK(cudaMemcpy(table + ptrs.size() * sizeof(void*), ids.data(), n * sizeof(std::int32_t),
                            cudaMemcpyHostToDevice));
  const cuda::KvCodecArgs args = cuda::kv_codec_args(codec, shape);
  auto* p = reinterpret_cast<void* const*>(table);
  const double seconds = median_seconds(be, [&] {
    cuda::launch_encode_kv_blocks(args, p + n_slabs,
                                  reinterpret_cast<const std::int32_t*>(table + ptrs.size() * sizeof(void*)),
                                  const_cast<const void* const*>(p), static_cast<int>(n_slabs), static_cast<int>(n),
                                  be.stream());
    for (std::size_t i = 0; i < dma_to.size(); ++i)
      AKV_CUDA_CHECK(cudaMemcpyAsync(dma_to[i].data(), static_cast<char*>(out) + i * bytes, bytes,
                                     cudaMemcpyDeviceToHost, be.stream()));
  });
  AKV_CUDA_CHECK(cudaFree(table));
  AKV_CUDA_CHECK(cudaFree(out));
  return seconds;
}

}  // namespace

int run_tier_bench() {
  CudaBackend be;
  const KvLayout layout{.n_layers = 32, .n_blocks = kBlocks, .block_size = 16, .n_kv_heads = 8, .head_dim = 128,
                        .dtype = DType::BF16};
  KvStorage kv = be.alloc_kv(layout);
  const std::int64_t per_layer = kBlocks * layout.block_size * layout.row_width();
  for (std::int64_t l = 0; l < layout.n_layers; ++l) {
    fill_bf16(kv.k[l].data, per_layer, 2 * l + 1, 0.0f, 1.0f);
    fill_bf16(kv.v[l].data, per_layer, 2 * l + 2, 0.0f, 1.0f);
  }
  const BlockShape shape = block_shape_of(layout);
  const std::size_t native = encoded_bytes(SpillCodec::Native, shape), int8 = encoded_bytes(SpillCodec::Int8, shape);
  const std::unique_ptr<HostMemory> host = be.alloc_host(kBlocks * native);
  std::byte* slots = host->bytes().data();
  std::vector<std::int32_t> dst(kBlocks);  // scattered, like a pool in use
  for (std::int32_t i = 0; i < kBlocks; ++i) dst[i] = static_cast<std::int32_t>((i * 197) % kBlocks);
  std::printf("KV block: %zu bytes native, %zu int8; %d blocks; pinned host slots (alloc_host)\n\n", native, int8,
              kBlocks);
  std::printf("| copy | host bytes/s | of link | 16K agent |\n|---|---|---|---|\n");

  // The link: the copy engine alone.
  void* device = nullptr;
  AKV_CUDA_CHECK(cudaMalloc(&device, kBlocks * native));
  const std::size_t all = kBlocks * native;
  const double h2d = row("PCIe DMA host-to-device, one copy", all, median_seconds(be, [&] {
                           AKV_CUDA_CHECK(cudaMemcpyAsync(device, slots, all, cudaMemcpyHostToDevice, be.stream()));
                         }));
  row("PCIe DMA host-to-device, a copy per block", all, median_seconds(be, [&] {
        for (std::int32_t i = 0; i < kBlocks; ++i)
          AKV_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(device) + i * native, slots + i * native, native,
                                         cudaMemcpyHostToDevice, be.stream()));
      }), h2d);
  const double d2h = row("PCIe DMA device-to-host, one copy", all, median_seconds(be, [&] {
                           AKV_CUDA_CHECK(cudaMemcpyAsync(slots, device, all, cudaMemcpyDeviceToHost, be.stream()));
                         }));
  AKV_CUDA_CHECK(cudaFree(device));

  // Demotions into the slots (the gather / encode kernels write them over PCIe), which also
  // give the restores below real encoded bytes.
  for (SpillCodec codec : {SpillCodec::Int8, SpillCodec::Native}) {
    const std::size_t bytes = encoded_bytes(codec, shape);
    const std::string name(spill_codec_name(codec));
    std::vector<std::span<std::byte>> spans;
    for (std::int32_t i = 0; i < kBlocks; ++i) spans.push_back({slots + i * bytes, bytes});
    row("demote, a call per block (start_read_kv_block_encoded into mapped slots), " + name, kBlocks * bytes,
        median_seconds(be, [&] {
          for (std::int32_t i = 0; i < kBlocks; ++i) be.start_read_kv_block_encoded(kv, dst[i], codec, spans[i]);
          be.finish_reads();
        }), d2h);
    if (!codec_is_raw(codec, layout.dtype)) {
      row("demote, one batched call (start_read_kv_blocks_encoded into mapped slots), " + name, kBlocks * bytes,
          median_seconds(be, [&] {
            be.start_read_kv_blocks_encoded(kv, dst, codec, spans);
            be.finish_reads();
          }), d2h);
      row("encode kernel alone, one launch into device memory (no PCIe), " + name, kBlocks * bytes,
          encode_kernel_seconds(be, kv, dst, codec), d2h);
      row("encode kernel into device memory, then a DMA a block into the mapped slots (not the server's path), " +
              name,
          kBlocks * bytes, encode_kernel_seconds(be, kv, dst, codec, spans), d2h);
      std::vector<std::byte> pageable(kBlocks * bytes);
      std::vector<std::span<std::byte>> staged;
      for (std::int32_t i = 0; i < kBlocks; ++i) staged.push_back({pageable.data() + i * bytes, bytes});
      row("demote, one batched call into pageable memory (staging ring: a launch per slot), " + name, kBlocks * bytes,
          median_seconds(be, [&] {
            be.start_read_kv_blocks_encoded(kv, dst, codec, staged);
            be.finish_reads();
          }), d2h);
      be.start_read_kv_blocks_encoded(kv, dst, codec, spans);  // the slots the restore reads
      be.finish_reads();
    }
    std::vector<EncodedKvBlock> blocks;
    for (std::int32_t i = 0; i < kBlocks; ++i) blocks.push_back({.block = dst[i], .codec = codec, .bytes = spans[i]});
    row("restore (write_kv_blocks from mapped slots), " + name, kBlocks * bytes,
        median_seconds(be, [&] { be.write_kv_blocks(kv, blocks); }), h2d);
  }
  return 0;
}

}  // namespace akv::bench
