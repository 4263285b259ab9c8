// sample_rows of host rows on a backend, for the greedy-id and sampled-id tests.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace akv::test {

// Backend::sample_rows of `rows` (uploaded as a strided view, like a slice of a wider buffer) at
// `temperature` (0: argmax) with uniforms `u`; `base` calls the Backend default (download, pick
// on the host) instead of the backend's own.
inline std::vector<std::int32_t> sample_on(Backend& backend, const std::vector<std::vector<float>>& rows,
                                           const std::vector<float>& temperature, const std::vector<double>& u,
                                           bool base) {
  const auto n = static_cast<std::int64_t>(rows.size());
  const auto cols = static_cast<std::int64_t>(rows[0].size());
  auto buf = backend.alloc(DType::F32, n, cols + 3);
  const TensorRef t = buf->tensor().cols_slice(1, cols);
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  backend.upload(flat, t);
  std::vector<std::int32_t> ids(rows.size(), -7);
  if (base)
    backend.Backend::sample_rows(t, temperature, u, ids);
  else
    backend.sample_rows(t, temperature, u, ids);
  return ids;
}

}  // namespace akv::test
