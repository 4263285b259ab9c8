#include "backend/kv_storage.h"

#include "backend/backend.h"

namespace akv {

KvStorage alloc_kv_arrays(Backend& backend, const KvLayout& layout) {
  KvStorage kv;
  kv.layout = layout;
  const std::int64_t rows = layout.n_blocks * layout.block_size;
  for (std::int64_t l = 0; l < layout.n_layers; ++l) {
    for (auto* side : {&kv.k, &kv.v}) {
      kv.buffers.push_back(backend.alloc(layout.dtype, rows, layout.row_width()));
      side->push_back(kv.buffers.back()->tensor());
    }
  }
  return kv;
}

void alloc_state_arrays(Backend& backend, KvStorage& kv, const StateLayout& st) {
  AKV_CHECK(kv.state.n_layers == 0, "alloc_state_arrays: once per KV storage");
  kv.state = st;
  for (std::int64_t l = 0; l < st.n_layers; ++l) {
    kv.buffers.push_back(backend.alloc(DType::F32, st.n_slots * st.conv_rows, st.conv_channels));
    kv.conv_state.push_back(kv.buffers.back()->tensor());
    kv.buffers.push_back(backend.alloc(DType::F32, st.n_slots * st.recurrent_rows(), st.v_head_dim));
    kv.recurrent_state.push_back(kv.buffers.back()->tensor());
  }
}

namespace {

// The views of slot `slot` of every state array, in slot_floats order.
std::vector<TensorRef> slot_views(const KvStorage& kv, std::int32_t slot) {
  const StateLayout& st = kv.state;
  AKV_CHECK(slot >= 0 && slot < st.n_slots, "state slot out of range");
  std::vector<TensorRef> views;
  for (std::int64_t l = 0; l < st.n_layers; ++l) {
    views.push_back(kv.conv_state[l].rows_slice(slot * st.conv_rows, st.conv_rows));
    views.push_back(kv.recurrent_state[l].rows_slice(slot * st.recurrent_rows(), st.recurrent_rows()));
  }
  return views;
}

}  // namespace

void read_state_slot(Backend& backend, const KvStorage& kv, std::int32_t slot, std::span<float> host) {
  AKV_CHECK(static_cast<std::int64_t>(host.size()) == kv.state.slot_floats(), "read_state_slot: host size");
  std::size_t at = 0;
  for (const TensorRef& t : slot_views(kv, slot)) {
    const auto n = static_cast<std::size_t>(t.rows * t.cols);
    backend.download(t, host.subspan(at, n));
    at += n;
  }
}

void write_state_slot(Backend& backend, KvStorage& kv, std::int32_t slot, std::span<const float> host) {
  AKV_CHECK(static_cast<std::int64_t>(host.size()) == kv.state.slot_floats(), "write_state_slot: host size");
  std::size_t at = 0;
  for (const TensorRef& t : slot_views(kv, slot)) {
    const auto n = static_cast<std::size_t>(t.rows * t.cols);
    backend.upload(host.subspan(at, n), t);
    at += n;
  }
}

}  // namespace akv
