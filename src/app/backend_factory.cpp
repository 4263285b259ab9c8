#include "app/backend_factory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/fast_backend.h"
#include "backend/cpu/reference_backend.h"
#include "base/error.h"

#ifdef AGENTKV_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/op_timer.h"
#endif

namespace akv {

namespace {

bool cuda_device_usable() {
#ifdef AGENTKV_HAVE_CUDA
  return CudaBackend::device_available();
#else
  return false;
#endif
}

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& flag, int n_threads) {
  const std::string name = flag != "auto" ? flag : cuda_device_usable() ? "cuda" : "cpu";
  if (name == "reference") return std::make_unique<ReferenceBackend>();
  if (name == "cpu") return std::make_unique<FastBackend>(n_threads);
#ifdef AGENTKV_HAVE_CUDA
  if (name == "cuda") {
    int n_devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&n_devices);
    if (err != cudaSuccess || n_devices == 0)
      throw Error(ErrorKind::Unsupported,
                  std::string("--backend cuda: no usable CUDA device (") +
                      (err != cudaSuccess ? cudaGetErrorString(err) : "none found") + ")");
    auto cuda = std::make_unique<CudaBackend>();
    // A diagnostic: each step's GPU time by op kind, one line a step (op_timer.h).
    if (const char* path = std::getenv("AGENTKV_CUDA_OP_TIMES"); path != nullptr && *path != '\0') {
      std::FILE* log = std::fopen(path, "a");
      if (log == nullptr)
        throw Error(ErrorKind::InvalidArgument,
                    std::string("AGENTKV_CUDA_OP_TIMES: cannot open ") + path);
      const char* each = std::getenv("AGENTKV_CUDA_OP_TIMES_EACH");
      return std::make_unique<CudaOpTimer>(std::move(cuda), log, 1,
                                           each != nullptr && std::strcmp(each, "1") == 0);
    }
    return cuda;
  }
#endif
  if (name == "cuda")
    throw Error(
        ErrorKind::InvalidArgument,
        "--backend cuda: this build has no CUDA backend (configure with -DAGENTKV_CUDA=ON)");
  throw Error(ErrorKind::InvalidArgument,
              "--backend: unknown backend '" + name + "' (auto, reference, cpu, cuda)");
}

}  // namespace akv
