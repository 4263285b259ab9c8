#include "backend/kv_codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/kv_codec_quant.h"
#include "base/check.h"

namespace akv {

namespace {

using kv_codec_detail::fit_params;
using kv_codec_detail::GroupParams;
using kv_codec_detail::kParamBytes;
using kv_codec_detail::QuantSlab;
using kv_codec_detail::QuantSlabKernels;

float load_elem(const std::byte* row, DType t, std::int64_t i) {
  switch (t) {
    case DType::F32: {
      float f;
      std::memcpy(&f, row + i * 4, 4);
      return f;
    }
    case DType::BF16:
    case DType::F16: {
      std::uint16_t h;
      std::memcpy(&h, row + i * 2, 2);
      return t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    default:
      AKV_CHECK(false, "KV dtype must be F32, BF16 or F16");
  }
  return 0.0f;
}

void store_elem(std::byte* row, DType t, std::int64_t i, float f) {
  switch (t) {
    case DType::F32:
      std::memcpy(row + i * 4, &f, 4);
      return;
    case DType::BF16:
    case DType::F16: {
      const std::uint16_t h = t == DType::BF16 ? f32_to_bf16(f) : f32_to_f16(f);
      std::memcpy(row + i * 2, &h, 2);
      return;
    }
    default:
      AKV_CHECK(false, "KV dtype must be F32, BF16 or F16");
  }
}

// Element-wise conversion between two float dtypes (memcpy when equal).
void convert(std::span<const std::byte> in, DType from, std::span<std::byte> out, DType to,
             std::int64_t n) {
  if (from == to) {
    std::memcpy(out.data(), in.data(), in.size());
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) store_elem(out.data(), to, i, load_elem(in.data(), from, i));
}

// --- quantized codecs -------------------------------------------------------------------------

// A group of elements sharing one scale (and minimum): a rectangle of `tokens` rows by
// `channels` columns of a slab [block_size, row_width]; 0 stands for the slab's whole extent.
// Groups tile the slab; those at its edges may be smaller.
struct Grouping {
  std::int64_t tokens = 0;
  std::int64_t channels = 0;
};

// Asymmetric: a group's codes 0 .. 2^bits - 1 cover [min, min + (2^bits - 1) * scale].
struct QuantSpec {
  int bits = 8;  // 8 or 4
  Grouping keys;
  Grouping values;
};

// Keys per channel over the slab's tokens; values per token (the whole row / 32 channels).
constexpr Grouping kPerChannel{.tokens = 0, .channels = 1};
constexpr QuantSpec kInt8{.bits = 8, .keys = kPerChannel, .values = {.tokens = 1, .channels = 0}};
constexpr QuantSpec kInt4{.bits = 4, .keys = kPerChannel, .values = {.tokens = 1, .channels = 32}};

const QuantSpec* quant_spec(SpillCodec codec) {
  switch (codec) {
    case SpillCodec::Int8:
      return &kInt8;
    case SpillCodec::Int4:
      return &kInt4;
    default:
      return nullptr;
  }
}

// One slab's geometry under a grouping.
struct SlabGrid {
  std::int64_t n_tokens = 0, width = 0;  // the slab [n_tokens, width]
  std::int64_t group_tokens = 0, group_channels = 0;
  std::int64_t n_token_groups = 0, n_channel_groups = 0;

  SlabGrid(std::int64_t t, std::int64_t w, Grouping g)
      : n_tokens(t),
        width(w),
        group_tokens(g.tokens > 0 ? std::min(g.tokens, t) : t),
        group_channels(g.channels > 0 ? std::min(g.channels, w) : w),
        n_token_groups((t + group_tokens - 1) / group_tokens),
        n_channel_groups((w + group_channels - 1) / group_channels) {}
  std::int64_t n_groups() const { return n_token_groups * n_channel_groups; }
  // The group of element (t, c), row-major over the group grid.
  std::int64_t group_of(std::int64_t t, std::int64_t c) const {
    return t / group_tokens * n_channel_groups + c / group_channels;
  }
};

std::int64_t slab_tokens(const BlockShape& s) {
  const std::int64_t t = s.block_size > 0 ? s.block_size : s.n_rows / 2;
  AKV_CHECK(t > 0 && s.n_rows % (2 * t) == 0, "block shape: rows are not whole K/V slabs");
  return t;
}

std::size_t slab_bytes(const QuantSpec& q, const SlabGrid& g) {
  const auto n = static_cast<std::size_t>(g.n_tokens * g.width);
  return static_cast<std::size_t>(g.n_groups()) * kParamBytes +
         (n * static_cast<std::size_t>(q.bits) + 7) / 8;
}

int max_code(const QuantSpec& q) {
  return (1 << q.bits) - 1;
}

// Fits every group of slab x [n_tokens, width] and writes the bf16 parameters to `params`;
// returns them as stored (rounded). A group's range ignores NaNs (a group of NaNs only gets NaN
// parameters) and counts -0 as +0, so any order of reduction gives the same bytes.
std::vector<GroupParams> fit_groups(const QuantSpec& q, const SlabGrid& g, std::span<const float> x,
                                    std::byte* params) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> lo(g.n_groups(), inf), hi(g.n_groups(), -inf);
  for (std::int64_t t = 0; t < g.n_tokens; ++t)
    for (std::int64_t c = 0; c < g.width; ++c) {
      const std::int64_t k = g.group_of(t, c);
      const float v = x[t * g.width + c];
      if (v < lo[k]) lo[k] = v;
      if (v > hi[k]) hi[k] = v;
    }
  std::vector<GroupParams> out(g.n_groups());
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (lo[k] > hi[k]) lo[k] = hi[k] = std::numeric_limits<float>::quiet_NaN();  // all NaN
    out[k] = fit_params(lo[k] + 0.0f, hi[k] + 0.0f, q.bits, params + k * kParamBytes);
  }
  return out;
}

std::vector<GroupParams> read_groups(const SlabGrid& g, const std::byte* params) {
  std::vector<GroupParams> out(g.n_groups());
  for (std::size_t k = 0; k < out.size(); ++k) {
    std::uint16_t stored[2];
    std::memcpy(stored, params + k * kParamBytes, kParamBytes);
    out[k] = {.scale = bf16_to_f32(stored[0]), .min = bf16_to_f32(stored[1])};
  }
  return out;
}

// Codes of `bits` (8 or 4) bits, element i at bit i * bits, low nibble first.
void put_code(std::byte* codes, int bits, std::int64_t i, int code) {
  if (bits == 8) {
    codes[i] = static_cast<std::byte>(code & 0xFF);
    return;
  }
  const int shift = (i % 2) * 4;
  codes[i / 2] = (codes[i / 2] & static_cast<std::byte>(0xF0 >> shift)) |
                 static_cast<std::byte>((code & 0xF) << shift);
}

int get_code(const std::byte* codes, int bits, std::int64_t i) {
  if (bits == 8) return std::to_integer<int>(codes[i]);
  return (std::to_integer<int>(codes[i / 2]) >> ((i % 2) * 4)) & 0xF;
}

// The code of v in its group (NaN -> 0).
int quantize(const QuantSpec& q, const GroupParams& p, float v) {
  if (!(p.scale > 0.0f)) return 0;  // a constant group: its minimum is exact
  const float r = std::nearbyint((v - p.min) / p.scale);
  return static_cast<int>(std::fmin(std::fmax(r, 0.0f), static_cast<float>(max_code(q))));
}

// slab x [n_tokens, width] -> out (slab_bytes).
void encode_slab(const QuantSpec& q, const SlabGrid& g, std::span<const float> x, std::byte* out) {
  const std::vector<GroupParams> p = fit_groups(q, g, x, out);
  std::byte* codes = out + g.n_groups() * kParamBytes;
  for (std::int64_t t = 0; t < g.n_tokens; ++t)
    for (std::int64_t c = 0; c < g.width; ++c) {
      const std::int64_t i = t * g.width + c;
      put_code(codes, q.bits, i, quantize(q, p[g.group_of(t, c)], x[i]));
    }
}

void decode_slab(const QuantSpec& q, const SlabGrid& g, const std::byte* in, std::span<float> x) {
  const std::vector<GroupParams> p = read_groups(g, in);
  const std::byte* codes = in + g.n_groups() * kParamBytes;
  for (std::int64_t t = 0; t < g.n_tokens; ++t)
    for (std::int64_t c = 0; c < g.width; ++c) {
      const std::int64_t i = t * g.width + c;
      const GroupParams& gp = p[g.group_of(t, c)];
      x[i] = gp.min + gp.scale * static_cast<float>(get_code(codes, q.bits, i));
    }
}

// Slab `i` of a block: even slabs are keys, odd ones values.
SlabGrid slab_grid(const QuantSpec& q, const BlockShape& s, std::int64_t i) {
  return SlabGrid(slab_tokens(s), s.row_width, i % 2 == 0 ? q.keys : q.values);
}

std::size_t quantized_bytes(const QuantSpec& q, const BlockShape& s) {
  const std::int64_t n_slabs = s.n_rows / slab_tokens(s);
  return static_cast<std::size_t>(n_slabs / 2) *
         (slab_bytes(q, slab_grid(q, s, 0)) + slab_bytes(q, slab_grid(q, s, 1)));
}

// The vectorised kernels' view of slab `i` (kv_codec_quant.h).
QuantSlab quant_slab(const QuantSpec& q, const BlockShape& s, std::int64_t i) {
  const SlabGrid g = slab_grid(q, s, i);
  return {.bits = q.bits,
          .keys = i % 2 == 0,
          .n_tokens = g.n_tokens,
          .width = g.width,
          .value_channels = g.group_channels,
          .dtype = s.dtype};
}

// The kernels this CPU runs (null: the reference only).
const QuantSlabKernels* fast_kernels() {
  static const QuantSlabKernels* k = kv_codec_detail::find_quant_slab_kernels_avx2();
  return k;
}

// Slab by slab: the vectorised kernel where it takes the slab, else the reference.
void encode_quantized(const QuantSpec& q, const BlockShape& s, std::span<const std::byte> raw,
                      std::span<std::byte> out, const QuantSlabKernels* fast) {
  const std::int64_t n_slabs = s.n_rows / slab_tokens(s);
  const std::int64_t n = slab_tokens(s) * s.row_width;
  const std::size_t raw_slab = static_cast<std::size_t>(n) * dtype_size(s.dtype);
  std::vector<float> x;
  std::byte* dst = out.data();
  for (std::int64_t i = 0; i < n_slabs; ++i) {
    const std::byte* src = raw.data() + i * raw_slab;
    const SlabGrid g = slab_grid(q, s, i);
    if (fast == nullptr || !fast->encode(quant_slab(q, s, i), src, dst)) {
      x.resize(static_cast<std::size_t>(n));
      for (std::int64_t e = 0; e < n; ++e) x[e] = load_elem(src, s.dtype, e);
      std::fill_n(dst, slab_bytes(q, g), std::byte{0});
      encode_slab(q, g, x, dst);
    }
    dst += slab_bytes(q, g);
  }
}

void decode_quantized(const QuantSpec& q, const BlockShape& s, std::span<const std::byte> in,
                      std::span<std::byte> raw, const QuantSlabKernels* fast) {
  const std::int64_t n_slabs = s.n_rows / slab_tokens(s);
  const std::int64_t n = slab_tokens(s) * s.row_width;
  const std::size_t raw_slab = static_cast<std::size_t>(n) * dtype_size(s.dtype);
  std::vector<float> x;
  const std::byte* src = in.data();
  for (std::int64_t i = 0; i < n_slabs; ++i) {
    const SlabGrid g = slab_grid(q, s, i);
    std::byte* dst = raw.data() + i * raw_slab;
    if (fast == nullptr || !fast->decode(quant_slab(q, s, i), src, dst)) {
      x.resize(static_cast<std::size_t>(n));
      decode_slab(q, g, src, x);
      for (std::int64_t e = 0; e < n; ++e) store_elem(dst, s.dtype, e, x[e]);
    }
    src += slab_bytes(q, g);
  }
}

void encode_with(SpillCodec codec, const BlockShape& s, std::span<const std::byte> raw,
                 std::span<std::byte> out, const QuantSlabKernels* fast) {
  AKV_CHECK(raw.size() == s.raw_bytes() && out.size() == encoded_bytes(codec, s),
            "encode_block sizes");
  const std::int64_t n = s.n_rows * s.row_width;
  switch (codec) {
    case SpillCodec::Native:
      std::memcpy(out.data(), raw.data(), raw.size());
      return;
    case SpillCodec::F32:
      convert(raw, s.dtype, out, DType::F32, n);
      return;
    case SpillCodec::BF16:
      convert(raw, s.dtype, out, DType::BF16, n);
      return;
    case SpillCodec::Int8:
    case SpillCodec::Int4:
      encode_quantized(*quant_spec(codec), s, raw, out, fast);
      return;
  }
}

void decode_with(SpillCodec codec, const BlockShape& s, std::span<const std::byte> in,
                 std::span<std::byte> raw, const QuantSlabKernels* fast) {
  AKV_CHECK(raw.size() == s.raw_bytes() && in.size() == encoded_bytes(codec, s),
            "decode_block sizes");
  const std::int64_t n = s.n_rows * s.row_width;
  switch (codec) {
    case SpillCodec::Native:
      std::memcpy(raw.data(), in.data(), in.size());
      return;
    case SpillCodec::F32:
      convert(in, DType::F32, raw, s.dtype, n);
      return;
    case SpillCodec::BF16:
      convert(in, DType::BF16, raw, s.dtype, n);
      return;
    case SpillCodec::Int8:
    case SpillCodec::Int4:
      decode_quantized(*quant_spec(codec), s, in, raw, fast);
      return;
  }
}

}  // namespace

std::optional<SpillCodec> spill_codec_from_id(std::uint32_t id) {
  for (SpillCodec c :
       {SpillCodec::Native, SpillCodec::F32, SpillCodec::BF16, SpillCodec::Int8, SpillCodec::Int4})
    if (static_cast<std::uint32_t>(c) == id) return c;
  return std::nullopt;
}

std::optional<SpillCodec> find_spill_codec(std::string_view name) {
  for (SpillCodec c :
       {SpillCodec::Native, SpillCodec::F32, SpillCodec::BF16, SpillCodec::Int8, SpillCodec::Int4})
    if (spill_codec_name(c) == name) return c;
  return std::nullopt;
}

std::string_view spill_codec_name(SpillCodec codec) {
  switch (codec) {
    case SpillCodec::Native:
      return "native";
    case SpillCodec::F32:
      return "f32";
    case SpillCodec::BF16:
      return "bf16";
    case SpillCodec::Int8:
      return "int8";
    case SpillCodec::Int4:
      return "int4";
  }
  return "?";
}

std::size_t encoded_bytes(SpillCodec codec, const BlockShape& s) {
  const auto n = static_cast<std::size_t>(s.n_rows * s.row_width);
  switch (codec) {
    case SpillCodec::Native:
      return s.raw_bytes();
    case SpillCodec::F32:
      return n * 4;
    case SpillCodec::BF16:
      return n * 2;
    case SpillCodec::Int8:
    case SpillCodec::Int4:
      return quantized_bytes(*quant_spec(codec), s);
  }
  return 0;
}

void encode_block(SpillCodec codec, const BlockShape& s, std::span<const std::byte> raw,
                  std::span<std::byte> out) {
  encode_with(codec, s, raw, out, fast_kernels());
}

void decode_block(SpillCodec codec, const BlockShape& s, std::span<const std::byte> in,
                  std::span<std::byte> raw) {
  decode_with(codec, s, in, raw, fast_kernels());
}

void encode_block_reference(SpillCodec codec, const BlockShape& s, std::span<const std::byte> raw,
                            std::span<std::byte> out) {
  encode_with(codec, s, raw, out, nullptr);
}

void decode_block_reference(SpillCodec codec, const BlockShape& s, std::span<const std::byte> in,
                            std::span<std::byte> raw) {
  decode_with(codec, s, in, raw, nullptr);
}

std::string_view codec_kernels_name() {
  return fast_kernels() != nullptr ? fast_kernels()->name : "scalar";
}

bool codec_is_raw(SpillCodec codec, DType live) {
  return codec == SpillCodec::Native || (codec == SpillCodec::F32 && live == DType::F32) ||
         (codec == SpillCodec::BF16 && live == DType::BF16);
}

EncodedLayout encoded_layout(SpillCodec codec, const BlockShape& s) {
  EncodedLayout e;
  e.slab_tokens = slab_tokens(s);
  e.n_slabs = s.n_rows / e.slab_tokens;
  e.row_width = s.row_width;
  const QuantSpec* q = quant_spec(codec);
  if (q == nullptr) {
    e.elem_dtype = codec == SpillCodec::Native ? s.dtype
                   : codec == SpillCodec::F32  ? DType::F32
                                               : DType::BF16;
    e.key_bytes = e.value_bytes =
        static_cast<std::size_t>(e.slab_tokens * e.row_width) * dtype_size(e.elem_dtype);
    return e;
  }
  e.bits = q->bits;
  const SlabGrid k = slab_grid(*q, s, 0), v = slab_grid(*q, s, 1);
  e.key_bytes = slab_bytes(*q, k);
  e.value_bytes = slab_bytes(*q, v);
  e.key_group_tokens = k.group_tokens;
  e.key_group_channels = k.group_channels;
  e.value_group_tokens = v.group_tokens;
  e.value_group_channels = v.group_channels;
  return e;
}

}  // namespace akv
