// The CUDA backend's KV block copies: block to block on the device (copy_kv_block), and the tier
// copies between a device block and host bytes (read_kv_block and its deferred form,
// write_kv_block, write_kv_blocks). Host memory from alloc_host is page-locked and mapped, so the
// device reads and writes it in place: a started read gathers the block straight into it,
// start_read_kv_blocks_encoded encodes every block of a call in one kernel that writes the
// encoded bytes over PCIe, and write_kv_blocks decodes every block of a call in one kernel that
// reads them. Other host memory goes through a ring of pinned staging slots and a copy stream of their
// own: one DMA of the whole block plus one gather/scatter (or decode) kernel over the block's
// 2 * n_layers segments (read_kv_block's layout).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_codec_args.h"

namespace akv {

namespace {

constexpr std::size_t kKvRingBytes = 64u << 20;  // pinned, and as much device memory
constexpr std::size_t kKvRingMinSlots = 2;       // even when one block is larger than the budget
constexpr std::size_t kKvRingMaxSlots = 64;
constexpr std::size_t kKvAlign = 256;
constexpr std::size_t kMaxBlocksPerLaunch = 32768;  // of a codec kernel (grid.y < 65536)

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

// Page-locked host memory the device can address (cudaHostAllocMapped; with unified addressing
// the device pointer equals the host pointer).
class PinnedHostMemory final : public HostMemory {
 public:
  explicit PinnedHostMemory(std::size_t bytes) : size_(bytes) {
    void* p = nullptr;
    AKV_CUDA_CHECK(cudaHostAlloc(&p, std::max<std::size_t>(bytes, 1),
                                 cudaHostAllocPortable | cudaHostAllocMapped));
    data_ = static_cast<std::byte*>(p);
  }
  ~PinnedHostMemory() override { cudaFreeHost(data_); }  // unchecked: may run at process exit
  PinnedHostMemory(const PinnedHostMemory&) = delete;
  PinnedHostMemory& operator=(const PinnedHostMemory&) = delete;
  std::span<std::byte> bytes() const override { return {data_, size_}; }

 private:
  std::size_t size_;
  std::byte* data_ = nullptr;
};

// The device address of `host` when the device can access it in place (mapped page-locked
// memory), else null (pageable memory: staged).
void* mapped_device_pointer(const void* host) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, host) != cudaSuccess) {
    (void)cudaGetLastError();  // not an error of ours: unknown memory is pageable
    return nullptr;
  }
  return attr.type == cudaMemoryTypeHost ? attr.devicePointer : nullptr;
}

// A decode table as launch_decode_kv_blocks reads it, at `at` (8-byte aligned):
// [slab bases: n_slabs pointers][sources: n pointers][destination blocks: n int32].
struct DecodeTable {
  void* const* bases;
  const void* const* src;
  const std::int32_t* ids;
};
std::size_t decode_table_bytes(std::size_t n_slabs, std::size_t n) {
  return (n_slabs + n) * sizeof(void*) + n * sizeof(std::int32_t);
}
DecodeTable decode_table_at(const void* at, std::size_t n_slabs, std::size_t n) {
  const auto* p = static_cast<const char*>(at);
  return {reinterpret_cast<void* const*>(p), reinterpret_cast<const void* const*>(p + n_slabs * sizeof(void*)),
          reinterpret_cast<const std::int32_t*>(p + (n_slabs + n) * sizeof(void*))};
}
// Fills a table at host memory `at` for blocks `ids` whose sources are `src`.
void fill_decode_table(const KvStorage& kv, std::span<const void* const> src,
                       std::span<const std::int32_t> ids, char* at);

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
  if (char* direct = static_cast<char*>(mapped_device_pointer(host.data()))) {
    // Gathered straight into the mapped host memory on the compute stream: no staging, no copy
    // at finish_reads (which waits for the last such gather).
    AKV_CHECK(block >= 0 && block < kv.layout.n_blocks, "block id out of range");
    AKV_CHECK(!in_step_, "start_read_kv_block inside a recorded step");
    const Segments s = segments_of(kv.layout);
    std::vector<void*> table(2 * s.n);
    const bool aligned = fill_table(kv, block, direct, /*to_block=*/false, table.data());
    const auto* d_table =
        static_cast<void* const*>(upload_small(table.data(), table.size() * sizeof(void*)));
    cudaStream_t compute = stream();
    cuda::launch_copy_segments(d_table, d_table + s.n, s.bytes, static_cast<int>(s.n), aligned,
                               compute);
    if (kv_direct_read_ == nullptr)
      AKV_CUDA_CHECK(cudaEventCreateWithFlags(&kv_direct_read_, cudaEventDisableTiming));
    AKV_CUDA_CHECK(cudaEventRecord(kv_direct_read_, compute));
    kv_direct_reads_pending_ = true;
    return;
  }
  std::size_t data_at = 0;
  const std::size_t i = gather_kv_block(kv, block, data_at);
  kv_ring_.held[i] = true;
  kv_reads_.push_back({.slot = i, .data_at = data_at, .host = host});
}

void CudaBackend::start_read_kv_block_encoded(const KvStorage& kv, std::int32_t block, SpillCodec codec,
                                              std::span<std::byte> host) {
  const std::span<std::byte> one[] = {host};
  start_read_kv_blocks_encoded(kv, {&block, 1}, codec, one);
}

void CudaBackend::start_read_kv_blocks_encoded(const KvStorage& kv, std::span<const std::int32_t> blocks,
                                               SpillCodec codec, std::span<const std::span<std::byte>> host) {
  const KvLayout& L = kv.layout;
  const BlockShape shape = block_shape_of(L);
  const std::size_t encoded = encoded_bytes(codec, shape);
  AKV_CHECK(blocks.size() == host.size(), "start_read_kv_blocks_encoded: one host span per block");
  AKV_CHECK(!in_step_, "start_read_kv_blocks_encoded inside a recorded step");
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    AKV_CHECK(blocks[i] >= 0 && blocks[i] < L.n_blocks, "block id out of range");
    AKV_CHECK(host[i].size() == encoded, "start_read_kv_blocks_encoded: host size");
  }
  if (codec_is_raw(codec, shape.dtype)) {
    for (std::size_t i = 0; i < blocks.size(); ++i) start_read_kv_block(kv, blocks[i], host[i]);
    return;
  }
  // Mapped destinations are encoded in place; the others through staging slots.
  std::vector<const void*> direct;
  std::vector<std::int32_t> direct_ids;
  std::vector<std::size_t> staged;  // indices into blocks
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (void* d = mapped_device_pointer(host[i].data())) {
      direct.push_back(d);
      direct_ids.push_back(blocks[i]);
    } else {
      staged.push_back(i);
    }
  }
  if (!direct.empty()) encode_kv_blocks_mapped(kv, codec, direct, direct_ids);
  for (std::size_t first = 0; first < staged.size();)
    first += encode_kv_blocks_staged(kv, codec, blocks, host, std::span(staged).subspan(first));
}

void CudaBackend::encode_kv_blocks_mapped(const KvStorage& kv, SpillCodec codec, std::span<const void* const> dst,
                                          std::span<const std::int32_t> ids) {
  const Segments seg = segments_of(kv.layout);
  const cuda::KvCodecArgs args = cuda::kv_codec_args(codec, block_shape_of(kv.layout));
  cudaStream_t compute = stream();
  for (std::size_t first = 0; first < ids.size(); first += kMaxBlocksPerLaunch) {
    const std::size_t n = std::min(kMaxBlocksPerLaunch, ids.size() - first);
    decode_table_.resize(decode_table_bytes(seg.n, n));
    fill_decode_table(kv, dst.subspan(first, n), ids.subspan(first, n), reinterpret_cast<char*>(decode_table_.data()));
    const DecodeTable t = decode_table_at(upload_small(decode_table_.data(), decode_table_.size()), seg.n, n);
    cuda::launch_encode_kv_blocks(args, const_cast<void* const*>(t.src), t.ids, t.bases, static_cast<int>(seg.n),
                                  static_cast<int>(n), compute);
  }
  if (kv_direct_read_ == nullptr) AKV_CUDA_CHECK(cudaEventCreateWithFlags(&kv_direct_read_, cudaEventDisableTiming));
  AKV_CUDA_CHECK(cudaEventRecord(kv_direct_read_, compute));
  kv_direct_reads_pending_ = true;
}

std::size_t CudaBackend::encode_kv_blocks_staged(const KvStorage& kv, SpillCodec codec,
                                                 std::span<const std::int32_t> blocks,
                                                 std::span<const std::span<std::byte>> host,
                                                 std::span<const std::size_t> which) {
  const Segments seg = segments_of(kv.layout);
  const cuda::KvCodecArgs args = cuda::kv_codec_args(codec, block_shape_of(kv.layout));
  const std::size_t encoded = host[which[0]].size();
  // As many blocks as fit the ring's slots as they are (one block sizes a fresh ring).
  auto slot_need = [&](std::size_t n) { return align_up(decode_table_bytes(seg.n, n)) + n * encoded; };
  const std::size_t room = std::max(kv_ring_.slot_bytes, slot_need(1));
  std::size_t n = std::min({which.size(), kMaxBlocksPerLaunch, room / encoded});
  while (n > 1 && slot_need(n) > room) --n;
  n = std::max<std::size_t>(n, 1);
  const std::size_t data_at = align_up(decode_table_bytes(seg.n, n));
  const std::size_t i = take_kv_slot(slot_need(n));
  char* h = kv_ring_.host + i * kv_ring_.slot_bytes;
  char* d = kv_ring_.device + i * kv_ring_.slot_bytes;
  std::vector<const void*> dst(n);
  std::vector<std::int32_t> ids(n);
  for (std::size_t j = 0; j < n; ++j) {
    dst[j] = d + data_at + j * encoded;
    ids[j] = blocks[which[j]];
  }
  fill_decode_table(kv, dst, ids, h);
  // Compute stream: table up, encode into the slot. Copy stream: the encoded bytes down to the
  // slot's pinned half; finish_reads copies each block out, like a started raw read.
  cudaStream_t compute = stream();
  AKV_CUDA_CHECK(cudaMemcpyAsync(d, h, decode_table_bytes(seg.n, n), cudaMemcpyHostToDevice, compute));
  const DecodeTable t = decode_table_at(d, seg.n, n);
  cuda::launch_encode_kv_blocks(args, const_cast<void* const*>(t.src), t.ids, t.bases, static_cast<int>(seg.n),
                                static_cast<int>(n), compute);
  AKV_CUDA_CHECK(cudaEventRecord(kv_handoff_, compute));
  AKV_CUDA_CHECK(cudaStreamWaitEvent(kv_stream_, kv_handoff_, 0));
  AKV_CUDA_CHECK(cudaMemcpyAsync(h + data_at, d + data_at, n * encoded, cudaMemcpyDeviceToHost, kv_stream_));
  AKV_CUDA_CHECK(cudaEventRecord(kv_ring_.free[i], kv_stream_));
  kv_ring_.held[i] = true;
  for (std::size_t j = 0; j < n; ++j)
    kv_reads_.push_back({.slot = i, .data_at = data_at + j * encoded, .host = host[which[j]]});
  return n;
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
  if (kv_direct_reads_pending_) {
    AKV_CUDA_CHECK(cudaEventSynchronize(kv_direct_read_));
    kv_direct_reads_pending_ = false;
  }
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

namespace {

void fill_decode_table(const KvStorage& kv, std::span<const void* const> src,
                       std::span<const std::int32_t> ids, char* at) {
  const Segments s = segments_of(kv.layout);
  const std::size_t n = ids.size();
  auto* bases = reinterpret_cast<void**>(at);
  for (std::size_t i = 0; i < s.n; ++i) bases[i] = segment(kv, 0, i);
  std::memcpy(at + s.n * sizeof(void*), src.data(), n * sizeof(void*));
  std::memcpy(at + (s.n + n) * sizeof(void*), ids.data(), n * sizeof(std::int32_t));
}

}  // namespace

std::unique_ptr<HostMemory> CudaBackend::alloc_host(std::size_t bytes) {
  AKV_CUDA_CHECK(cudaSetDevice(device_));  // callable from any thread (the host tier's allocator)
  return std::make_unique<PinnedHostMemory>(bytes);
}

std::uint64_t CudaBackend::write_kv_blocks(KvStorage& kv, std::span<const EncodedKvBlock> blocks) {
  const KvLayout& L = kv.layout;
  AKV_CHECK(!in_step_, "write_kv_blocks inside a recorded step");
  if (blocks.empty()) return 0;
  const BlockShape shape = block_shape_of(L);
  const Segments seg = segments_of(L);
  cudaStream_t compute = stream();
  // Blocks in mapped memory: one decode launch per codec, reading them in place. Others: staged
  // one by one through the ring (table and bytes up in one copy, decoded from the slot).
  std::vector<SpillCodec> codecs;
  for (const EncodedKvBlock& b : blocks)
    if (std::find(codecs.begin(), codecs.end(), b.codec) == codecs.end()) codecs.push_back(b.codec);
  std::vector<const void*> src;
  std::vector<std::int32_t> ids;
  for (SpillCodec codec : codecs) {
    const cuda::KvCodecArgs args = cuda::kv_codec_args(codec, shape);
    const std::size_t encoded = encoded_bytes(codec, shape);
    src.clear();
    ids.clear();
    for (const EncodedKvBlock& b : blocks) {
      if (b.codec != codec) continue;
      AKV_CHECK(b.block >= 0 && b.block < L.n_blocks, "block id out of range");
      AKV_CHECK(b.bytes.size() == encoded, "write_kv_blocks: encoded size");
      if (const void* direct = mapped_device_pointer(b.bytes.data())) {
        src.push_back(direct);
        ids.push_back(b.block);
        continue;
      }
      const std::size_t data_at = align_up(decode_table_bytes(seg.n, 1));
      const std::size_t i = take_kv_slot(data_at + encoded);
      char* h = kv_ring_.host + i * kv_ring_.slot_bytes;
      char* d = kv_ring_.device + i * kv_ring_.slot_bytes;
      const void* staged = d + data_at;
      fill_decode_table(kv, {&staged, 1}, {&b.block, 1}, h);
      std::memcpy(h + data_at, b.bytes.data(), encoded);  // `b.bytes` is free again from here
      AKV_CUDA_CHECK(cudaMemcpyAsync(d, h, data_at + encoded, cudaMemcpyHostToDevice, kv_stream_));
      AKV_CUDA_CHECK(cudaEventRecord(kv_handoff_, kv_stream_));
      AKV_CUDA_CHECK(cudaStreamWaitEvent(compute, kv_handoff_, 0));
      const DecodeTable t = decode_table_at(d, seg.n, 1);
      cuda::launch_decode_kv_blocks(args, t.src, t.ids, t.bases, static_cast<int>(seg.n), 1, compute);
      AKV_CUDA_CHECK(cudaEventRecord(kv_ring_.free[i], compute));
    }
    for (std::size_t first = 0; first < ids.size(); first += kMaxBlocksPerLaunch) {
      const std::size_t n = std::min(kMaxBlocksPerLaunch, ids.size() - first);
      decode_table_.resize(decode_table_bytes(seg.n, n));
      fill_decode_table(kv, std::span(src).subspan(first, n), std::span(ids).subspan(first, n),
                        reinterpret_cast<char*>(decode_table_.data()));
      const DecodeTable t = decode_table_at(upload_small(decode_table_.data(), decode_table_.size()), seg.n, n);
      cuda::launch_decode_kv_blocks(args, t.src, t.ids, t.bases, static_cast<int>(seg.n),
                                    static_cast<int>(n), compute);
    }
  }
  // The fence: once the compute stream passes here, every source above has been read.
  cudaEvent_t e = nullptr;
  if (!kv_spare_events_.empty()) {
    e = kv_spare_events_.back();
    kv_spare_events_.pop_back();
  } else {
    AKV_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  AKV_CUDA_CHECK(cudaEventRecord(e, compute));
  kv_write_events_.push_back({.fence = ++kv_write_fence_, .event = e});
  return kv_write_fence_;
}

bool CudaBackend::kv_writes_done(std::uint64_t fence) {
  while (!kv_write_events_.empty()) {
    const KvWriteEvent& w = kv_write_events_.front();
    const cudaError_t r = cudaEventQuery(w.event);
    if (r == cudaErrorNotReady) break;
    AKV_CUDA_CHECK(r);
    kv_writes_done_ = w.fence;
    kv_spare_events_.push_back(w.event);
    kv_write_events_.pop_front();
  }
  return fence <= kv_writes_done_;
}

namespace cuda {

KvCodecArgs kv_codec_args(SpillCodec codec, const BlockShape& shape) {
  const EncodedLayout e = encoded_layout(codec, shape);
  return {.bits = e.bits,
          .elem_dtype = e.elem_dtype,
          .live_dtype = shape.dtype,
          .slab_tokens = static_cast<int>(e.slab_tokens),
          .row_width = static_cast<int>(e.row_width),
          .key_bytes = e.key_bytes,
          .value_bytes = e.value_bytes,
          .key_group_tokens = static_cast<int>(e.key_group_tokens),
          .key_group_channels = static_cast<int>(e.key_group_channels),
          .value_group_tokens = static_cast<int>(e.value_group_tokens),
          .value_group_channels = static_cast<int>(e.value_group_channels)};
}

}  // namespace cuda
}  // namespace akv
