// The CUDA backend's KV block copies: block to block on the device (copy_kv_block), and the tier
// copies between a device block and host bytes (read_kv_block and its deferred form,
// write_kv_block) through a ring of pinned staging slots and a copy stream of their own. Each is
// one DMA of the whole block plus one gather/scatter kernel over the block's 2 * n_layers segments
// (read_kv_block's layout).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"

namespace akv {

namespace {

constexpr std::size_t kKvRingBytes = 64u << 20;  // pinned, and as much device memory
constexpr std::size_t kKvRingMinSlots = 2;       // even when one block is larger than the budget
constexpr std::size_t kKvRingMaxSlots = 64;
constexpr std::size_t kKvAlign = 256;

std::size_t align_up(std::size_t n) {
  return (n + kKvAlign - 1) / kKvAlign * kKvAlign;
}

// One block's segments: K and V of every layer, block_size rows each.
struct Segments {
  std::size_t n = 0, bytes = 0;  // count, bytes of each
};
Segments segments_of(const KvLayout& L) {
  return {static_cast<std::size_t>(2 * L.n_layers),
          static_cast<std::size_t>(L.block_size * L.row_width()) * dtype_size(L.dtype)};
}

// Segment i = 2 * layer + side (0: K, 1: V) of `block`.
char* segment(const KvStorage& kv, std::int32_t block, std::size_t i) {
  const TensorRef& t = i % 2 == 0 ? kv.k[i / 2] : kv.v[i / 2];
  return t.row<char>(std::int64_t{block} * kv.layout.block_size);
}

// Fills a launch_copy_segments table: table[0, n) the destinations, table[n, 2n) the sources,
// `block`'s segments on one side and `staging`'s (contiguous, in order) on the other. Returns
// whether every pointer and the segment size allow 16-byte copies.
bool fill_table(const KvStorage& kv, std::int32_t block, char* staging, bool to_block,
                void** table) {
  const Segments s = segments_of(kv.layout);
  bool aligned = s.bytes % 16 == 0;
  for (std::size_t i = 0; i < s.n; ++i) {
    char* in_block = segment(kv, block, i);
    char* in_staging = staging + i * s.bytes;
    table[i] = to_block ? in_block : in_staging;
    table[s.n + i] = to_block ? in_staging : in_block;
    aligned = aligned && reinterpret_cast<std::uintptr_t>(in_block) % 16 == 0 &&
              reinterpret_cast<std::uintptr_t>(in_staging) % 16 == 0;
  }
  return aligned;
}

// A slot holds [table: 2n pointers | padding | the block's bytes].
std::size_t table_bytes(const Segments& s) {
  return align_up(2 * s.n * sizeof(void*));
}

}  // namespace

void CudaBackend::copy_kv_block(KvStorage& kv, std::int32_t src, std::int32_t dst) {
  const KvLayout& L = kv.layout;
  AKV_CHECK(src >= 0 && dst >= 0 && src < L.n_blocks && dst < L.n_blocks, "block id out of range");
  AKV_CHECK(!in_step_, "copy_kv_block inside a recorded step");
  const Segments s = segments_of(L);
  std::vector<void*> table(2 * s.n);  // [dst segments | src segments]
  bool aligned = s.bytes % 16 == 0;
  for (std::size_t i = 0; i < s.n; ++i) {
    table[i] = segment(kv, dst, i);
    table[s.n + i] = segment(kv, src, i);
    aligned = aligned && reinterpret_cast<std::uintptr_t>(table[i]) % 16 == 0 &&
              reinterpret_cast<std::uintptr_t>(table[s.n + i]) % 16 == 0;
  }
  const auto* d_table =
      static_cast<void* const*>(upload_small(table.data(), table.size() * sizeof(void*)));
  cuda::launch_copy_segments(d_table, d_table + s.n, s.bytes, static_cast<int>(s.n), aligned,
                             stream());
}

std::size_t CudaBackend::gather_kv_block(const KvStorage& kv, std::int32_t block,
                                         std::size_t& data_at) {
  const KvLayout& L = kv.layout;
  AKV_CHECK(block >= 0 && block < L.n_blocks, "block id out of range");
  AKV_CHECK(!in_step_, "read_kv_block inside a recorded step");
  const Segments s = segments_of(L);
  const auto bytes = static_cast<std::size_t>(L.block_bytes());
  data_at = table_bytes(s);
  const std::size_t i = take_kv_slot(data_at + bytes);
  char* h = kv_ring_.host + i * kv_ring_.slot_bytes;
  char* d = kv_ring_.device + i * kv_ring_.slot_bytes;
  const bool aligned =
      fill_table(kv, block, d + data_at, /*to_block=*/false, reinterpret_cast<void**>(h));
  // Compute stream: table up, gather the block into the slot (after the queued ops that write it,
  // before every later one).
  cudaStream_t compute = stream();
  AKV_CUDA_CHECK(cudaMemcpyAsync(d, h, 2 * s.n * sizeof(void*), cudaMemcpyHostToDevice, compute));
  void* const* d_table = reinterpret_cast<void* const*>(d);
  cuda::launch_copy_segments(d_table, d_table + s.n, s.bytes, static_cast<int>(s.n), aligned,
                             compute);
  AKV_CUDA_CHECK(cudaEventRecord(kv_handoff_, compute));
  // Copy stream: the slot's bytes down to its pinned half.
  AKV_CUDA_CHECK(cudaStreamWaitEvent(kv_stream_, kv_handoff_, 0));
  AKV_CUDA_CHECK(
      cudaMemcpyAsync(h + data_at, d + data_at, bytes, cudaMemcpyDeviceToHost, kv_stream_));
  AKV_CUDA_CHECK(cudaEventRecord(kv_ring_.free[i], kv_stream_));
  return i;
}

void CudaBackend::read_kv_block(const KvStorage& kv, std::int32_t block,
                                std::span<std::byte> host) {
  AKV_CHECK(static_cast<std::int64_t>(host.size()) == kv.layout.block_bytes(),
            "read_kv_block: host size");
  std::size_t data_at = 0;
  const std::size_t i = gather_kv_block(kv, block, data_at);
  AKV_CUDA_CHECK(cudaEventSynchronize(kv_ring_.free[i]));  // only this copy is waited for
  std::memcpy(host.data(), kv_ring_.host + i * kv_ring_.slot_bytes + data_at, host.size());
}

void CudaBackend::start_read_kv_block(const KvStorage& kv, std::int32_t block,
                                      std::span<std::byte> host) {
  AKV_CHECK(static_cast<std::int64_t>(host.size()) == kv.layout.block_bytes(),
            "start_read_kv_block: host size");
  std::size_t data_at = 0;
  const std::size_t i = gather_kv_block(kv, block, data_at);
  kv_ring_.held[i] = true;
  kv_reads_.push_back({.slot = i, .data_at = data_at, .host = host});
}

void CudaBackend::finish_reads() {
  AKV_CHECK(kv_reads_.empty() || !in_step_, "finish_reads inside a recorded step");
  for (const KvPendingRead& r : kv_reads_) {
    AKV_CUDA_CHECK(cudaEventSynchronize(kv_ring_.free[r.slot]));
    std::memcpy(r.host.data(), kv_ring_.host + r.slot * kv_ring_.slot_bytes + r.data_at,
                r.host.size());
    kv_ring_.held[r.slot] = false;
  }
  kv_reads_.clear();
}

void CudaBackend::write_kv_block(KvStorage& kv, std::int32_t block,
                                 std::span<const std::byte> host) {
  const KvLayout& L = kv.layout;
  AKV_CHECK(block >= 0 && block < L.n_blocks, "block id out of range");
  AKV_CHECK(static_cast<std::int64_t>(host.size()) == L.block_bytes(), "write_kv_block: host size");
  AKV_CHECK(!in_step_, "write_kv_block inside a recorded step");
  const Segments s = segments_of(L);
  const std::size_t data_at = table_bytes(s);
  const std::size_t i = take_kv_slot(data_at + host.size());
  char* h = kv_ring_.host + i * kv_ring_.slot_bytes;
  char* d = kv_ring_.device + i * kv_ring_.slot_bytes;
  const bool aligned =
      fill_table(kv, block, d + data_at, /*to_block=*/true, reinterpret_cast<void**>(h));
  std::memcpy(h + data_at, host.data(), host.size());  // `host` is free again from here
  // Copy stream: table and bytes up in one copy. Compute stream: scatter after that copy, so the
  // block changes after the queued ops that read it and before every later one.
  AKV_CUDA_CHECK(cudaMemcpyAsync(d, h, data_at + host.size(), cudaMemcpyHostToDevice, kv_stream_));
  AKV_CUDA_CHECK(cudaEventRecord(kv_handoff_, kv_stream_));
  cudaStream_t compute = stream();
  AKV_CUDA_CHECK(cudaStreamWaitEvent(compute, kv_handoff_, 0));
  void* const* d_table = reinterpret_cast<void* const*>(d);
  cuda::launch_copy_segments(d_table, d_table + s.n, s.bytes, static_cast<int>(s.n), aligned,
                             compute);
  AKV_CUDA_CHECK(cudaEventRecord(kv_ring_.free[i], compute));
}

std::size_t CudaBackend::take_kv_slot(std::size_t slot_bytes) {
  if (kv_ring_.slot_bytes < slot_bytes) {
    // Drain the ring (its slots may still be in flight or hold started reads), then size it for
    // blocks of this size.
    finish_reads();
    for (cudaEvent_t e : kv_ring_.free) AKV_CUDA_CHECK(cudaEventSynchronize(e));
    if (kv_ring_.host != nullptr) AKV_CUDA_CHECK(cudaFreeHost(kv_ring_.host));
    if (kv_ring_.device != nullptr) AKV_CUDA_CHECK(cudaFree(kv_ring_.device));
    kv_ring_.host = kv_ring_.device = nullptr;
    kv_ring_.slot_bytes = align_up(slot_bytes);
    const std::size_t n =
        std::clamp(kKvRingBytes / kv_ring_.slot_bytes, kKvRingMinSlots, kKvRingMaxSlots);
    AKV_CUDA_CHECK(cudaMallocHost(&kv_ring_.host, n * kv_ring_.slot_bytes));
    AKV_CUDA_CHECK(cudaMalloc(&kv_ring_.device, n * kv_ring_.slot_bytes));
    while (kv_ring_.free.size() > n) {
      AKV_CUDA_CHECK(cudaEventDestroy(kv_ring_.free.back()));
      kv_ring_.free.pop_back();
    }
    while (kv_ring_.free.size() < n) {
      cudaEvent_t e = nullptr;
      AKV_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      kv_ring_.free.push_back(e);
    }
    kv_ring_.held.assign(n, false);
    kv_ring_.next = 0;
  }
  // Slots are taken in turn, skipping those pending reads hold, so this is the oldest use of a
  // free one: it blocks only when all are in flight. When reads hold every slot, finish them.
  const std::size_t n = kv_ring_.free.size();
  std::size_t i = kv_ring_.next % n;
  for (std::size_t tried = 1; kv_ring_.held[i] && tried < n; ++tried) i = (i + 1) % n;
  if (kv_ring_.held[i]) finish_reads();
  kv_ring_.next = i + 1;
  AKV_CUDA_CHECK(cudaEventSynchronize(kv_ring_.free[i]));
  return i;
}

}  // namespace akv
