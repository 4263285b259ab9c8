// Recorded decode steps of the CUDA backend (Backend::begin_step): the first step of a key runs
// its ops under stream capture into a CUDA graph; later steps of the key walk the same ops on the
// host only, each op checking its signature against the recording and each host array landing in
// its slot of the graph's pinned arena; end_step copies the arena to the device in one transfer,
// launches the graph and hands out the downloads. Steps that are not decode-only run eagerly.
#include <algorithm>
#include <bit>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/step_graph.h"

namespace akv {

namespace {
constexpr std::size_t kUploadBytes =
    64u << 10;  // a step's small host arrays (ids, positions, RoPE tables)
constexpr std::size_t kMinDescBytes = 16u << 10;
constexpr std::size_t kMaxGraphs = 64;
}  // namespace

namespace cuda {

StepGraph::StepGraph(const StepKey& k, std::size_t desc_bytes, std::size_t upload_bytes)
    : key(k), desc_capacity(desc_bytes), capacity(desc_bytes + upload_bytes), used(desc_bytes) {
  AKV_CUDA_CHECK(cudaMallocHost(&host, capacity));
  AKV_CUDA_CHECK(cudaMalloc(&device, capacity));
}

StepGraph::~StepGraph() {
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  cudaFreeHost(host);
  cudaFree(device);
  for (const Download& d : downloads) cudaFreeHost(d.pinned);
  for (const Scratch& s : scratch) cudaFree(s.ptr);
  for (void* p : retired) cudaFree(p);
}

}  // namespace cuda

void CudaBackend::set_step_graphs(bool on) {
  AKV_CHECK(!in_step_, "set_step_graphs inside a step");
  graphs_on_ = on;
}

void CudaBackend::drop_graphs(bool stale_only) {
  auto drop = [&](const std::unique_ptr<cuda::StepGraph>& g) {
    return !stale_only || g->key.alloc_epoch != alloc_epoch_;
  };
  if (std::none_of(graphs_.begin(), graphs_.end(), drop)) return;
  AKV_CUDA_CHECK(cudaStreamSynchronize(stream_));  // a launch may still read an arena
  std::erase_if(graphs_, drop);
}

void CudaBackend::begin_step(const ForwardBatch& batch, const KvStorage& kv, const void* caller) {
  AKV_CHECK(!in_step_, "begin_step inside a step");
  in_step_ = true;
  ++op_seq_;  // a norm's codes never cross a step boundary (norm_codes_)
  ++step_count_;
  step_op_ = step_upload_ = step_download_ = 0;
  step_out_.clear();
  step_mode_ = StepMode::Eager;
  const auto n_tokens = static_cast<std::int32_t>(batch.tokens.size());
  const auto n_seqs = static_cast<std::int32_t>(batch.sequences.size());
  bool decode = graphs_on_ && n_tokens > 0 && n_tokens <= kMaxGraphTokens && n_seqs == n_tokens &&
                !kv.k.empty();
  std::int32_t most_keys = 1;
  for (const SequenceChunk& s : batch.sequences) {
    decode = decode && s.n_tokens == 1;
    most_keys = std::max(most_keys, s.start_pos + s.n_tokens);
  }
  if (!decode) return;

  // The descriptor, then the recording for this key (re-recorded when the descriptor outgrew it).
  cuda::StepKey key{
      .caller = caller,
      .kv = kv.k[0].data,
      .n_tokens = n_tokens,
      .n_seqs = n_seqs,
      .n_logits = static_cast<std::int32_t>(batch.logit_rows.size()),
      .keys_bound = static_cast<std::int32_t>(std::bit_ceil(static_cast<std::uint32_t>(most_keys))),
      .alloc_epoch = alloc_epoch_};
  cuda::DeviceBatch b = build_batch(batch, nullptr);
  const std::size_t desc_bytes = batch_host_.size() * sizeof(std::int32_t);
  drop_graphs(true);
  auto it =
      std::find_if(graphs_.begin(), graphs_.end(), [&](const auto& g) { return g->key == key; });
  if (it != graphs_.end() && (*it)->desc_capacity < desc_bytes) {
    AKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
    graphs_.erase(it);
    it = graphs_.end();
  }
  if (it == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphs) {  // the least recently used goes
      AKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
      graphs_.erase(
          std::min_element(graphs_.begin(), graphs_.end(),
                           [](const auto& x, const auto& y) { return x->last_use < y->last_use; }));
    }
    const std::size_t desc_capacity = std::bit_ceil(std::max(kMinDescBytes, 2 * desc_bytes));
    graphs_.push_back(std::make_unique<cuda::StepGraph>(key, desc_capacity, kUploadBytes));
    step_ = graphs_.back().get();
    step_mode_ = StepMode::Capture;
  } else {
    step_ = it->get();
    step_mode_ = StepMode::Replay;
  }
  step_->last_use = step_count_;
  std::memcpy(step_->host, batch_host_.data(), desc_bytes);
  b.seq_info = reinterpret_cast<const std::int32_t*>(step_->device);
  b.token_seq = b.seq_info + 4 * b.n_seqs;
  b.tiles = b.token_seq + b.n_tokens;
  b.tables = b.tiles + 2 * b.n_tiles;
  step_batch_ = b;
  step_seqs_ = batch.sequences.data();
  step_keys_bound_ = key.keys_bound;
  if (step_mode_ == StepMode::Capture) {
    stream();  // queues the wait for weight copies outside the capture
    AKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
    AKV_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  }
}

bool CudaBackend::replaying(std::uint64_t signature) {
  if (step_mode_ == StepMode::Capture) {
    step_->ops.push_back(signature);
    ++step_op_;
    return false;
  }
  AKV_CHECK(step_op_ < step_->ops.size() && step_->ops[step_op_] == signature,
            "recorded step: the ops differ from the recording (see Backend::begin_step)");
  ++step_op_;
  return true;
}

const void* CudaBackend::step_upload(const void* data, std::size_t bytes) {
  cuda::StepGraph& g = *step_;
  if (step_mode_ == StepMode::Capture) {
    // One slot per host array of the step (every layer passes the same positions).
    for (std::size_t i = 0; i < g.slots.size(); ++i) {
      const cuda::StepGraph::Slot& s = g.slots[i];
      if (s.seen == data && s.bytes == bytes && s.seen_step == step_count_) {
        g.upload_slots.push_back(static_cast<std::uint32_t>(i));
        ++step_upload_;
        return g.device + s.offset;
      }
    }
    const std::size_t offset = (g.used + 15) / 16 * 16;
    AKV_CHECK(offset + bytes <= g.capacity, "recorded step: host arrays larger than the arena");
    std::memcpy(g.host + offset, data, bytes);
    g.slots.push_back({offset, bytes, data, step_count_});
    g.upload_slots.push_back(static_cast<std::uint32_t>(g.slots.size() - 1));
    g.used = offset + bytes;
    ++step_upload_;
    return g.device + offset;
  }
  AKV_CHECK(step_upload_ < g.upload_slots.size(), "recorded step: more host arrays than recorded");
  cuda::StepGraph::Slot& s = g.slots[g.upload_slots[step_upload_++]];
  AKV_CHECK(s.bytes == bytes, "recorded step: a host array changed size");
  if (s.seen_step != step_count_) {
    std::memcpy(g.host + s.offset, data, bytes);
    s.seen = data;
    s.seen_step = step_count_;
  } else {
    AKV_CHECK(s.seen == data || std::memcmp(g.host + s.offset, data, bytes) == 0,
              "recorded step: one slot, two different host arrays");
  }
  return g.device + s.offset;
}

void CudaBackend::end_step() {
  AKV_CHECK(in_step_, "end_step without begin_step");
  in_step_ = false;
  ++op_seq_;  // see begin_step
  if (step_mode_ == StepMode::Eager) {
    ++step_stats_.eager;
    return;
  }
  cuda::StepGraph& g = *step_;
  if (step_mode_ == StepMode::Capture) {
    cudaGraph_t graph = nullptr;
    AKV_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    AKV_CUDA_CHECK(cudaGraphInstantiate(&g.exec, graph, 0));
    AKV_CUDA_CHECK(cudaGraphDestroy(graph));
    g.key.alloc_epoch = alloc_epoch_;  // buffers the captured step allocated belong to it
    ++step_stats_.captured;
  } else {
    AKV_CHECK(step_op_ == g.ops.size() && step_upload_ == g.upload_slots.size() &&
                  step_download_ == g.downloads.size(),
              "recorded step: fewer ops than recorded");
    ++step_stats_.replayed;
  }
  step_mode_ = StepMode::Eager;
  step_ = nullptr;
  launch_step(g);
}

void CudaBackend::launch_step(cuda::StepGraph& g) {
  AKV_CUDA_CHECK(cudaMemcpyAsync(g.device, g.host, g.used, cudaMemcpyHostToDevice, stream_));
  AKV_CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
  AKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (std::size_t i = 0; i < step_out_.size(); ++i)
    std::memcpy(step_out_[i].data(), g.downloads[i].pinned, step_out_[i].size_bytes());
  step_out_.clear();
}

}  // namespace akv
