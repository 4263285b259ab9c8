// The spill codecs on the device (backend/kv_codec.h defines the byte format). Restores read a
// block's encoded bytes where they lie (device memory, or mapped page-locked host memory,
// straight over PCIe) and write its K and V slabs into the paged KV arrays in the live dtype;
// demotions encode a block's slabs and write the bytes where they go. Both equal the host's
// decode_block / encode_block bit for bit: every step is rounded as on the host (no fused
// multiply-add, IEEE division, round-half-even codes, the host's BF16 / F16 rounding).
#include <algorithm>
#include <cstdint>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace akv::cuda {
namespace {

constexpr int kThreads = 256;
using u8 = unsigned char;

__device__ __forceinline__ std::uint32_t load_u16(const u8* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8;
}

__device__ __forceinline__ float bf16_bits_to_f32(std::uint32_t h) {
  return __uint_as_float(h << 16);
}

// Element i of a row of `t` (F32, BF16, F16) as f32; byte loads (any alignment).
__device__ __forceinline__ float load_elem(const u8* p, DType t, std::int64_t i) {
  if (t == DType::F32) {
    const u8* q = p + i * 4;
    return __uint_as_float(load_u16(q) | load_u16(q + 2) << 16);
  }
  const std::uint32_t h = load_u16(p + i * 2);
  return t == DType::BF16 ? bf16_bits_to_f32(h) : __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

// The host's f32_to_bf16 / f32_to_f16 (tensor/dtype.h), NaNs included.
__device__ __forceinline__ unsigned short f32_to_bf16_bits(float f) {
  std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<unsigned short>(u >> 16);
}
__device__ __forceinline__ unsigned short f32_to_f16_bits(float f) {
  if (isnan(f)) return static_cast<unsigned short>(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(f));
}

__device__ __forceinline__ void store_elem(u8* p, DType t, std::int64_t i, float x) {
  if (t == DType::F32) {
    reinterpret_cast<float*>(p)[i] = x;
    return;
  }
  reinterpret_cast<unsigned short*>(p)[i] = t == DType::BF16 ? f32_to_bf16_bits(x) : f32_to_f16_bits(x);
}

__device__ __forceinline__ std::size_t dtype_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

// One CUDA block per (slab, KV block): blockIdx.x = slab (2 * layer + side), blockIdx.y = the
// block's index in `src` / `dst_block`.
__global__ void decode_kv_kernel(KvCodecArgs a, const u8* const* src, const std::int32_t* dst_block,
                                 u8* const* slab_base) {
  extern __shared__ float2 params[];  // per group: (scale, min)
  const int s = blockIdx.x;
  const std::int64_t n = static_cast<std::int64_t>(a.slab_tokens) * a.row_width;
  const std::size_t live = dtype_bytes(a.live_dtype);
  const std::size_t pair = static_cast<std::size_t>(s / 2);
  const std::size_t offset = a.bits == 0 ? static_cast<std::size_t>(s) * a.key_bytes
                                         : pair * (a.key_bytes + a.value_bytes) + (s % 2 == 0 ? 0 : a.key_bytes);
  const u8* in = src[blockIdx.y] + offset;
  u8* out = slab_base[s] + static_cast<std::int64_t>(dst_block[blockIdx.y]) * n * static_cast<std::int64_t>(live);
  pdl_wait();  // the block's earlier readers (a started read of its old contents) are done

  if (a.bits == 0) {
    if (a.elem_dtype == a.live_dtype) {  // a copy
      const std::int64_t bytes = n * static_cast<std::int64_t>(live);
      if (reinterpret_cast<std::uintptr_t>(in) % 16 == 0 && reinterpret_cast<std::uintptr_t>(out) % 16 == 0 &&
          bytes % 16 == 0) {
        for (std::int64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x)
          reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(in)[i];
      } else {
        for (std::int64_t i = threadIdx.x; i < bytes; i += blockDim.x) out[i] = in[i];
      }
      return;
    }
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x)
      store_elem(out, a.live_dtype, i, load_elem(in, a.elem_dtype, i));
    return;
  }

  const bool key = s % 2 == 0;
  const int gt = key ? a.key_group_tokens : a.value_group_tokens;
  const int gc = key ? a.key_group_channels : a.value_group_channels;
  const int n_cg = (a.row_width + gc - 1) / gc;
  const int n_groups = (a.slab_tokens + gt - 1) / gt * n_cg;
  for (int g = threadIdx.x; g < n_groups; g += blockDim.x)
    params[g] = make_float2(bf16_bits_to_f32(load_u16(in + g * 4)), bf16_bits_to_f32(load_u16(in + g * 4 + 2)));
  __syncthreads();
  const u8* codes = in + static_cast<std::size_t>(n_groups) * 4;
  const std::int64_t code_bytes = (n * a.bits + 7) / 8;
  const int per_byte = a.bits == 8 ? 1 : 2;
  auto emit_byte = [&](std::int64_t j, std::uint32_t byte) {
    for (int k = 0; k < per_byte; ++k) {
      const std::int64_t e = j * per_byte + k;
      if (e >= n) return;
      const std::uint32_t code = a.bits == 8 ? byte : (byte >> (4 * k)) & 0xFu;
      const std::int64_t t = e / a.row_width, c = e % a.row_width;
      const float2 p = params[t / gt * n_cg + c / gc];
      store_elem(out, a.live_dtype, e, __fadd_rn(p.y, __fmul_rn(p.x, static_cast<float>(code))));
    }
  };
  std::int64_t first_tail = 0;
  if (reinterpret_cast<std::uintptr_t>(codes) % 16 == 0) {  // 16 code bytes a load
    const std::int64_t n_vec = code_bytes / 16;
    for (std::int64_t v = threadIdx.x; v < n_vec; v += blockDim.x) {
      const uint4 w = reinterpret_cast<const uint4*>(codes)[v];
      const std::uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int q = 0; q < 16; ++q) emit_byte(v * 16 + q, (words[q / 4] >> (8 * (q % 4))) & 0xFFu);
    }
    first_tail = n_vec * 16;
  }
  for (std::int64_t j = first_tail + threadIdx.x; j < code_bytes; j += blockDim.x) emit_byte(j, codes[j]);
}

__device__ __forceinline__ unsigned short bf16_at_least(float x) {
  const std::uint32_t t = __float_as_uint(x) >> 16;
  if (bf16_bits_to_f32(t) >= x) return static_cast<unsigned short>(t);
  return static_cast<unsigned short>(t + 1);
}
__device__ __forceinline__ unsigned short bf16_at_most(float x) {
  return static_cast<unsigned short>(bf16_at_least(-x) ^ 0x8000u);
}

// A group's stored parameters from the range of its non-NaN values (lo, hi; NaN where it has
// none), as the host's fit_groups: -0 counts as +0, and a group of NaNs gets what the host's fit
// of its quiet NaN stores (0x7fc1 for both: the device's NaN arithmetic would give other bits).
__device__ __forceinline__ float2 fit_group(float lo, float hi, float steps) {
  if (isnan(lo)) return make_float2(bf16_bits_to_f32(0x7fc1u), bf16_bits_to_f32(0x7fc1u));
  lo = __fadd_rn(lo, 0.0f);
  hi = __fadd_rn(hi, 0.0f);
  const float min_v = bf16_bits_to_f32(bf16_at_most(lo));
  return make_float2(bf16_bits_to_f32(bf16_at_least(__fdiv_rn(__fsub_rn(hi, min_v), steps))), min_v);
}

// A group's 4 parameter bytes as one little-endian word: bf16 scale, then bf16 minimum.
__device__ __forceinline__ std::uint32_t param_word(float2 p) {
  return __float_as_uint(p.x) >> 16 | (__float_as_uint(p.y) >> 16) << 16;
}

__device__ __forceinline__ std::uint32_t quantize(float v, float2 p, float steps) {
  if (!(p.x > 0.0f)) return 0;  // a constant group (or NaN parameters)
  const float r = rintf(__fdiv_rn(__fsub_rn(v, p.y), p.x));
  return static_cast<std::uint32_t>(fminf(fmaxf(r, 0.0f), steps));
}

// The inverse of decode_kv_kernel: one CUDA block per (slab, KV block), block src_block[y]'s
// slab x encoded into dst[y] at the slab's offset. Quantized slabs: first every group's range
// (a thread per group where a group is one channel, keys: the loads coalesce across threads;
// else a warp per group), then the parameters and the codes, written 4 and 16 bytes a store
// where aligned (the destination may be mapped host memory: wide writes cross PCIe whole).
__global__ void encode_kv_kernel(KvCodecArgs a, u8* const* dst, const std::int32_t* src_block,
                                 const u8* const* slab_base) {
  extern __shared__ float2 params[];  // per group: (scale, min) as stored
  const int s = blockIdx.x;
  const std::int64_t n = static_cast<std::int64_t>(a.slab_tokens) * a.row_width;
  const std::size_t live = dtype_bytes(a.live_dtype);
  const std::size_t pair = static_cast<std::size_t>(s / 2);
  const std::size_t offset = a.bits == 0 ? static_cast<std::size_t>(s) * a.key_bytes
                                         : pair * (a.key_bytes + a.value_bytes) + (s % 2 == 0 ? 0 : a.key_bytes);
  u8* out = dst[blockIdx.y] + offset;
  const u8* in = slab_base[s] + static_cast<std::int64_t>(src_block[blockIdx.y]) * n * static_cast<std::int64_t>(live);
  pdl_wait();  // the kernels that wrote the block are done

  if (a.bits == 0) {
    const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(out);
    for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float x = load_elem(in, a.live_dtype, i);
      if (a.elem_dtype == a.live_dtype) {
        for (std::size_t k = 0; k < live; ++k) out[i * live + k] = in[i * live + k];
      } else if (a.elem_dtype == DType::F32) {
        const std::uint32_t b = __float_as_uint(x);
        if (at % 4 == 0) {
          reinterpret_cast<std::uint32_t*>(out)[i] = b;
        } else {
          for (int k = 0; k < 4; ++k) out[i * 4 + k] = static_cast<u8>(b >> (8 * k));
        }
      } else {
        const unsigned short h = a.elem_dtype == DType::BF16 ? f32_to_bf16_bits(x) : f32_to_f16_bits(x);
        if (at % 2 == 0) {
          reinterpret_cast<unsigned short*>(out)[i] = h;
        } else {
          out[i * 2] = static_cast<u8>(h);
          out[i * 2 + 1] = static_cast<u8>(h >> 8);
        }
      }
    }
    return;
  }

  const bool key = s % 2 == 0;
  const int gt = key ? a.key_group_tokens : a.value_group_tokens;
  const int gc = key ? a.key_group_channels : a.value_group_channels;
  const int n_cg = (a.row_width + gc - 1) / gc;
  const int n_groups = (a.slab_tokens + gt - 1) / gt * n_cg;
  const float steps = static_cast<float>((1 << a.bits) - 1);
  // fminf/fmaxf like the host's scan: NaNs skipped, a NaN only where every value is NaN.
  if (gc == 1) {
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x) {
      const int t0 = g / n_cg * gt, c = g % n_cg;
      const int tn = min(gt, a.slab_tokens - t0);
      float lo = load_elem(in, a.live_dtype, static_cast<std::int64_t>(t0) * a.row_width + c), hi = lo;
      for (int t = 1; t < tn; ++t) {
        const float v = load_elem(in, a.live_dtype, static_cast<std::int64_t>(t0 + t) * a.row_width + c);
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
      }
      params[g] = fit_group(lo, hi, steps);
    }
  } else {
    const int lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
    for (int g = threadIdx.x / 32; g < n_groups; g += n_warps) {
      const int t0 = g / n_cg * gt, c0 = g % n_cg * gc;
      const int tn = min(gt, a.slab_tokens - t0), cn = min(gc, a.row_width - c0);
      float lo = 0.0f, hi = 0.0f;
      bool any = false;
      for (int k = lane; k < tn * cn; k += 32) {
        const float v = load_elem(in, a.live_dtype, static_cast<std::int64_t>(t0 + k / cn) * a.row_width + c0 + k % cn);
        lo = any ? fminf(lo, v) : v;
        hi = any ? fmaxf(hi, v) : v;
        any = true;
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float olo = __shfl_xor_sync(0xffffffffu, lo, o), ohi = __shfl_xor_sync(0xffffffffu, hi, o);
        const bool oany = __shfl_xor_sync(0xffffffffu, any, o);
        if (oany) {
          lo = any ? fminf(lo, olo) : olo;
          hi = any ? fmaxf(hi, ohi) : ohi;
          any = true;
        }
      }
      if (lane == 0) params[g] = fit_group(lo, hi, steps);
    }
  }
  __syncthreads();
  if (reinterpret_cast<std::uintptr_t>(out) % 4 == 0) {
    for (int g = threadIdx.x; g < n_groups; g += blockDim.x)
      reinterpret_cast<std::uint32_t*>(out)[g] = param_word(params[g]);
  } else {
    for (int j = threadIdx.x; j < n_groups * 4; j += blockDim.x)
      out[j] = static_cast<u8>(param_word(params[j / 4]) >> (8 * (j % 4)));
  }
  u8* codes = out + static_cast<std::size_t>(n_groups) * 4;
  const std::int64_t code_bytes = (n * a.bits + 7) / 8;
  const int per_byte = a.bits == 8 ? 1 : 2;
  // The code byte of elements e, e + 1 (int4) at token t, channel c, advancing the three past it.
  auto next_byte = [&](std::int64_t& e, int& t, int& c) {
    std::uint32_t byte = 0;
    for (int k = 0; k < per_byte; ++k, ++e) {
      if (e < n) byte |= quantize(load_elem(in, a.live_dtype, e), params[t / gt * n_cg + c / gc], steps) << (4 * k);
      if (++c == a.row_width) {
        c = 0;
        ++t;
      }
    }
    return byte;
  };
  std::int64_t first_tail = 0;
  if (reinterpret_cast<std::uintptr_t>(codes) % 16 == 0) {  // 16 code bytes a store
    const std::int64_t n_vec = code_bytes / 16;
    for (std::int64_t v = threadIdx.x; v < n_vec; v += blockDim.x) {
      std::int64_t e = v * 16 * per_byte;
      int t = static_cast<int>(e / a.row_width), c = static_cast<int>(e % a.row_width);
      std::uint32_t w[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        std::uint32_t word = 0;
#pragma unroll
        for (int b = 0; b < 4; ++b) word |= next_byte(e, t, c) << (8 * b);
        w[q] = word;
      }
      reinterpret_cast<uint4*>(codes)[v] = make_uint4(w[0], w[1], w[2], w[3]);
    }
    first_tail = n_vec * 16;
  }
  for (std::int64_t j = first_tail + threadIdx.x; j < code_bytes; j += blockDim.x) {
    std::int64_t e = j * per_byte;
    int t = static_cast<int>(e / a.row_width), c = static_cast<int>(e % a.row_width);
    codes[j] = static_cast<u8>(next_byte(e, t, c));
  }
}

}  // namespace

std::size_t decode_kv_smem_bytes(const KvCodecArgs& a) {
  if (a.bits == 0) return 0;
  auto groups = [&](int gt, int gc) {
    return static_cast<std::size_t>((a.slab_tokens + gt - 1) / gt) * ((a.row_width + gc - 1) / gc);
  };
  return std::max(groups(a.key_group_tokens, a.key_group_channels),
                  groups(a.value_group_tokens, a.value_group_channels)) *
         sizeof(float2);
}

void launch_decode_kv_blocks(const KvCodecArgs& a, const void* const* src, const std::int32_t* dst_block,
                             void* const* slab_base, int n_slabs, int n_blocks, Stream s) {
  if (n_blocks == 0) return;
  AKV_CHECK(n_blocks < 65536 && n_slabs < (1 << 30), "decode_kv_blocks: too many blocks for one launch");
  const std::size_t smem = decode_kv_smem_bytes(a);
  AKV_CHECK(smem <= 48u * 1024, "decode_kv_blocks: too many quantization groups per slab");
  launch(decode_kv_kernel, dim3(static_cast<unsigned>(n_slabs), static_cast<unsigned>(n_blocks)), kThreads, smem, s,
         a, reinterpret_cast<const u8* const*>(src), dst_block, reinterpret_cast<u8* const*>(slab_base));
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_encode_kv_blocks(const KvCodecArgs& a, void* const* dst, const std::int32_t* src_block,
                             const void* const* slab_base, int n_slabs, int n_blocks, Stream s) {
  if (n_blocks == 0) return;
  AKV_CHECK(n_blocks < 65536, "encode_kv_blocks: too many blocks for one launch");
  const std::size_t smem = decode_kv_smem_bytes(a);
  AKV_CHECK(smem <= 48u * 1024, "encode_kv_blocks: too many quantization groups per slab");
  launch(encode_kv_kernel, dim3(static_cast<unsigned>(n_slabs), static_cast<unsigned>(n_blocks)), kThreads, smem, s,
         a, reinterpret_cast<u8* const*>(dst), src_block, reinterpret_cast<const u8* const*>(slab_base));
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
