// Device-side random fill for the CUDA benchmark: weights are generated on the GPU instead of
// being written to and read from disk (16 GB for the 8B shape).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace akv::bench {

namespace {
__global__ void fill_bf16_kernel(__nv_bfloat16* p, std::int64_t n, std::uint64_t seed, float center, float scale) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    std::uint64_t x = (static_cast<std::uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = __float2bfloat16_rn(center + scale * (2.0f * u - 1.0f));
  }
}
__global__ void fill_bytes_kernel(unsigned char* p, std::int64_t n, std::uint64_t seed, int lo, int hi) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    std::uint64_t x = (static_cast<std::uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    p[i] = static_cast<unsigned char>(lo + static_cast<int>((x >> 40) % static_cast<std::uint64_t>(hi - lo + 1)));
  }
}
}  // namespace

// p[0, n) = uniform bytes in [lo, hi] (MXFP4 blocks and scales). Asynchronous on the default stream.
void fill_bytes(void* p, std::int64_t n, std::uint64_t seed, int lo, int hi) {
  fill_bytes_kernel<<<1024, 256>>>(static_cast<unsigned char*>(p), n, seed, lo, hi);
}

// p[0, n) = center + uniform(-scale, scale), as bf16. Asynchronous on the default stream.
void fill_bf16(void* p, std::int64_t n, std::uint64_t seed, float center, float scale) {
  fill_bf16_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, center, scale);
}

}  // namespace akv::bench
