// KV memory as the backend holds it: per layer, one K and one V array of fixed-size blocks,
// [n_blocks * block_size, n_kv_heads * head_dim]. Which block belongs to which sequence is the
// KV manager's business (kv/); ops only follow block tables.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/tensor_ref.h"

namespace akv {

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
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;  // owners of k and v memory
};

class Backend;

// Allocates one K and one V array per layer through `backend.alloc` (zero-filled).
KvStorage alloc_kv_arrays(Backend& backend, const KvLayout& layout);

// The row of `layer`'s K/V array holding position `pos` of a sequence with `block_table`.
inline std::int64_t kv_row(const KvLayout& layout, std::span<const std::int32_t> block_table,
                           std::int64_t pos) {
  const std::int64_t block = pos / layout.block_size;
  AKV_CHECK(block < static_cast<std::int64_t>(block_table.size()), "position beyond block table");
  return static_cast<std::int64_t>(block_table[block]) * layout.block_size + pos % layout.block_size;
}

}  // namespace akv
