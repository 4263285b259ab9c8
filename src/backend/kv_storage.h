// KV memory as the backend holds it: per layer, one K and one V array of fixed-size blocks,
// [n_blocks * block_size, n_kv_heads * head_dim]; for hybrid models also the per-sequence
// recurrent state slots. Which block belongs to which sequence is the KV manager's business
// (kv/), which slot the scheduler's; ops only follow block tables and slot numbers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/tensor_ref.h"

namespace akv {

// The recurrent state of hybrid models' linear-attention (Gated DeltaNet) layers: one slot per
// running sequence, owned by it like its KV blocks (the engine hands slots out). Per slot and
// per linear layer, f32: the conv state [conv_rows, conv_channels] (the last inputs of the
// short convolution, oldest first) and the delta-rule state [n_v_heads * k_head_dim, v_head_dim].
struct StateLayout {
  std::int64_t n_layers = 0;  // linear-attention layers; 0: the model has none
  std::int64_t n_slots = 0;
  std::int64_t conv_rows = 0;  // conv_kernel - 1
  std::int64_t conv_channels = 0;
  std::int64_t n_k_heads = 0, n_v_heads = 0, k_head_dim = 0, v_head_dim = 0;

  std::int64_t recurrent_rows() const { return n_v_heads * k_head_dim; }
  // One slot across all linear layers, as read_state_slot lays it out:
  // [n_layers][conv [conv_rows, conv_channels], recurrent [recurrent_rows, v_head_dim]] f32.
  std::int64_t slot_floats() const { return n_layers * (conv_rows * conv_channels + recurrent_rows() * v_head_dim); }
  std::int64_t bytes() const { return n_slots * slot_floats() * static_cast<std::int64_t>(sizeof(float)); }
};

struct KvLayout {
  std::int64_t n_layers = 0;
  std::int64_t n_blocks = 0;
  std::int64_t block_size = 0;   // token positions per block
  std::int64_t n_kv_heads = 0;
  std::int64_t head_dim = 0;
  DType dtype = DType::F32;

  std::int64_t row_width() const { return n_kv_heads * head_dim; }
  std::int64_t bytes() const {
    return 2 * n_layers * n_blocks * block_size * row_width() * static_cast<std::int64_t>(dtype_size(dtype));
  }
  // One block across all layers, as Backend::read_kv_block lays it out:
  // [n_layers][K, V][block_size, row_width] in `dtype`.
  std::int64_t block_bytes() const {
    return 2 * n_layers * block_size * row_width() * static_cast<std::int64_t>(dtype_size(dtype));
  }
};

struct KvStorage {
  KvLayout layout;
  std::vector<TensorRef> k;  // [n_layers] each [n_blocks * block_size, row_width]
  std::vector<TensorRef> v;
  // Hybrid models' linear-attention state (alloc_state_arrays; n_layers 0 otherwise):
  // [state.n_layers] each [n_slots * conv_rows, conv_channels] and [n_slots * recurrent_rows, v_head_dim].
  StateLayout state;
  std::vector<TensorRef> conv_state, recurrent_state;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;  // owners of k, v and state memory
};

class Backend;

// Allocates one K and one V array per layer through `backend.alloc` (zero-filled).
KvStorage alloc_kv_arrays(Backend& backend, const KvLayout& layout);
// Adds the state arrays of `state` to kv through `backend.alloc` (zero-filled); once per kv.
void alloc_state_arrays(Backend& backend, KvStorage& kv, const StateLayout& state);

// Copies state slot `slot` (every linear layer's conv and recurrent state) to host memory in
// StateLayout::slot_floats order, and back. Work on any backend through download/upload, so
// not inside a recorded step (Backend::begin_step).
void read_state_slot(Backend& backend, const KvStorage& kv, std::int32_t slot, std::span<float> host);
void write_state_slot(Backend& backend, KvStorage& kv, std::int32_t slot, std::span<const float> host);

// The row of `layer`'s K/V array holding position `pos` of a sequence with `block_table`.
inline std::int64_t kv_row(const KvLayout& layout, std::span<const std::int32_t> block_table,
                           std::int64_t pos) {
  const std::int64_t block = pos / layout.block_size;
  AKV_CHECK(block < static_cast<std::int64_t>(block_table.size()), "position beyond block table");
  return static_cast<std::int64_t>(block_table[block]) * layout.block_size + pos % layout.block_size;
}

}  // namespace akv
