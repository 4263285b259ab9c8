// Attention for chunks over a long cached context against the scalar reference: short chunks
// (several tokens per split-K block on the tensor cores) and medium ones (prefill tiles with
// their keys split), the switch back to the earlier kernels (CudaBackend::set_chunk_attention),
// and head_dim 256 on the prefill kernel.
#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "attention_util.h"
#include "backend/cuda/kernels.h"
#include "parity_util.h"

namespace akv::test {
namespace {

// Heads of an attention case: query heads, KV heads (GQA group = h / kv), head_dim.
struct AttnHeads {
  std::int64_t h, kv, d;
};
std::string heads_name(DType kvt, const AttnHeads& hd, std::int64_t window, double cap) {
  return std::string(dtype_name(kvt)) + " heads " + std::to_string(hd.h) + "/" + std::to_string(hd.kv) + " d " +
         std::to_string(hd.d) + " window " + std::to_string(window) + " cap " + std::to_string(cap);
}

// Chunks of 2-15 tokens after 1K-16K cached ones (with a decode token in the same batch): on
// BF16 KV of head_dim 64/128 with GQA groups of 2, 4, 8 the tensor-core split kernel takes
// 16 / heads-per-block tokens per block, each row masking the keys past its own position; the
// f32 path and odd groups keep one token per block. Both keep the decode kernels' precision.
TEST(CudaOps, AttentionShortChunksLongContext) {
  AKV_SKIP_WITHOUT_CUDA();
  // Token groups that end mid-chunk, chunks shorter than a group, a decode token, and the
  // measured case (10 tokens after 16,000).
  const std::vector<SeqSpec> mixed = {{16000, 6}, {1023, 2}, {5000, 7}, {9000, 1}, {2050, 15}};
  const std::vector<SeqSpec> ten = {{16000, 10}};
  const std::vector<SeqSpec> windowed = {{16000, 13}, {3000, 3}, {1100, 15}, {8000, 1}};
  // The reference walks every key of every token in double: the whole-context cases are kept
  // few (the f32 kernel is the unchanged one-token-a-block path: two head shapes of it).
  for (DType kvt : {DType::BF16, DType::F32}) {
    for (AttnHeads hd : {AttnHeads{8, 2, 128}, AttnHeads{16, 2, 128}, AttnHeads{8, 4, 64}, AttnHeads{4, 4, 128},
                         AttnHeads{8, 1, 64}, AttnHeads{4, 1, 64}, AttnHeads{6, 2, 128}}) {
      if (kvt == DType::BF16 || hd.kv == 4) {
        EXPECT_LE(attention_error(kvt, hd.h, hd.kv, hd.d, 0, 0.0, mixed), 1e-5) << heads_name(kvt, hd, 0, 0.0);
      }
      for (const auto& [window, cap] : {std::pair<std::int64_t, double>{37, 0.0}, {1000, 30.0}})
        EXPECT_LE(attention_error(kvt, hd.h, hd.kv, hd.d, window, cap, windowed), 1e-5)
            << heads_name(kvt, hd, window, cap);
    }
    EXPECT_LE(attention_error(kvt, 8, 2, 128, 0, 0.0, ten), 1e-5) << dtype_name(kvt) << " 10 tokens after 16000";
    EXPECT_LE(attention_error(kvt, 8, 2, 128, 0, 30.0, ten), 1e-5) << dtype_name(kvt) << " 10 tokens, cap";
  }
}

// Chunks of 16-512 tokens after 1K-16K cached ones: the prefill kernels with their keys split
// (few tiles x head groups: the small head counts here split even short contexts) and merged.
// wgmma for even groups on sm_90, mma.sync for odd groups (and every group elsewhere).
TEST(CudaOps, AttentionMediumChunksLongContext) {
  AKV_SKIP_WITHOUT_CUDA();
  const std::vector<SeqSpec> mixed = {{16000, 16}, {1000, 64}, {7000, 17}, {3000, 1}};
  const std::vector<SeqSpec> long_chunks = {{2500, 351}, {12000, 20}};
  const std::vector<SeqSpec> tiles = {{2000, 512}};
  const std::vector<SeqSpec> windowed = {{16000, 200}, {5000, 130}, {1500, 64}};
  struct Case {
    AttnHeads hd;
    std::vector<const std::vector<SeqSpec>*> batches;
    bool windows;  // also the windowed batch (with and without softcap)
  };
  const std::vector<Case> cases = {
      {{4, 1, 128}, {&mixed, &long_chunks}, true},         // wgmma, 4 heads a block
      {{2, 1, 64}, {&mixed, &long_chunks, &tiles}, true},  // wgmma, 2 heads a block
      {{8, 1, 128}, {&mixed}, false},                      // group 8
      {{3, 1, 64}, {&mixed, &tiles}, true},                // mma.sync, one head a block
      {{2, 2, 128}, {&mixed}, false},                      // group 1, mma.sync
      {{8, 4, 64}, {&mixed}, false},                       // group 2 over 4 KV heads
  };
  for (const Case& c : cases) {
    for (const std::vector<SeqSpec>* batch : c.batches)
      EXPECT_LE(attention_error(DType::BF16, c.hd.h, c.hd.kv, c.hd.d, 0, 0.0, *batch), 1e-2)
          << heads_name(DType::BF16, c.hd, 0, 0.0) << " chunks " << batch->size();
    if (!c.windows) continue;
    for (const auto& [window, cap] : {std::pair<std::int64_t, double>{100, 0.0}, {1000, 30.0}})
      EXPECT_LE(attention_error(DType::BF16, c.hd.h, c.hd.kv, c.hd.d, window, cap, windowed), 1e-2)
          << heads_name(DType::BF16, c.hd, window, cap);
  }
  // F32 KV: the CUDA-core kernel, one token a block, over the same batch.
  EXPECT_LE(attention_error(DType::F32, 4, 1, 128, 0, 0.0, mixed), 1e-5) << "f32 mixed";
}

// The same chunks with the chunk paths off (one token a block, unsplit prefill tiles) and on
// agree: the bench's before/after switch compares two correct paths.
TEST(CudaOps, AttentionChunkPathsSwitch) {
  AKV_SKIP_WITHOUT_CUDA();
  const std::vector<SeqSpec> short_chunks = {{3000, 9}, {700, 2}};
  const std::vector<SeqSpec> medium = {{3000, 100}};
  CudaBackend& gpu = backends().gpu;
  for (bool on : {false, true}) {
    gpu.set_chunk_attention(on);
    EXPECT_LE(attention_error(DType::BF16, 8, 2, 128, 0, 0.0, short_chunks), 1e-5) << "chunk paths " << on;
    EXPECT_LE(attention_error(DType::BF16, 8, 2, 128, 0, 0.0, medium), 1e-2) << "chunk paths " << on;
  }
  gpu.set_chunk_attention(true);
}

// Head_dim 256 (Qwen3.5 / Qwen3-Next full attention) on the mma.sync prefill kernel (16 query
// rows a warp, one block an SM), BF16 KV, against the double reference: GQA groups 1, 2, 4 and 8
// on one batch of four chunks (200 tokens from position 0; 64, 17 and 1 after 300, 90 and 500
// cached), 1,000 tokens from position 0, a chunk after 2,000 cached tokens whose one tile splits
// its keys (split-K and the merge), Qwen3.5-9B's 16 / 4 heads, a window and a softcap. The
// reference walks every key in double, so the cases are kept to ~0.7G multiply-adds. Same
// tolerance as the 64/128 tiles (q and P rounded to bf16: ~2e-3 relative in cuda_bench). The
// CUDA-core path the backend falls back to (set_prefill_attention_d256(false)) keeps its f32
// precision.
TEST(CudaOps, AttentionPrefillHeadDim256) {
  AKV_SKIP_WITHOUT_CUDA();
  int dev = 0, optin = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), cudaSuccess);
  if (optin < 165 * 1024) GTEST_SKIP() << "head_dim 256 prefill needs 165 KB of shared memory a block";
  EXPECT_TRUE(cuda::prefill_attention_supported(DType::BF16, 256));
  const std::vector<SeqSpec> mixed = {{0, 200}, {300, 64}, {90, 17}, {500, 1}};
  const std::vector<SeqSpec> long_chunk = {{0, 1000}};
  const std::vector<SeqSpec> split = {{2000, 64}};
  const std::vector<SeqSpec> cached = {{300, 64}};
  for (const AttnHeads& hd : {AttnHeads{2, 2, 256}, AttnHeads{4, 2, 256}, AttnHeads{4, 1, 256}, AttnHeads{8, 1, 256}})
    EXPECT_LE(note_error(attention_error(DType::BF16, hd.h, hd.kv, hd.d, 0, 0.0, mixed)), 1e-2)
        << heads_name(DType::BF16, hd, 0, 0.0);
  EXPECT_LE(note_error(attention_error(DType::BF16, 1, 1, 256, 0, 0.0, long_chunk)), 1e-2) << "1000 tokens";
  EXPECT_LE(note_error(attention_error(DType::BF16, 4, 1, 256, 0, 0.0, split)), 1e-2) << "after 2000: split-K";
  EXPECT_LE(note_error(attention_error(DType::BF16, 16, 4, 256, 0, 0.0, cached)), 1e-2) << "16 / 4 heads";
  for (const auto& [window, cap] : {std::pair<std::int64_t, double>{100, 0.0}, {0, 30.0}})
    EXPECT_LE(note_error(attention_error(DType::BF16, 4, 2, 256, window, cap, mixed)), 1e-2)
        << "window " << window << " cap " << cap;
  CudaBackend& gpu = backends().gpu;
  gpu.set_prefill_attention_d256(false);
  EXPECT_LE(attention_error(DType::BF16, 4, 1, 256, 0, 0.0, mixed), 1e-5) << "CUDA-core path";
  gpu.set_prefill_attention_d256(true);
}

}  // namespace
}  // namespace akv::test
