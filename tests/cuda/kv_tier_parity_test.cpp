// The CUDA backend's tier copies against the host codecs: write_kv_blocks decodes every codec
// (native, f32, bf16, int8, int4) into every live KV dtype (F32, BF16, F16) bit for bit as
// decode_block does, and start_read_kv_block_encoded encodes as encode_block does (one block or
// many in one call), to and from mapped page-locked memory (alloc_host: in place) and pageable
// memory (staged); the write fence passes; started reads into mapped memory keep the block as it
// was at the call; and a KvManager with a host tier on the CUDA backend restores a prefix exactly.
#include <cuda_runtime.h>

#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "kv/host_store.h"
#include "kv/kv_manager.h"
#include "parity_util.h"

namespace akv::test {
namespace {

constexpr DType kLiveTypes[] = {DType::F32, DType::BF16, DType::F16};
constexpr SpillCodec kCodecs[] = {SpillCodec::Native, SpillCodec::F32, SpillCodec::BF16, SpillCodec::Int8,
                                  SpillCodec::Int4};

KvLayout layout_for(DType live, std::int64_t head_dim, std::int64_t n_blocks = 8) {
  return {.n_layers = 3, .n_blocks = n_blocks, .block_size = 16, .n_kv_heads = 2, .head_dim = head_dim,
          .dtype = live};
}

// A raw block of finite values of the live dtype, keys with a few outlier channels (what the
// per-channel key groups are for), one constant channel (a group of scale 0).
std::vector<std::byte> random_block(const KvLayout& l) {
  const BlockShape s = block_shape_of(l);
  std::vector<std::byte> raw(s.raw_bytes());
  const std::vector<float> v = random_floats(static_cast<std::size_t>(s.n_rows * s.row_width));
  for (std::int64_t r = 0; r < s.n_rows; ++r)
    for (std::int64_t c = 0; c < s.row_width; ++c) {
      const std::int64_t i = r * s.row_width + c;
      float x = v[static_cast<std::size_t>(i)];
      if (c % 37 == 5) x *= 20.0f;
      if (c == 3) x = 0.75f;
      store_f32(raw.data(), l.dtype, i, x);
    }
  return raw;
}

// random_block with a channel of -0 (a key group the host fits as +0) and a channel of NaNs (a
// key group of NaNs; its values' groups keep their other channels' range).
std::vector<std::byte> block_with_signed_zeros_and_nans(const KvLayout& l) {
  std::vector<std::byte> raw = random_block(l);
  const BlockShape s = block_shape_of(l);
  for (std::int64_t r = 0; r < s.n_rows; ++r) {
    store_f32(raw.data(), l.dtype, r * s.row_width + 4, -0.0f);
    store_f32(raw.data(), l.dtype, r * s.row_width + 6, std::numeric_limits<float>::quiet_NaN());
  }
  return raw;
}

std::string what(SpillCodec codec, DType live, std::int64_t head_dim) {
  return std::string(spill_codec_name(codec)) + " into " + std::string(dtype_name(live)) + ", head_dim " +
         std::to_string(head_dim);
}

// Waits (bounded) for a write_kv_blocks fence.
bool wait_fence(CudaBackend& gpu, std::uint64_t fence) {
  for (int i = 0; i < 2000; ++i) {
    if (gpu.kv_writes_done(fence)) return true;
    gpu.synchronize();
  }
  return false;
}

// Queues a few ms of GEMMs, so copies issued next wait behind them (a missing dependency shows).
void keep_gpu_busy() {
  Backends& b = backends();
  static const auto x = b.gpu.alloc(DType::F32, 2048, 4096), w = b.gpu.alloc(DType::F32, 4096, 4096),
                    out = b.gpu.alloc(DType::F32, 2048, 4096);
  const WeightRef weight{w->tensor().data, DType::F32, 4096, 4096};
  for (int i = 0; i < 4; ++i) b.gpu.matmul(x->tensor(), weight, nullptr, out->tensor());
}

TEST(CudaKvTiers, WriteKvBlocksDecodesLikeTheHostForEveryCodecAndDtype) {
  AKV_SKIP_WITHOUT_CUDA();
  CudaBackend& gpu = backends().gpu;
  const std::int32_t dst[] = {6, 1, 3};  // out of order, not contiguous
  for (std::int64_t head_dim : {64, 128})
    for (DType live : kLiveTypes) {
      const KvLayout l = layout_for(live, head_dim);
      const BlockShape shape = block_shape_of(l);
      KvStorage kv = gpu.alloc_kv(l);
      for (SpillCodec codec : kCodecs) {
        const std::size_t enc_bytes = encoded_bytes(codec, shape);
        std::vector<std::vector<std::byte>> want;
        std::unique_ptr<HostMemory> pinned = gpu.alloc_host(3 * enc_bytes);
        std::vector<std::byte> pageable(3 * enc_bytes);
        for (int i = 0; i < 3; ++i) {
          const std::vector<std::byte> raw = random_block(l);
          const std::span<std::byte> enc = pinned->bytes().subspan(i * enc_bytes, enc_bytes);
          encode_block(codec, shape, raw, enc);
          std::memcpy(pageable.data() + i * enc_bytes, enc.data(), enc_bytes);
          want.emplace_back(shape.raw_bytes());
          decode_block(codec, shape, enc, want.back());
        }
        for (bool mapped : {true, false}) {
          const std::byte* base = mapped ? pinned->bytes().data() : pageable.data();
          std::vector<EncodedKvBlock> blocks;
          for (int i = 0; i < 3; ++i)
            blocks.push_back({.block = dst[i], .codec = codec, .bytes = {base + i * enc_bytes, enc_bytes}});
          // Block 2 (never written here) keeps a known pattern: nothing writes past its block.
          std::vector<std::byte> guard(shape.raw_bytes(), std::byte{0x5a}), back(shape.raw_bytes());
          gpu.write_kv_block(kv, 2, guard);
          keep_gpu_busy();
          const std::uint64_t fence = gpu.write_kv_blocks(kv, blocks);
          if (!mapped) std::fill(pageable.begin(), pageable.end(), std::byte{0});  // staged: free on return
          for (int i = 0; i < 3; ++i) {
            gpu.read_kv_block(kv, dst[i], back);
            EXPECT_EQ(std::memcmp(back.data(), want[i].data(), back.size()), 0)
                << what(codec, live, head_dim) << (mapped ? " mapped" : " staged") << " block " << i;
          }
          gpu.read_kv_block(kv, 2, back);
          EXPECT_EQ(back, guard) << what(codec, live, head_dim);
          EXPECT_TRUE(wait_fence(gpu, fence)) << what(codec, live, head_dim);
          if (!mapped)  // restore the pageable copy for the next round
            for (int i = 0; i < 3; ++i)
              std::memcpy(pageable.data() + i * enc_bytes, pinned->bytes().data() + i * enc_bytes, enc_bytes);
        }
      }
    }
}

// Demotions encode on the device: start_read_kv_block_encoded gives encode_block's bytes exactly,
// into mapped memory (in place) and pageable memory (staged), for blocks written right before
// behind queued work and overwritten right after the call.
TEST(CudaKvTiers, StartedEncodedReadsMatchTheHostEncoder) {
  AKV_SKIP_WITHOUT_CUDA();
  CudaBackend& gpu = backends().gpu;
  for (std::int64_t head_dim : {64, 128})
    for (DType live : kLiveTypes) {
      const KvLayout l = layout_for(live, head_dim);
      const BlockShape shape = block_shape_of(l);
      KvStorage kv = gpu.alloc_kv(l);
      for (SpillCodec codec : kCodecs) {
        const std::size_t enc_bytes = encoded_bytes(codec, shape);
        for (bool mapped : {true, false}) {
          std::unique_ptr<HostMemory> pinned = gpu.alloc_host(4 * enc_bytes);
          std::vector<std::byte> pageable(4 * enc_bytes);
          std::byte* base = mapped ? pinned->bytes().data() : pageable.data();
          std::fill(base, base + 4 * enc_bytes, std::byte{0xEE});
          std::vector<std::vector<std::byte>> want;
          keep_gpu_busy();
          for (std::int32_t b = 0; b < 4; ++b) {
            const std::vector<std::byte> raw = random_block(l);
            gpu.write_kv_block(kv, b + 2, raw);
            want.emplace_back(enc_bytes);
            encode_block(codec, shape, raw, want.back());
            gpu.start_read_kv_block_encoded(kv, b + 2, codec, {base + b * enc_bytes, enc_bytes});
            gpu.write_kv_block(kv, b + 2, random_block(l));  // later writes do not show
          }
          gpu.finish_reads();
          for (std::int32_t b = 0; b < 4; ++b)
            EXPECT_EQ(std::memcmp(base + b * enc_bytes, want[b].data(), enc_bytes), 0)
                << what(codec, live, head_dim) << (mapped ? " mapped" : " staged") << " block " << b;
        }
      }
    }
}

// The batched demotion: start_read_kv_blocks_encoded of N = 1, 3 and 64 scattered blocks gives,
// byte for byte, what N start_read_kv_block_encoded calls give and encode_block's bytes, into
// mapped memory (one launch; also at odd addresses), pageable memory (staging slots, several
// blocks a slot) and both mixed in one call, for blocks written right before behind queued work
// and overwritten right after the call; with int8 and int4 every other block has a channel of -0
// and one of NaNs.
TEST(CudaKvTiers, BatchedEncodedReadsEqualSingleCalls) {
  AKV_SKIP_WITHOUT_CUDA();
  CudaBackend& gpu = backends().gpu;
  // MappedOdd: mapped, every span 1 byte past an aligned address (the kernels' narrow stores).
  enum class Memory { Mapped, MappedOdd, Pageable, Mixed };
  for (DType live : kLiveTypes) {
    const KvLayout l = layout_for(live, 128, 130);
    const BlockShape shape = block_shape_of(l);
    KvStorage kv = gpu.alloc_kv(l);
    for (SpillCodec codec : kCodecs)
      for (std::size_t n : {1u, 3u, 64u})
        for (Memory memory : {Memory::Mapped, Memory::MappedOdd, Memory::Pageable, Memory::Mixed}) {
          const std::size_t enc = encoded_bytes(codec, shape);
          const std::size_t shift = memory == Memory::MappedOdd ? 1 : 0;
          std::unique_ptr<HostMemory> pinned = gpu.alloc_host(2 * n * enc + shift);
          std::vector<std::byte> pageable(2 * n * enc);
          std::fill(pinned->bytes().begin(), pinned->bytes().end(), std::byte{0xEE});
          std::fill(pageable.begin(), pageable.end(), std::byte{0xDD});
          // Block i's batched bytes at 2i, its single call's at 2i + 1, in mapped or pageable memory.
          auto at = [&](std::size_t i, std::size_t which) {
            const bool mapped = memory == Memory::Mapped || memory == Memory::MappedOdd ||
                                (memory == Memory::Mixed && i % 2 == which % 2);
            std::byte* base = mapped ? pinned->bytes().data() + shift : pageable.data();
            return std::span<std::byte>(base + (2 * i + which) * enc, enc);
          };
          std::vector<std::int32_t> ids;
          std::vector<std::vector<std::byte>> want;
          std::vector<std::span<std::byte>> batched;
          keep_gpu_busy();
          for (std::size_t i = 0; i < n; ++i) {
            ids.push_back(static_cast<std::int32_t>((i * 37 + 5) % 130));
            const bool quantized = codec == SpillCodec::Int8 || codec == SpillCodec::Int4;
            const std::vector<std::byte> raw =
                quantized && i % 2 == 1 ? block_with_signed_zeros_and_nans(l) : random_block(l);
            gpu.write_kv_block(kv, ids.back(), raw);
            want.emplace_back(enc);
            encode_block(codec, shape, raw, want.back());
            batched.push_back(at(i, 0));
          }
          gpu.start_read_kv_blocks_encoded(kv, ids, codec, batched);
          for (std::size_t i = 0; i < n; ++i) gpu.start_read_kv_block_encoded(kv, ids[i], codec, at(i, 1));
          for (std::int32_t id : ids) gpu.write_kv_block(kv, id, random_block(l));  // later writes do not show
          gpu.finish_reads();
          const char* names[] = {" mapped", " mapped, odd addresses", " pageable", " mixed"};
          const std::string where =
              what(codec, live, 128) + " n " + std::to_string(n) + names[static_cast<int>(memory)];
          for (std::size_t i = 0; i < n; ++i) {
            ASSERT_EQ(std::memcmp(at(i, 0).data(), want[i].data(), enc), 0) << where << " block " << i << " batched";
            ASSERT_EQ(std::memcmp(at(i, 1).data(), at(i, 0).data(), enc), 0) << where << " block " << i << " single";
          }
        }
  }
}

// Blocks of different codecs in one call (host-tier slots and a background load's raw blocks),
// and many blocks in one launch.
TEST(CudaKvTiers, WriteKvBlocksMixesCodecsAndManyBlocks) {
  AKV_SKIP_WITHOUT_CUDA();
  CudaBackend& gpu = backends().gpu;
  const KvLayout l = layout_for(DType::BF16, 128, 300);
  const BlockShape shape = block_shape_of(l);
  KvStorage kv = gpu.alloc_kv(l);
  const std::size_t int8_bytes = encoded_bytes(SpillCodec::Int8, shape);
  std::unique_ptr<HostMemory> pinned = gpu.alloc_host(300 * int8_bytes);
  std::vector<std::byte> raw_native(shape.raw_bytes());
  std::vector<std::vector<std::byte>> want(300);
  std::vector<EncodedKvBlock> blocks;
  for (std::int32_t b = 0; b < 300; ++b) {
    const std::vector<std::byte> raw = random_block(l);
    want[b].resize(shape.raw_bytes());
    if (b == 150) {  // one pageable native block in the middle
      raw_native = raw;
      want[b] = raw;
      blocks.push_back({.block = 299 - b, .codec = SpillCodec::Native, .bytes = raw_native});
      continue;
    }
    const std::span<std::byte> enc = pinned->bytes().subspan(b * int8_bytes, int8_bytes);
    encode_block(SpillCodec::Int8, shape, raw, enc);
    decode_block(SpillCodec::Int8, shape, enc, want[b]);
    blocks.push_back({.block = 299 - b, .codec = SpillCodec::Int8, .bytes = enc});
  }
  const std::uint64_t first = gpu.write_kv_blocks(kv, blocks);
  const std::uint64_t second = gpu.write_kv_blocks(kv, std::span(blocks).first(1));
  EXPECT_GT(second, first);
  std::vector<std::byte> back(shape.raw_bytes());
  for (std::int32_t b = 0; b < 300; ++b) {
    gpu.read_kv_block(kv, 299 - b, back);
    ASSERT_EQ(std::memcmp(back.data(), want[b].data(), back.size()), 0) << "block " << b;
  }
  EXPECT_TRUE(wait_fence(gpu, second));
  EXPECT_TRUE(gpu.kv_writes_done(first));
}

// A started read into mapped memory (a demotion straight into its host slot) holds the block as
// it was at the call, though write_kv_blocks overwrites the block right after, behind queued work.
TEST(CudaKvTiers, StartedReadsIntoMappedMemoryKeepTheBlockAsAtTheCall) {
  AKV_SKIP_WITHOUT_CUDA();
  CudaBackend& gpu = backends().gpu;
  for (DType live : kLiveTypes) {
    const KvLayout l = layout_for(live, 128);
    const BlockShape shape = block_shape_of(l);
    const std::size_t n = shape.raw_bytes();
    KvStorage kv = gpu.alloc_kv(l);
    std::vector<std::vector<std::byte>> before, after;
    for (std::int32_t b = 0; b < 4; ++b) {
      before.push_back(random_block(l));
      after.push_back(random_block(l));
      gpu.write_kv_block(kv, b, before.back());
    }
    std::unique_ptr<HostMemory> slots = gpu.alloc_host(4 * n);
    std::fill(slots->bytes().begin(), slots->bytes().end(), std::byte{0xEE});
    keep_gpu_busy();
    for (std::int32_t b = 0; b < 4; ++b) {
      gpu.start_read_kv_block(kv, b, slots->bytes().subspan(b * n, n));
      const EncodedKvBlock w{.block = b, .codec = SpillCodec::Native, .bytes = after[b]};
      gpu.write_kv_blocks(kv, {&w, 1});
    }
    gpu.finish_reads();
    std::vector<std::byte> back(n);
    for (std::int32_t b = 0; b < 4; ++b) {
      EXPECT_EQ(std::memcmp(slots->bytes().data() + b * n, before[b].data(), n), 0) << dtype_name(live) << " " << b;
      gpu.read_kv_block(kv, b, back);
      EXPECT_EQ(back, after[b]) << dtype_name(live) << " " << b;
    }
  }
}

// The whole host-tier path on the CUDA backend: device evictions demote into page-locked slots,
// a match restores the prefix through write_kv_blocks from them, and the restored KV equals the
// codec's round trip of what was computed (exact for native), also for the blocks that match
// demoted from the very device blocks it restored into.
TEST(CudaKvTiers, KvManagerRestoresAPrefixFromTheHostTierOnTheDevice) {
  AKV_SKIP_WITHOUT_CUDA();
  CudaBackend& gpu = backends().gpu;
  for (DType live : {DType::F32, DType::BF16})
    for (SpillCodec codec : {SpillCodec::Native, SpillCodec::Int8, SpillCodec::Int4}) {
      const KvLayout l = layout_for(live, 128, 6);
      const BlockShape shape = block_shape_of(l);
      KvStorage kv = gpu.alloc_kv(l);
      HostStoreOptions h;
      h.max_bytes = 16 * encoded_bytes(codec, shape);
      h.codec = codec;
      h.shape = shape;
      h.block_size = static_cast<std::int32_t>(l.block_size);
      h.alloc = [&gpu](std::size_t bytes) { return gpu.alloc_host(bytes); };
      HostStore host(h);
      KvManager m(static_cast<std::int32_t>(l.n_blocks), static_cast<std::int32_t>(l.block_size),
                  KvManager::backend_copier(gpu, kv));
      m.attach_tiers({.host = &host}, KvBlockIo::for_backend(gpu, kv));
      auto run = [&](const std::vector<std::int32_t>& tokens, std::vector<std::vector<std::byte>>* computed) {
        KvSequence seq;
        const std::int32_t hit = m.match(seq, tokens, "");
        const auto n = static_cast<std::int32_t>(tokens.size());
        EXPECT_TRUE(m.allocate(seq, n));
        for (std::int32_t b = hit / 16; b * 16 < n; ++b) {
          std::vector<std::byte> raw = random_block(l);
          gpu.write_kv_block(kv, seq.block_table()[b], raw);
          if (computed != nullptr) computed->push_back(std::move(raw));
        }
        m.commit(seq, tokens, n);
        m.release(seq);
        return hit;
      };
      std::vector<std::int32_t> a(3 * 16 + 1), other(6 * 16);
      std::iota(a.begin(), a.end(), 100);
      std::iota(other.begin(), other.end(), 5000);
      std::vector<std::vector<std::byte>> computed, computed_other;
      run(a, &computed);
      run(other, &computed_other);  // takes the whole device: a's 3 blocks go to the host tier
      ASSERT_EQ(host.stats().n_blocks, 3) << what(codec, live, 128);
      KvSequence seq;
      ASSERT_EQ(m.match(seq, a, ""), 48) << what(codec, live, 128);
      EXPECT_EQ(seq.n_host_restored_blocks(), 3);
      std::vector<std::byte> back(shape.raw_bytes()), want(shape.raw_bytes()),
          enc(encoded_bytes(codec, shape));
      for (int b = 0; b < 3; ++b) {
        encode_block(codec, shape, computed[b], enc);
        decode_block(codec, shape, enc, want);
        gpu.read_kv_block(kv, seq.block_table()[b], back);
        EXPECT_EQ(back, want) << what(codec, live, 128) << " block " << b;
      }
      m.release(seq);
      // That match took other's tail blocks, demoting them and restoring a into them in one call:
      // their host copies are other's blocks.
      KvSequence again;
      ASSERT_EQ(m.match(again, other, ""), 80) << what(codec, live, 128);
      EXPECT_EQ(again.n_host_restored_blocks(), 2);
      for (int b = 3; b < 5; ++b) {
        encode_block(codec, shape, computed_other[b], enc);
        decode_block(codec, shape, enc, want);
        gpu.read_kv_block(kv, again.block_table()[b], back);
        EXPECT_EQ(back, want) << what(codec, live, 128) << " other's block " << b;
      }
      m.release(again);
      gpu.synchronize();
    }
}

}  // namespace
}  // namespace akv::test
