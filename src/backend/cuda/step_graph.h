// One decode step recorded as a CUDA graph (Backend::begin_step): the executable graph, the
// arena its host arrays travel through (pinned and device, one H2D copy before each launch), and
// what the capturing walk saw (op signatures, upload slots, downloads) so that each replaying
// walk can check that it repeats. Owned by CudaBackend; engine thread only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace akv::cuda {

// What a recording is valid for: the caller, its KV, the batch shape, the attention split count
// (fixed by a power-of-two bound on the keys) and the set of live device buffers.
struct StepKey {
  const void* caller = nullptr;
  const void* kv = nullptr;  // layer 0's K array
  std::int32_t n_tokens = 0, n_seqs = 0, n_logits = 0;
  std::int32_t keys_bound = 0;    // bit_ceil of the most keys a token of the step can see
  std::uint64_t alloc_epoch = 0;  // device buffers allocated or freed so far
  bool operator==(const StepKey&) const = default;
};

struct StepGraph {
  StepGraph(const StepKey& key, std::size_t desc_capacity, std::size_t upload_capacity);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // A host array's place in the arena; `seen*` say which host pointer filled it this step.
  struct Slot {
    std::size_t offset = 0, bytes = 0;
    const void* seen = nullptr;
    std::uint64_t seen_step = 0;
  };
  // A device-to-host copy of the step (logits rows, or greedy ids): lands here, then in the
  // caller's span at end_step.
  struct Download {
    void* pinned = nullptr;
    std::size_t bytes = 0;
  };
  // Device scratch of one kind (see CudaBackend::scratch), owned by this graph.
  struct Scratch {
    void* ptr = nullptr;
    std::size_t capacity = 0;
  };

  StepKey key;
  cudaGraphExec_t exec = nullptr;
  // Arena: [0, desc_capacity) the batch descriptor, then the uploads' slots.
  std::byte* host = nullptr;  // pinned
  std::byte* device = nullptr;
  std::size_t desc_capacity = 0, capacity = 0, used = 0;
  std::vector<Slot> slots;
  std::vector<std::uint32_t> upload_slots;  // [upload call of the step] its slot
  std::vector<std::uint64_t> ops;           // [op call of the step] its signature
  std::vector<Download> downloads;
  Scratch scratch[8];          // indexed like CudaBackend::scratch_
  std::vector<void*> retired;  // scratch outgrown during the capture (still in the graph)
  std::uint64_t last_use = 0;
};

}  // namespace akv::cuda
