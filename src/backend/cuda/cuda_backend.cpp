#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_attention.h"
#include "backend/cuda/op_signature.h"
#include "backend/cuda/quant_dequant.h"
#include "backend/cuda/quant_gemv.h"
#include "backend/cuda/gemm_plans.h"
#include "backend/cuda/step_graph.h"
#include "tensor/safetensors.h"

namespace akv {

using cuda::Sig;
using enum cuda::OpKind;

namespace {

constexpr std::size_t kStagingBytes = 64u << 20;  // per pinned weight-upload buffer
constexpr int kStagingBuffers = 2;
constexpr int kUploadSlots = 16;
constexpr std::int64_t kProgressBytes = std::int64_t{1} << 30;
constexpr std::int32_t kMinPrefillChunk = 16;  // chunks this long use the tensor-core attention
constexpr std::size_t kCublasWorkspaceBytes = 32u << 20;  // set explicitly: graph capture allocates nothing

class CudaBuffer final : public DeviceBuffer {
 public:
  // `epoch` counts allocations and frees (recorded steps hold raw device pointers).
  CudaBuffer(DType dtype, std::int64_t rows, std::int64_t cols, cudaStream_t stream, std::uint64_t& epoch)
      : dtype_(dtype), rows_(rows), cols_(cols), epoch_(epoch) {
    ++epoch_;
    AKV_CHECK(rows >= 0 && cols >= 0, "negative buffer shape");
    const std::size_t bytes = std::max<std::size_t>(static_cast<std::size_t>(rows * cols) * dtype_size(dtype), 256);
    AKV_CUDA_CHECK(cudaMalloc(&data_, bytes));
    AKV_CUDA_CHECK(cudaMemsetAsync(data_, 0, bytes, stream));
  }
  ~CudaBuffer() override {
    ++epoch_;
    cudaFree(data_);  // waits for work still using it
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  TensorRef tensor() const override { return {data_, dtype_, rows_, cols_, cols_}; }

 private:
  void* data_ = nullptr;
  DType dtype_;
  std::int64_t rows_, cols_;
  std::uint64_t& epoch_;
};

// The query head group the CUDA-core attention gives one block (see attention.cu).
int heads_per_block(std::int64_t group) {
  return group % 8 == 0 ? 8 : group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
}

// Points b's arrays into the descriptor at `base` (the layout build_batch writes).
void place_batch(cuda::DeviceBatch& b, const std::int32_t* base) {
  if (base == nullptr) return;
  b.seq_info = base;
  b.token_seq = base + 4 * b.n_seqs;
  b.tiles = b.token_seq + b.n_tokens;
  b.tables = b.tiles + 2 * b.n_tiles;
}

}  // namespace

bool CudaBackend::device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

CudaBackend::CudaBackend(int device) : device_(device) {
  AKV_CUDA_CHECK(cudaSetDevice(device));
  AKV_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  AKV_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  AKV_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  AKV_CUDA_CHECK(cudaStreamCreateWithFlags(&kv_stream_, cudaStreamNonBlocking));
  AKV_CUDA_CHECK(cudaEventCreateWithFlags(&kv_handoff_, cudaEventDisableTiming));
  AKV_CUDA_CHECK(cudaEventCreateWithFlags(&weights_copied_, cudaEventDisableTiming));
  AKV_CUBLAS_CHECK(cublasCreate(&blas_));
  AKV_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  AKV_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));  // no TF32 for F32 weights
  AKV_CUDA_CHECK(cudaMalloc(&blas_workspace_, kCublasWorkspaceBytes));
  AKV_CUBLAS_CHECK(cublasSetWorkspace(blas_, blas_workspace_, kCublasWorkspaceBytes));
  gemm_plans_ = std::make_unique<cuda::GemmPlans>(blas_workspace_, kCublasWorkspaceBytes);
  AKV_CUDA_CHECK(cudaMalloc(&skinny_counters_, cuda::kSkinnyCounters * sizeof(unsigned)));
  AKV_CUDA_CHECK(cudaMemset(skinny_counters_, 0, cuda::kSkinnyCounters * sizeof(unsigned)));
  const char* graphs = std::getenv("AGENTKV_CUDA_GRAPHS");
  graphs_on_ = graphs == nullptr || std::strcmp(graphs, "0") != 0;
  const char* moe_decode = std::getenv("AGENTKV_CUDA_MOE_DECODE");  // side-by-side model runs
  if (moe_decode != nullptr && std::strcmp(moe_decode, "two_launch") == 0)
    moe_decode_kernels_ = MoeDecodeKernels::TwoLaunch;
  const char* moe_mxfp4 = std::getenv("AGENTKV_CUDA_MOE_MXFP4");
  if (moe_mxfp4 != nullptr && std::strcmp(moe_mxfp4, "f32") == 0)
    moe_mxfp4_decode_ = MoeMxfp4Decode::F32;
  const char* moe_staging = std::getenv("AGENTKV_CUDA_MOE_STAGING");
  if (moe_staging != nullptr && std::strcmp(moe_staging, "windows") == 0)
    moe_quant_staging_ = cuda::MoeQuantStaging::Windows;
  const char* fuse = std::getenv("AGENTKV_CUDA_FUSE");
  decode_fusion_ = fuse == nullptr || std::strcmp(fuse, "0") != 0;
  const char* delta_chunk = std::getenv("AGENTKV_CUDA_DELTA_CHUNK");
  if (delta_chunk != nullptr && std::strcmp(delta_chunk, "fma") == 0)
    delta_chunk_math_ = cuda::DeltaChunkMath::Fma;
  else if (delta_chunk != nullptr && std::strcmp(delta_chunk, "tf32") == 0)
    delta_chunk_math_ = cuda::DeltaChunkMath::Tf32;
  slots_.resize(kUploadSlots);
  for (UploadSlot& s : slots_) AKV_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
}

cuda::QuantWeight CudaBackend::quant_weight(const WeightRef& w) {
  const std::optional<GgmlType> t = find_ggml_type_of(w.dtype);
  AKV_CHECK(t.has_value() && cuda::quant_kernels_support(*t), "CUDA: unsupported quantized weight dtype");
  return {w.data, *t, w.rows, w.cols};
}

bool CudaBackend::takes_quantized_weight(DType t) const {
  const std::optional<GgmlType> g = find_ggml_type_of(t);
  return dtype_is_quantized(t) && g.has_value() && cuda::quant_kernels_support(*g);
}

std::optional<DeviceMemory> CudaBackend::device_memory() const {
  std::size_t free_bytes = 0, total_bytes = 0;
  AKV_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return DeviceMemory{.free_bytes = static_cast<std::int64_t>(free_bytes),
                      .total_bytes = static_cast<std::int64_t>(total_bytes)};
}

CudaBackend::~CudaBackend() {
  // Unchecked here and below: at process exit the runtime may already be unloading.
  cudaStreamSynchronize(stream_);
  cudaStreamSynchronize(copy_stream_);
  cudaStreamSynchronize(kv_stream_);
  graphs_.clear();
  cublasDestroy(blas_);
  cudaFree(blas_workspace_);
  cudaFree(skinny_counters_);
  for (void* p : weights_) cudaFree(p);
  for (void* p : staging_) cudaFreeHost(p);
  for (cudaEvent_t e : staging_free_) cudaEventDestroy(e);
  for (UploadSlot& s : slots_) {
    cudaFreeHost(s.host);
    cudaFree(s.device);
    cudaEventDestroy(s.copied);
  }
  for (Scratch& s : scratch_) cudaFree(s.ptr);
  cudaFree(dequant_scratch_);
  cudaFreeHost(kv_ring_.host);
  cudaFree(kv_ring_.device);
  for (cudaEvent_t e : kv_ring_.free) cudaEventDestroy(e);
  for (const KvWriteEvent& w : kv_write_events_) cudaEventDestroy(w.event);
  for (cudaEvent_t e : kv_spare_events_) cudaEventDestroy(e);
  if (kv_direct_read_ != nullptr) cudaEventDestroy(kv_direct_read_);
  cudaEventDestroy(weights_copied_);
  cudaEventDestroy(kv_handoff_);
  cudaStreamDestroy(kv_stream_);
  cudaStreamDestroy(copy_stream_);
  cudaStreamDestroy(stream_);
}

cudaStream_t CudaBackend::stream() {
  if (weights_pending_) {  // ops wait for the weight copies queued so far
    AKV_CUDA_CHECK(cudaStreamWaitEvent(stream_, weights_copied_, 0));
    weights_pending_ = false;
  }
  return stream_;
}

void CudaBackend::synchronize() { AKV_CUDA_CHECK(cudaStreamSynchronize(stream())); }

// --- memory ------------------------------------------------------------------------------------

WeightRef CudaBackend::upload_weight(const TensorInfo& t) {
  AKV_CHECK(t.shape.size() == 1 || t.shape.size() == 2, "weights are vectors or matrices");
  const std::int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
  const std::int64_t cols = t.shape.back();
  AKV_CHECK(!dtype_is_quantized(t.dtype) || takes_quantized_weight(t.dtype), "CUDA: unsupported quantized weight");
  WeightRef w = alloc_weight(t.dtype, rows, cols);
  AKV_CHECK(t.bytes.size() == static_cast<std::size_t>(rows) * dtype_row_bytes(t.dtype, cols), "weight byte size");
  note_gemm_weight(w);
  quantized_weights_ = quantized_weights_ || dtype_is_quantized(t.dtype);
  if (dtype_is_quantized(t.dtype)) {  // the prefill path's bf16 rows: allocated now, never inside a step
    const std::int64_t chunk_rows = std::min(rows, std::max<std::int64_t>(1, dequant_chunk_elems_ / cols));
    const std::size_t need = static_cast<std::size_t>(chunk_rows * cols) * 2;
    if (need > dequant_scratch_bytes_) {
      AKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
      cudaFree(dequant_scratch_);
      AKV_CUDA_CHECK(cudaMalloc(&dequant_scratch_, need));
      dequant_scratch_bytes_ = need;
    }
  }
  if (staging_.empty()) {
    for (int i = 0; i < kStagingBuffers; ++i) {
      void* p = nullptr;
      cudaEvent_t e = nullptr;
      AKV_CUDA_CHECK(cudaMallocHost(&p, kStagingBytes));
      AKV_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      staging_.push_back(p);
      staging_free_.push_back(e);
    }
  }
  // Chunks alternate between the pinned buffers: the host copy into one overlaps the DMA of the other.
  const std::size_t bytes = t.bytes.size();
  auto* dst = static_cast<std::uint8_t*>(const_cast<void*>(w.data));
  for (std::size_t off = 0; off < bytes; off += kStagingBytes) {
    const std::size_t n = std::min(kStagingBytes, bytes - off);
    const std::size_t i = staging_next_++ % staging_.size();
    AKV_CUDA_CHECK(cudaEventSynchronize(staging_free_[i]));
    std::memcpy(staging_[i], t.bytes.data() + off, n);
    AKV_CUDA_CHECK(cudaMemcpyAsync(dst + off, staging_[i], n, cudaMemcpyHostToDevice, copy_stream_));
    AKV_CUDA_CHECK(cudaEventRecord(staging_free_[i], copy_stream_));
  }
  AKV_CUDA_CHECK(cudaEventRecord(weights_copied_, copy_stream_));
  weights_pending_ = true;
  if (weight_bytes_ - progress_bytes_ >= kProgressBytes) {
    std::fprintf(stderr, "agentkv: %.1f GiB of weights copied to the GPU\n",
                 static_cast<double>(weight_bytes_) / static_cast<double>(kProgressBytes));
    progress_bytes_ = weight_bytes_;
  }
  return w;
}

WeightRef CudaBackend::alloc_weight(DType dtype, std::int64_t rows, std::int64_t cols) {
  const std::size_t bytes = static_cast<std::size_t>(rows) * dtype_row_bytes(dtype, cols);
  void* d = nullptr;
  // The quantized kernels read whole 16-byte words: up to 15 bytes past the last row.
  AKV_CUDA_CHECK(cudaMalloc(&d, std::max<std::size_t>(bytes + 16, 256)));
  weights_.push_back(d);
  weight_bytes_ += static_cast<std::int64_t>(bytes);
  return {d, dtype, rows, cols};
}

std::unique_ptr<DeviceBuffer> CudaBackend::alloc(DType dtype, std::int64_t rows, std::int64_t cols) {
  return std::make_unique<CudaBuffer>(dtype, rows, cols, stream(), alloc_epoch_);
}

KvStorage CudaBackend::alloc_kv(const KvLayout& layout) {
  AKV_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16 || layout.dtype == DType::F16,
            "CUDA KV dtype: F32, BF16 or F16");
  return alloc_kv_arrays(*this, layout);
}

void CudaBackend::download(TensorRef x, std::span<float> host) {
  AKV_CHECK(x.dtype == DType::F32, "download: F32 tensors only");
  AKV_CHECK(static_cast<std::int64_t>(host.size()) == x.rows * x.cols, "download size mismatch");
  const std::size_t row_bytes = static_cast<std::size_t>(x.cols) * sizeof(float);
  copy_out(x.data, static_cast<std::size_t>(x.stride) * sizeof(float), x.cols > 0 ? row_bytes : 0,
           static_cast<std::size_t>(x.rows), std::as_writable_bytes(host), Sig().u(kDownload).t(x).h);
}

void CudaBackend::copy_out(const void* device, std::size_t stride_bytes, std::size_t row_bytes, std::size_t rows,
                           std::span<std::byte> host, std::uint64_t signature) {
  const std::size_t bytes = row_bytes * rows;
  if (recording()) {  // the data arrives at end_step
    if (replaying(signature)) {
      AKV_CHECK(step_download_ < step_->downloads.size() && step_->downloads[step_download_].bytes == bytes,
                "recorded step: downloads differ from the recording");
    } else {
      cuda::StepGraph::Download d{nullptr, bytes};
      AKV_CUDA_CHECK(cudaMallocHost(&d.pinned, std::max<std::size_t>(bytes, 1)));
      step_->downloads.push_back(d);
      if (bytes > 0)
        AKV_CUDA_CHECK(cudaMemcpy2DAsync(d.pinned, row_bytes, device, stride_bytes, row_bytes, rows,
                                         cudaMemcpyDeviceToHost, stream_));
    }
    ++step_download_;
    step_out_.push_back(host);
    return;
  }
  if (bytes > 0)
    AKV_CUDA_CHECK(cudaMemcpy2DAsync(host.data(), row_bytes, device, stride_bytes, row_bytes, rows,
                                     cudaMemcpyDeviceToHost, stream()));
  synchronize();
}

void CudaBackend::upload(std::span<const float> host, TensorRef x) {
  ++op_seq_;  // see norm_codes_
  AKV_CHECK(x.dtype == DType::F32, "upload: F32 tensors only");
  AKV_CHECK(static_cast<std::int64_t>(host.size()) == x.rows * x.cols, "upload size mismatch");
  AKV_CHECK(!in_step_, "upload inside a recorded step");
  if (x.rows == 0 || x.cols == 0) return;
  AKV_CUDA_CHECK(cudaMemcpy2DAsync(x.data, x.stride * sizeof(float), host.data(), x.cols * sizeof(float),
                                   x.cols * sizeof(float), x.rows, cudaMemcpyHostToDevice, stream()));
  synchronize();  // the caller may free `host` on return
}

const void* CudaBackend::upload_small(const void* data, std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (recording()) return step_upload(data, bytes);
  ++use_counter_;
  UploadSlot* victim = &slots_[0];
  for (UploadSlot& s : slots_) {
    if (s.size == bytes && std::memcmp(s.host, data, bytes) == 0) {
      s.last_use = use_counter_;
      return s.device;
    }
    if (s.last_use < victim->last_use) victim = &s;
  }
  UploadSlot& s = *victim;
  AKV_CUDA_CHECK(cudaEventSynchronize(s.copied));  // its pinned bytes may still be in flight
  if (s.capacity < bytes) {
    AKV_CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued kernels may still read the old device copy
    cudaFreeHost(s.host);
    cudaFree(s.device);
    s.capacity = std::max<std::size_t>(4096, std::bit_ceil(bytes));
    AKV_CUDA_CHECK(cudaMallocHost(&s.host, s.capacity));
    AKV_CUDA_CHECK(cudaMalloc(&s.device, s.capacity));
  }
  std::memcpy(s.host, data, bytes);
  AKV_CUDA_CHECK(cudaMemcpyAsync(s.device, s.host, bytes, cudaMemcpyHostToDevice, stream()));
  AKV_CUDA_CHECK(cudaEventRecord(s.copied, stream_));
  s.size = bytes;
  s.last_use = use_counter_;
  return s.device;
}

cuda::DeviceBatch CudaBackend::build_batch(const ForwardBatch& batch, const std::int32_t* base) {
  // seq_info [n_seqs][4], token_seq [n_tokens], tiles [n_tiles][2], tables: see cuda::DeviceBatch.
  const auto n_seqs = static_cast<std::int32_t>(batch.sequences.size());
  const auto n_tokens = static_cast<std::int32_t>(batch.positions.size());
  std::int32_t n_tiles = 0, n_table = 0, max_chunk = 0, covered = 0;
  for (const SequenceChunk& s : batch.sequences) {
    AKV_CHECK(s.first_row >= 0 && s.n_tokens >= 0 && s.first_row + s.n_tokens <= n_tokens, "chunk rows");
    n_tiles += (s.n_tokens + cuda::kPrefillTileRows - 1) / cuda::kPrefillTileRows;
    n_table += static_cast<std::int32_t>(s.block_table.size());
    max_chunk = std::max(max_chunk, s.n_tokens);
    covered += s.n_tokens;
  }
  AKV_CHECK(covered == n_tokens, "the chunks must cover every token row once");
  std::vector<std::int32_t>& h = batch_host_;
  h.assign(static_cast<std::size_t>(4 * n_seqs + n_tokens + 2 * n_tiles + n_table), 0);
  std::int32_t* info = h.data();
  std::int32_t* token_seq = info + 4 * n_seqs;
  std::int32_t* tiles = token_seq + n_tokens;
  std::int32_t* tables = tiles + 2 * n_tiles;
  std::int32_t table_off = 0, tile = 0;
  for (std::int32_t i = 0; i < n_seqs; ++i) {
    const SequenceChunk& s = batch.sequences[i];
    info[4 * i + 0] = s.first_row;
    info[4 * i + 1] = s.n_tokens;
    info[4 * i + 2] = s.start_pos;
    info[4 * i + 3] = table_off;
    for (std::int32_t t = 0; t < s.n_tokens; ++t) token_seq[s.first_row + t] = i;
    for (std::int32_t q0 = 0; q0 < s.n_tokens; q0 += cuda::kPrefillTileRows, ++tile) {
      tiles[2 * tile] = i;
      tiles[2 * tile + 1] = q0;
    }
    std::copy(s.block_table.begin(), s.block_table.end(), tables + table_off);
    table_off += static_cast<std::int32_t>(s.block_table.size());
  }
  cuda::DeviceBatch b;
  b.n_seqs = n_seqs;
  b.n_tokens = n_tokens;
  b.n_tiles = n_tiles;
  b.max_chunk = max_chunk;
  place_batch(b, base);
  return b;
}

cuda::DeviceBatch CudaBackend::upload_batch(const ForwardBatch& batch) {
  if (step_mode_ != StepMode::Eager) {  // built once at begin_step
    AKV_CHECK(batch.sequences.data() == step_seqs_, "recorded step: an op on another batch");
    return step_batch_;
  }
  cuda::DeviceBatch b = build_batch(batch, nullptr);
  place_batch(b, static_cast<const std::int32_t*>(
                     upload_small(batch_host_.data(), batch_host_.size() * sizeof(std::int32_t))));
  return b;
}

void* CudaBackend::scratch(std::size_t bytes, int which) {
  AKV_CHECK(step_mode_ != StepMode::Replay, "scratch while replaying");
  if (step_mode_ == StepMode::Capture) {  // the graph's own; outgrown buffers stay (captured ops use them)
    cuda::StepGraph::Scratch& g = step_->scratch[which];
    if (g.capacity < bytes) {
      if (g.ptr != nullptr) step_->retired.push_back(g.ptr);
      g.capacity = bytes;
      AKV_CUDA_CHECK(cudaMalloc(&g.ptr, g.capacity));
    }
    return g.ptr;
  }
  static_assert(std::extent_v<decltype(scratch_)> == std::extent_v<decltype(cuda::StepGraph::scratch)>,
                "a recorded step has a scratch buffer of each kind");
  AKV_CHECK(which >= 0 && which < static_cast<int>(std::extent_v<decltype(scratch_)>), "scratch kind");
  Scratch& s = scratch_[which];
  if (s.capacity < bytes) {
    AKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaFree(s.ptr);
    s.capacity = bytes + bytes / 4;
    AKV_CUDA_CHECK(cudaMalloc(&s.ptr, s.capacity));
  }
  return s.ptr;
}

// --- ops ---------------------------------------------------------------------------------------

void CudaBackend::embed(const WeightRef& table, std::span<const std::int32_t> ids, float scale, TensorRef out) {
  ++op_seq_;  // see norm_codes_
  AKV_CHECK(out.rows == static_cast<std::int64_t>(ids.size()) && out.cols == table.cols, "embed shape");
  const auto* d_ids = static_cast<const std::int32_t*>(upload_small(ids.data(), ids.size_bytes()));
  if (recording() && replaying(Sig().u(kEmbed).w(table).p(d_ids).f(scale).t(out).h)) return;
  if (dtype_is_quantized(table.dtype)) {
    AKV_CHECK(out.dtype == DType::F32, "embed: f32 output");
    cuda::launch_embed_quantized(quant_weight(table), d_ids, out.rows, scale, static_cast<float*>(out.data),
                                 out.stride, stream());
    return;
  }
  cuda::launch_embed(table, d_ids, scale, out, stream());
}

void CudaBackend::rms_norm(TensorRef x, const WeightRef& w, float eps, float weight_offset, TensorRef out) {
  ++op_seq_;  // see norm_codes_
  if (recording() && replaying(Sig().u(kRmsNorm).t(x).w(w).f(eps).f(weight_offset).t(out).h)) return;
  norm_with_codes(x, nullptr, w, eps, weight_offset, out);
}

void CudaBackend::norm_with_codes(TensorRef x, const TensorRef* res, const WeightRef& w, float eps,
                                  float weight_offset, TensorRef out) {
  const bool codes = decode_fusion_ && quantized_weights_ && x.rows >= 1 &&
                     x.rows <= quant_rows_.gemv && cuda::rms_norm_quantize_fits(x, w, out, res);
  if (!codes) {
    if (res != nullptr)
      cuda::launch_add_rms_norm(x, *res, w, eps, weight_offset, out, stream());
    else
      cuda::launch_rms_norm(x, w, eps, weight_offset, out, stream());
    return;
  }
  const cuda::QuantActivations a = cuda::quant_activations_in(
      scratch(cuda::quant_activation_bytes(out.rows, out.cols), 7), out.rows, out.cols);
  cuda::launch_rms_norm_quantize(x, res, w, eps, weight_offset, out, a, stream());
  norm_codes_ = {out.data, out.rows, out.cols, out.stride, op_seq_, a};
}

const cuda::QuantActivations* CudaBackend::norm_codes_for(TensorRef x) const {
  const NormCodes& c = norm_codes_;
  const bool same = c.seq == op_seq_ && c.data == x.data && c.rows == x.rows && c.cols == x.cols &&
                    c.stride == x.stride && x.dtype == DType::F32;
  return same ? &c.a : nullptr;
}

void CudaBackend::add(TensorRef acc, TensorRef x) {
  ++op_seq_;  // see norm_codes_
  AKV_CHECK(acc.rows == x.rows && acc.cols == x.cols, "add shape");
  if (recording() && replaying(Sig().u(kAdd).t(acc).t(x).h)) return;
  cuda::launch_add(acc, x, stream());
}

void CudaBackend::add_rms_norm(TensorRef acc, TensorRef x, const WeightRef& w, float eps, float weight_offset,
                               TensorRef out) {
  AKV_CHECK(acc.rows == x.rows && acc.cols == x.cols, "add shape");
  ++op_seq_;  // see norm_codes_
  if (recording() && replaying(Sig().u(kAddRmsNorm).t(acc).t(x).w(w).f(eps).f(weight_offset).t(out).h)) return;
  norm_with_codes(acc, &x, w, eps, weight_offset, out);
}

void CudaBackend::rope(TensorRef x, std::int64_t head_dim, const RopeParams& rope,
                       std::span<const std::int32_t> positions) {
  ++op_seq_;  // see norm_codes_
  AKV_CHECK(static_cast<std::int64_t>(positions.size()) == x.rows, "rope positions");
  AKV_CHECK(static_cast<std::int64_t>(rope.inv_freq.size()) >= rope.rotary_dim / 2, "rope table");
  const auto* d_pos = static_cast<const std::int32_t*>(upload_small(positions.data(), positions.size_bytes()));
  const auto* d_freq = static_cast<const double*>(upload_small(rope.inv_freq.data(), rope.inv_freq.size_bytes()));
  if (recording() &&
      replaying(Sig().u(kRope).t(x).u(static_cast<std::uint64_t>(head_dim)).p(d_pos).p(d_freq)
                    .u(static_cast<std::uint64_t>(rope.rotary_dim)).f(rope.attention_scaling).h))
    return;
  cuda::launch_rope(x, head_dim, d_freq, rope.rotary_dim, rope.attention_scaling, d_pos, stream());
}

namespace {
void check_tables(const KvLayout& L, const ForwardBatch& batch) {
  for (const SequenceChunk& s : batch.sequences)
    AKV_CHECK(std::int64_t{s.start_pos} + s.n_tokens <= static_cast<std::int64_t>(s.block_table.size()) * L.block_size,
              "positions beyond block table");
}
}  // namespace

void CudaBackend::set_decode_fusion(bool on) {
  AKV_CHECK(!in_step_, "set_decode_fusion inside a recorded step");
  if (on != decode_fusion_) drop_graphs(false);
  decode_fusion_ = on;
}

void CudaBackend::rope_store_kv(TensorRef qk, TensorRef v, std::int64_t head_dim,
                                const RopeParams& rope, KvStorage& kv, std::int64_t layer,
                                const ForwardBatch& batch) {
  ++op_seq_;              // see norm_codes_
  if (!decode_fusion_) {  // the two ops, each recorded on its own
    Backend::rope_store_kv(qk, v, head_dim, rope, kv, layer, batch);
    return;
  }
  const KvLayout& L = kv.layout;
  AKV_CHECK(static_cast<std::int64_t>(batch.positions.size()) == qk.rows, "rope positions");
  AKV_CHECK(static_cast<std::int64_t>(rope.inv_freq.size()) >= rope.rotary_dim / 2, "rope table");
  AKV_CHECK(v.cols == L.row_width() && L.head_dim == head_dim, "rope_store_kv width");
  check_tables(L, batch);
  const auto* d_pos = static_cast<const std::int32_t*>(
      upload_small(batch.positions.data(), batch.positions.size_bytes()));
  const auto* d_freq =
      static_cast<const double*>(upload_small(rope.inv_freq.data(), rope.inv_freq.size_bytes()));
  const cuda::DeviceBatch b = upload_batch(batch);
  if (recording() && replaying(Sig()
                                   .u(kRopeStoreKv)
                                   .t(qk)
                                   .t(v)
                                   .u(static_cast<std::uint64_t>(head_dim))
                                   .p(d_pos)
                                   .p(d_freq)
                                   .u(static_cast<std::uint64_t>(rope.rotary_dim))
                                   .f(rope.attention_scaling)
                                   .p(kv.k[layer].data)
                                   .p(kv.v[layer].data)
                                   .h))
    return;
  cuda::launch_rope_store_kv(qk, v, head_dim, d_freq, rope.rotary_dim, rope.attention_scaling,
                             d_pos, kv.k[layer].data, kv.v[layer].data, L.dtype, L.row_width(),
                             static_cast<std::int32_t>(L.block_size), b, stream());
}

void CudaBackend::store_kv(KvStorage& kv, std::int64_t layer, TensorRef k, TensorRef v, const ForwardBatch& batch) {
  ++op_seq_;  // see norm_codes_
  const KvLayout& L = kv.layout;
  AKV_CHECK(k.cols == L.row_width() && v.cols == L.row_width(), "store_kv width");
  check_tables(L, batch);
  const cuda::DeviceBatch b = upload_batch(batch);
  if (recording() && replaying(Sig().u(kStoreKv).p(kv.k[layer].data).p(kv.v[layer].data).t(k).t(v).h)) return;
  cuda::launch_store_kv(kv.k[layer].data, kv.v[layer].data, L.dtype, L.row_width(),
                        static_cast<std::int32_t>(L.block_size), k, v, b, stream());
}

void CudaBackend::attention(TensorRef q, const KvStorage& kv, std::int64_t layer, const ForwardBatch& batch,
                            const AttentionParams& p, TensorRef out) {
  ++op_seq_;  // see norm_codes_
  const KvLayout& L = kv.layout;
  AKV_CHECK(p.n_kv_heads == L.n_kv_heads && p.head_dim == L.head_dim && p.n_heads % p.n_kv_heads == 0,
            "attention heads");
  AKV_CHECK(q.cols == p.n_heads * p.head_dim && out.cols == q.cols && out.rows == q.rows, "attention shape");
  check_tables(L, batch);
  cuda::DeviceBatch b = upload_batch(batch);
  for (const SequenceChunk& s : batch.sequences) {  // the last token of a chunk sees the most keys
    if (s.n_tokens == 0) continue;
    const std::int64_t pos = std::int64_t{s.start_pos} + s.n_tokens - 1;
    const std::int64_t keys = p.window > 0 ? std::min<std::int64_t>(p.window, pos + 1) : pos + 1;
    b.max_keys = std::max(b.max_keys, static_cast<std::int32_t>(keys));
  }
  const cuda::KvView view{kv.k[layer].data, kv.v[layer].data, L.dtype, L.row_width(),
                          static_cast<std::int32_t>(L.block_size)};
  const cuda::AttentionArgs a{static_cast<std::int32_t>(p.n_heads), static_cast<std::int32_t>(p.n_kv_heads),
                              static_cast<std::int32_t>(p.head_dim), static_cast<float>(p.scale),
                              static_cast<std::int32_t>(p.window), static_cast<float>(p.logit_softcap),
                              static_cast<const float*>(p.sinks.data)};
  AKV_CHECK(p.sinks.empty() || (p.sinks.dtype == DType::F32 && p.sinks.cols == p.n_heads), "attention: F32 sinks");
  if (recording() && replaying(Sig().u(kAttention).t(q).p(kv.k[layer].data).p(kv.v[layer].data)
                                   .u(static_cast<std::uint64_t>(p.n_heads)).u(static_cast<std::uint64_t>(p.head_dim))
                                   .f(p.scale).u(static_cast<std::uint64_t>(p.window)).f(p.logit_softcap).p(a.sinks).t(out).h))
    return;
  auto partial_for = [&](int n_splits) -> float* {
    if (n_splits == 1) return nullptr;
    return static_cast<float*>(scratch(
        static_cast<std::size_t>(std::int64_t{b.n_tokens} * p.n_heads * n_splits * (p.head_dim + 2)) * sizeof(float),
        1));
  };
  const bool q_aligned = reinterpret_cast<std::uintptr_t>(q.data) % 16 == 0 && q.stride % 4 == 0;
  // Sinks: each kernel's final normalisation (one split) or the merge (several) adds them.
  if (b.max_chunk >= kMinPrefillChunk && q_aligned &&
      cuda::prefill_attention_supported(L.dtype, a.head_dim) && (a.head_dim != 256 || prefill_attention_d256_)) {
    // Tiles x head groups that leave SMs idle (a short chunk over a long context) split their keys.
    const int n_splits = chunk_attention_ ? cuda::prefill_attention_splits(b, a, sm_count_) : 1;
    cuda::launch_attention_prefill(q, view, b, a, n_splits, partial_for(n_splits), out, stream());
    return;
  }
  // Several tokens of a chunk per block where the tensor-core kernel can take them (each K/V
  // tile read once per group); decode-only batches (the recorded steps) keep one token a block.
  const int group_tokens =
      chunk_attention_ && b.max_chunk > 1 ? cuda::attention_split_group_tokens(q, view, a) : 1;
  // Enough blocks to fill the GPU four times, each split keeping at least kMinSplitKeys keys. A
  // recorded step sizes the grid for its key bound; each token uses as many splits as eagerly.
  const std::int64_t blocks =
      cuda::split_token_groups(b, group_tokens) * (p.n_heads / heads_per_block(p.n_heads / p.n_kv_heads));
  const std::int64_t want = (4 * sm_count_ + blocks - 1) / std::max<std::int64_t>(blocks, 1);
  const std::int32_t keys = step_mode_ == StepMode::Capture ? step_keys_bound_ : b.max_keys;
  const int n_splits = static_cast<int>(std::clamp<std::int64_t>(want, 1, std::max(1, keys / cuda::kMinSplitKeys)));
  cuda::launch_attention_split(q, view, b, a, n_splits, group_tokens, partial_for(n_splits), out, stream());
}

void CudaBackend::set_chunk_attention(bool on) { chunk_attention_ = on; }

void CudaBackend::glu(TensorRef gate, TensorRef up, GluActivation act, TensorRef out) {
  ++op_seq_;  // see norm_codes_
  AKV_CHECK(gate.rows == up.rows && gate.cols == up.cols && out.cols == gate.cols && out.rows == gate.rows,
            "glu shape");
  if (recording() && replaying(Sig().u(kGlu).t(gate).t(up).u(act == GluActivation::GeluTanh).t(out).h)) return;
  cuda::launch_glu(gate, up, act == GluActivation::GeluTanh, out, stream());
}

void CudaBackend::softcap(TensorRef x, float cap) {
  ++op_seq_;  // see norm_codes_
  if (recording() && replaying(Sig().u(kSoftcap).t(x).f(cap).h)) return;
  cuda::launch_softcap(x, cap, stream());
}

void CudaBackend::sigmoid_mul(TensorRef x, TensorRef gate) {
  ++op_seq_;  // see norm_codes_
  AKV_CHECK(x.rows == gate.rows && (x.cols == gate.cols || gate.cols == 1), "sigmoid_mul shape");
  if (recording() && replaying(Sig().u(kSigmoidMul).t(x).t(gate).h)) return;
  cuda::launch_sigmoid_mul(x, gate, stream());
}

const std::int32_t* CudaBackend::upload_state_seqs(const KvStorage& kv, const ForwardBatch& batch,
                                                   std::int32_t min_tokens, std::int32_t below_tokens, int* n_seqs) {
  state_seqs_host_.clear();
  for (const SequenceChunk& s : batch.sequences) {
    AKV_CHECK(s.state_slot >= 0 && s.state_slot < kv.state.n_slots, "state slot out of range");
    if (s.n_tokens >= min_tokens && s.n_tokens < below_tokens)
      state_seqs_host_.insert(state_seqs_host_.end(), {s.first_row, s.n_tokens, s.start_pos, s.state_slot});
  }
  if (n_seqs != nullptr) *n_seqs = static_cast<int>(state_seqs_host_.size() / 4);
  return static_cast<const std::int32_t*>(
      upload_small(state_seqs_host_.data(), state_seqs_host_.size() * sizeof(std::int32_t)));
}

void CudaBackend::causal_conv1d(TensorRef x, const WeightRef& w, KvStorage& kv, std::int64_t layer,
                                const ForwardBatch& batch) {
  ++op_seq_;  // see norm_codes_
  const StateLayout& st = kv.state;
  AKV_CHECK(layer >= 0 && layer < st.n_layers && x.cols == st.conv_channels && w.rows == st.conv_channels &&
                w.cols == st.conv_rows + 1,
            "causal_conv1d shape");
  const int rows = static_cast<int>(st.conv_rows);
  std::int32_t below = INT32_MAX;  // chunks of fewer tokens go token by token
  if (!recording()) {
    below = conv1d_tile_min_tokens_;
    std::int32_t max_tokens = 0;
    std::int64_t n_tiles = 0;
    for (const SequenceChunk& s : batch.sequences)
      if (s.n_tokens >= below) {
        max_tokens = std::max(max_tokens, s.n_tokens);
        n_tiles += (s.n_tokens + cuda::kConvTileTokens - 1) / cuda::kConvTileTokens;
      }
    int n_long = 0;
    const std::int32_t* long_seqs = upload_state_seqs(kv, batch, below, INT32_MAX, &n_long);
    if (n_long > 0) {
      const std::size_t bytes = cuda::causal_conv1d_halo_bytes(n_tiles, rows, x.cols);
      cuda::launch_causal_conv1d_tiled(x, w, kv.conv_state[layer], rows, long_seqs, n_long, max_tokens,
                                       static_cast<float*>(scratch(std::max<std::size_t>(bytes, 4), 1)), stream());
    }
  }
  int n_seqs = 0;
  const std::int32_t* seqs = upload_state_seqs(kv, batch, 0, below, &n_seqs);
  if (!recording() && n_seqs == 0) return;
  if (recording() && replaying(Sig().u(kConv1d).t(x).w(w).t(kv.conv_state[layer]).p(seqs).u(n_seqs).h)) return;
  cuda::launch_causal_conv1d(x, w, kv.conv_state[layer], rows, seqs, n_seqs, stream());
}

void CudaBackend::gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log,
                                   const WeightRef& dt_bias, KvStorage& kv, std::int64_t layer,
                                   const ForwardBatch& batch, TensorRef out) {
  ++op_seq_;  // see norm_codes_
  const StateLayout& st = kv.state;
  AKV_CHECK(layer >= 0 && layer < st.n_layers &&
                qkv.cols == 2 * st.n_k_heads * st.k_head_dim + st.n_v_heads * st.v_head_dim &&
                a.cols == st.n_v_heads && b.cols == st.n_v_heads && out.cols == st.n_v_heads * st.v_head_dim &&
                out.rows == qkv.rows,
            "gated_delta_rule shape");
  const int k_dim = static_cast<int>(st.k_head_dim), v_dim = static_cast<int>(st.v_head_dim);
  std::int32_t below = INT32_MAX;  // chunks of fewer tokens go token by token
  if (!recording() && cuda::delta_rule_chunked_fits(k_dim, v_dim)) {
    below = delta_rule_chunk_min_tokens_;
    std::int32_t max_tokens = 0;
    for (const SequenceChunk& s : batch.sequences) max_tokens = std::max(max_tokens, s.n_tokens);
    int n_long = 0;
    const std::int32_t* long_seqs = upload_state_seqs(kv, batch, below, INT32_MAX, &n_long);
    if (n_long > 0) {
      const std::size_t bytes =
          cuda::delta_rule_chunked_scratch_bytes(n_long, max_tokens, static_cast<int>(st.n_v_heads));
      cuda::launch_gated_delta_rule_chunked(qkv, a, b, a_log, dt_bias, kv.recurrent_state[layer], long_seqs, n_long,
                                            max_tokens, static_cast<int>(st.n_k_heads),
                                            static_cast<int>(st.n_v_heads), k_dim, v_dim, out, scratch(bytes, 1),
                                            bytes, delta_chunk_math_, stream());
    }
  }
  int n_seqs = 0;
  const std::int32_t* seqs = upload_state_seqs(kv, batch, 0, below, &n_seqs);
  if (!recording() && n_seqs == 0) return;
  if (recording() && replaying(Sig().u(kDeltaRule).t(qkv).t(a).t(b).w(a_log).w(dt_bias).t(kv.recurrent_state[layer])
                                   .p(seqs).u(n_seqs).t(out).h))
    return;
  cuda::launch_gated_delta_rule(qkv, a, b, a_log, dt_bias, kv.recurrent_state[layer], seqs, n_seqs,
                                static_cast<int>(st.n_k_heads), static_cast<int>(st.n_v_heads),
                                k_dim, v_dim, out, stream());
}

void CudaBackend::gather_rows(TensorRef x, std::span<const std::int32_t> rows, TensorRef out) {
  ++op_seq_;  // see norm_codes_
  AKV_CHECK(out.rows == static_cast<std::int64_t>(rows.size()) && out.cols == x.cols, "gather shape");
  for (std::int32_t r : rows) AKV_CHECK(r >= 0 && r < x.rows, "gather row out of range");
  const auto* d_rows = static_cast<const std::int32_t*>(upload_small(rows.data(), rows.size_bytes()));
  if (recording() && replaying(Sig().u(kGather).t(x).p(d_rows).t(out).h)) return;
  cuda::launch_gather_rows(x, d_rows, out, stream());
}

void CudaBackend::sample_rows(TensorRef logits, std::span<const float> temperature, std::span<const double> u,
                              std::span<std::int32_t> out) {
  ++op_seq_;  // see norm_codes_
  AKV_CHECK(logits.dtype == DType::F32, "sample_rows: F32 logits");
  const auto n = static_cast<std::size_t>(logits.rows);
  AKV_CHECK(out.size() == n && temperature.size() == n && u.size() == n, "sample_rows: one value per row");
  const auto* d_temperature = static_cast<const float*>(upload_small(temperature.data(), temperature.size_bytes()));
  const auto* d_u = static_cast<const double*>(upload_small(u.data(), u.size_bytes()));
  std::int32_t* ids = nullptr;  // a replayed step's graph holds the kernel, its scratch and the copy
  if (!(recording() && replaying(Sig().u(kSample).t(logits).p(d_temperature).p(d_u).h))) {
    ids = static_cast<std::int32_t*>(scratch(std::max<std::size_t>(out.size_bytes(), 4), 3));
    cuda::launch_sample_rows(logits, d_temperature, d_u, ids, stream());
  }
  copy_out(ids, out.size_bytes(), out.size_bytes(), 1, std::as_writable_bytes(out),
           Sig().u(kDownload).u(kSample).t(logits).h);
}

}  // namespace akv
