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

}  // namespace akv
