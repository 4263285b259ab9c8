// The signature of an op inside a recorded step (step_graph.h): its kind and every argument the
// graph bakes in, hashed. Shared by the translation units of CudaBackend (cuda_backend.cpp,
// cuda_matmul.cpp, cuda_moe.cpp); not part of the backend's interface.
#pragma once

#include <bit>
#include <cstdint>

#include "backend/tensor_ref.h"

namespace akv::cuda {

struct Sig {
  std::uint64_t h = 1469598103934665603ull;
  Sig& u(std::uint64_t v) {
    h = (h ^ v) * 1099511628211ull;
    h ^= h >> 29;
    return *this;
  }
  Sig& p(const void* x) { return u(reinterpret_cast<std::uintptr_t>(x)); }
  Sig& f(double x) { return u(std::bit_cast<std::uint64_t>(x)); }
  Sig& t(const TensorRef& x) {
    return p(x.data).u(static_cast<std::uint64_t>(x.rows)).u(static_cast<std::uint64_t>(x.cols))
        .u(static_cast<std::uint64_t>(x.stride)).u(static_cast<std::uint64_t>(x.dtype));
  }
  Sig& w(const WeightRef& x) {
    return p(x.data).u(static_cast<std::uint64_t>(x.rows)).u(static_cast<std::uint64_t>(x.cols))
        .u(static_cast<std::uint64_t>(x.dtype));
  }
};

enum OpKind : std::uint64_t {
  kEmbed = 1,
  kRmsNorm,
  kMatmul,
  kAdd,
  kAddRmsNorm,
  kRope,
  kStoreKv,
  kAttention,
  kGlu,
  kSoftcap,
  kGather,
  kDownload,
  kGatedMlp,
  kSample,
  kMoe,
  kSigmoidMul,
  kConv1d,
  kDeltaRule,
  kRopeStoreKv,
  kGluDown
};

}  // namespace akv::cuda
