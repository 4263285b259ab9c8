// Hybrid linear-attention models on the CUDA backend: the ops (output gate, short causal conv
// token by token and tiled, gated delta rule) against the scalar reference on a batch of chunks
// that start fresh or continue a state in their slots (the delta rule token by token and in chunks
// of 64, the chunks' products in f32 FMA and on the tensor cores), and the Qwen3.5 / Qwen3-Next
// fixtures' logits against their fp64 references (a 100-token prefill, chunked, then decode steps:
// recorded CUDA graphs, the MoE models' routing on the device through Backend::moe). The output
// gate also in its one-gate-per-row form (a MoE block's shared expert). The fixtures run loaded
// from their checkpoints and from their f32 GGUF conversions (tests/models/testdata/gguf).
#include "models/model.h"
#include "../engine/engine_test_util.h"
#include "../models/gguf_test_util.h"
#include "parity_util.h"

namespace akv::test {
namespace {

struct HeadDims {
  std::int64_t n_k_heads, n_v_heads, k_head_dim, v_head_dim;
};

// State-only storage (no KV layers) with 4 slots on one backend.
KvStorage state_storage(Backend& b, const HeadDims& d = {2, 4, 32, 24}) {
  KvStorage kv = b.alloc_kv(KvLayout{});
  alloc_state_arrays(b, kv,
                     {.n_layers = 1,
                      .n_slots = 4,
                      .conv_rows = 3,
                      .conv_channels = 2 * d.n_k_heads * d.k_head_dim + d.n_v_heads * d.v_head_dim,
                      .n_k_heads = d.n_k_heads,
                      .n_v_heads = d.n_v_heads,
                      .k_head_dim = d.k_head_dim,
                      .v_head_dim = d.v_head_dim});
  return kv;
}

// Three chunks: slot 2 fresh (start 0, 9 tokens), slot 0 continuing at 17 (1 token), slot 3
// continuing at 40 (5 tokens).
struct Chunks {
  std::vector<SequenceChunk> seqs{
      {.first_row = 0, .n_tokens = 9, .start_pos = 0, .block_table = {}, .state_slot = 2},
      {.first_row = 9, .n_tokens = 1, .start_pos = 17, .block_table = {}, .state_slot = 0},
      {.first_row = 10, .n_tokens = 5, .start_pos = 40, .block_table = {}, .state_slot = 3}};
  std::vector<std::int32_t> tokens = std::vector<std::int32_t>(15, 1),
                            positions = std::vector<std::int32_t>(15, 0);
  ForwardBatch batch() const {
    return {.tokens = tokens, .positions = positions, .sequences = seqs, .logit_rows = {}};
  }
};

std::vector<float> all_state(Backend& b, const KvStorage& kv) {
  std::vector<float> out;
  for (std::int32_t slot = 0; slot < kv.state.n_slots; ++slot) {
    std::vector<float> s(static_cast<std::size_t>(kv.state.slot_floats()));
    read_state_slot(b, kv, slot, s);
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

void random_states(KvStorage& cpu, KvStorage& gpu, KvStorage* gpu2 = nullptr) {
  for (std::int32_t slot = 0; slot < cpu.state.n_slots; ++slot) {
    const std::vector<float> s =
        random_floats(static_cast<std::size_t>(cpu.state.slot_floats()), 0.3f);
    write_state_slot(backends().ref, cpu, slot, s);
    write_state_slot(backends().gpu, gpu, slot, s);
    if (gpu2 != nullptr) write_state_slot(backends().gpu, *gpu2, slot, s);
  }
}

TEST(HybridOps, SigmoidMul) {
  AKV_SKIP_WITHOUT_CUDA();
  Pair x = Pair::random(7, 96, 8), g = Pair::random(7, 96, 4, 3.0f);
  backends().ref.sigmoid_mul(x.cpu, g.cpu);
  backends().gpu.sigmoid_mul(x.gpu, g.gpu);
  EXPECT_LE(x.error(), 1e-6);
}

TEST(HybridOps, SigmoidMulOneGatePerRow) {
  AKV_SKIP_WITHOUT_CUDA();
  Pair x = Pair::random(7, 96, 8), g = Pair::random(7, 1, 4, 3.0f);
  backends().ref.sigmoid_mul(x.cpu, g.cpu);
  backends().gpu.sigmoid_mul(x.gpu, g.gpu);
  EXPECT_LE(x.error(), 1e-6);
}

TEST(HybridOps, CausalConvContinuesEachSlot) {
  AKV_SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::F32, DType::BF16}) {
    KvStorage cpu = state_storage(backends().ref), gpu = state_storage(backends().gpu);
    random_states(cpu, gpu);
    const std::int64_t C = cpu.state.conv_channels;
    auto w = WeightPair::random(dtype, C, 4, 0.5f);
    Pair x = Pair::random(15, C, 16);
    const Chunks c;
    backends().ref.causal_conv1d(x.cpu, w->cpu, cpu, 0, c.batch());
    backends().gpu.causal_conv1d(x.gpu, w->gpu, gpu, 0, c.batch());
    EXPECT_LE(x.error(), 1e-5) << dtype_name(dtype);
    EXPECT_LE(note_error(rel_error(all_state(backends().gpu, gpu), all_state(backends().ref, cpu))),
              1e-6);
  }
}

// The tiled convolution (prefill: every tile of 16 tokens at once, its window of earlier inputs
// copied first) against the scalar reference and the token-by-token kernel, on two sequences:
// slot 2 fresh and slot 0 continuing its state at position 300, n tokens each (fewer than, as
// many as and more than the 3 state rows; one tile and many; 224 channels, a partial block).
// Both kernels sum the same f32 terms in the same order, so they agree to rounding of the
// exponential at most; against the reference the existing kernel's 1e-5 / 1e-6.
TEST(HybridOps, CausalConvTiledMatchesOracle) {
  AKV_SKIP_WITHOUT_CUDA();
  CudaBackend& gpu = backends().gpu;
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (const std::int32_t n : {1, 3, 4, 5, 17, 64, 1000}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n " << n);
      KvStorage cpu = state_storage(backends().ref), tiled = state_storage(gpu), serial = state_storage(gpu);
      random_states(cpu, tiled, &serial);
      const std::int64_t C = cpu.state.conv_channels, rows = 2 * n;
      auto w = WeightPair::random(dtype, C, 4, 0.5f);
      const std::vector<float> values = random_floats(static_cast<std::size_t>(rows * C));
      Pair x = Pair::make(rows, C, 16), x_serial = Pair::make(rows, C);
      x.set(values);
      x_serial.set(values);
      const std::vector<SequenceChunk> seqs{
          {.first_row = 0, .n_tokens = n, .start_pos = 0, .block_table = {}, .state_slot = 2},
          {.first_row = n, .n_tokens = n, .start_pos = 300, .block_table = {}, .state_slot = 0}};
      const std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows), 1), positions(tokens.size(), 0);
      const ForwardBatch batch{.tokens = tokens, .positions = positions, .sequences = seqs, .logit_rows = {}};
      backends().ref.causal_conv1d(x.cpu, w->cpu, cpu, 0, batch);
      gpu.set_conv1d_tile_min_tokens(1);
      gpu.causal_conv1d(x.gpu, w->gpu, tiled, 0, batch);
      gpu.set_conv1d_tile_min_tokens(INT32_MAX);
      gpu.causal_conv1d(x_serial.gpu, w->gpu, serial, 0, batch);
      gpu.set_conv1d_tile_min_tokens(cuda::kConvTileMinTokens);
      const std::vector<float> got_state = all_state(gpu, tiled);
      EXPECT_LE(x.error(), 1e-5);
      EXPECT_LE(note_error(rel_error(got_state, all_state(backends().ref, cpu))), 1e-6);
      EXPECT_LE(note_error(rel_error(x.get_gpu(), x_serial.get_gpu())), 1e-6);
      EXPECT_LE(note_error(rel_error(got_state, all_state(gpu, serial))), 1e-7);
    }
  }
}

TEST(HybridOps, GatedDeltaRuleContinuesEachSlot) {
  AKV_SKIP_WITHOUT_CUDA();
  KvStorage cpu = state_storage(backends().ref), gpu = state_storage(backends().gpu);
  random_states(cpu, gpu);
  const StateLayout& st = cpu.state;
  Pair qkv = Pair::random(15, st.conv_channels, 8), a = Pair::random(15, 4),
       b = Pair::random(15, 4, 2);
  Pair out = Pair::make(15, 4 * 24, 6);
  auto a_log = WeightPair::random(DType::F32, 1, 4, 1.0f, true),
       dt_bias = WeightPair::random(DType::F32, 1, 4, 1.0f, true);
  const Chunks c;
  backends().ref.gated_delta_rule(qkv.cpu, a.cpu, b.cpu, a_log->cpu, dt_bias->cpu, cpu, 0,
                                  c.batch(), out.cpu);
  backends().gpu.gated_delta_rule(qkv.gpu, a.gpu, b.gpu, a_log->gpu, dt_bias->gpu, gpu, 0,
                                  c.batch(), out.gpu);
  EXPECT_LE(out.error(), 1e-5);
  EXPECT_LE(note_error(rel_error(all_state(backends().gpu, gpu), all_state(backends().ref, cpu))),
            1e-5);
}

// The chunked kernels (delta_rule_chunked.cu, their products in `math`) against the scalar
// reference (token by token in double) and against the token-by-token kernel, on a batch of two
// sequences: slot 2 fresh with n tokens, slot 0 continuing its state at position 300 with n + 3
// (a different split into chunks of 64). n covers one token, a chunk short of, at and past 64,
// and many chunks; head dims from the fixtures' 16 to Qwen3.5's 128 and a v_dim that is no
// multiple of the 32-column tile (there with qkv's rows not 16-byte aligned); decays fast
// (a ~ N(0, 1): about e^-1 a token) and slow (a - 6: the state spans thousands of tokens).
// `tol` bounds out and state against both. Returns the
// largest out difference to the FMA form over the cases.
double check_chunked_delta_rule(cuda::DeltaChunkMath math, double tol) {
  CudaBackend& gpu = backends().gpu;
  double most_from_fma = 0.0;
  for (const HeadDims d : {HeadDims{2, 4, 16, 16}, HeadDims{2, 4, 64, 64}, HeadDims{1, 2, 128, 128},
                           HeadDims{2, 4, 32, 24}}) {
    for (const std::int32_t n : {1, 63, 64, 65, 200, 1000}) {
      for (const float shift : {0.0f, -6.0f}) {
        SCOPED_TRACE(::testing::Message() << "k_dim " << d.k_head_dim << " v_dim " << d.v_head_dim
                                          << " n " << n << " a shift " << shift);
        KvStorage cpu = state_storage(backends().ref, d), chunked = state_storage(gpu, d),
                  recurrent = state_storage(gpu, d), fma = state_storage(gpu, d);
        random_states(cpu, chunked, &recurrent);
        for (std::int32_t slot = 0; slot < cpu.state.n_slots; ++slot) {
          std::vector<float> st(static_cast<std::size_t>(cpu.state.slot_floats()));
          read_state_slot(gpu, chunked, slot, st);
          write_state_slot(gpu, fma, slot, st);
        }
        const StateLayout& st = cpu.state;
        const std::int64_t rows = 2 * n + 3, nv = st.n_v_heads;
        // qkv 16-byte aligned (the tensor-core kernels' 16-byte copies), or for v_dim 24 with
        // rows 3 floats off (their 4-byte copies).
        const std::int64_t qkv_pad = d.v_head_dim == 24 ? 6 : 8;
        Pair qkv = Pair::random(rows, st.conv_channels, qkv_pad),
             b = Pair::random(rows, nv, 2, 2.0f);
        Pair a = Pair::make(rows, nv);
        std::vector<float> a_values = random_floats(static_cast<std::size_t>(rows * nv));
        for (float& x : a_values) x += shift;
        a.set(a_values);
        Pair out = Pair::make(rows, nv * st.v_head_dim, 6),
             out_recurrent = Pair::make(rows, nv * st.v_head_dim),
             out_fma = Pair::make(rows, nv * st.v_head_dim);
        out.poison_gpu();
        const DType gate_dtype = d.k_head_dim == 64 ? DType::BF16 : DType::F32;
        auto a_log = WeightPair::random(gate_dtype, 1, nv, 1.0f, true),
             dt_bias = WeightPair::random(gate_dtype, 1, nv, 1.0f, true);
        const std::vector<SequenceChunk> seqs{
            {.first_row = 0, .n_tokens = n, .start_pos = 0, .block_table = {}, .state_slot = 2},
            {.first_row = n,
             .n_tokens = n + 3,
             .start_pos = 300,
             .block_table = {},
             .state_slot = 0}};
        const std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows), 1),
            positions(tokens.size(), 0);
        const ForwardBatch batch{
            .tokens = tokens, .positions = positions, .sequences = seqs, .logit_rows = {}};
        backends().ref.gated_delta_rule(qkv.cpu, a.cpu, b.cpu, a_log->cpu, dt_bias->cpu, cpu, 0,
                                        batch, out.cpu);
        gpu.set_delta_rule_chunk_min_tokens(1);
        gpu.set_delta_chunk_math(math);
        gpu.gated_delta_rule(qkv.gpu, a.gpu, b.gpu, a_log->gpu, dt_bias->gpu, chunked, 0, batch,
                             out.gpu);
        gpu.set_delta_chunk_math(cuda::DeltaChunkMath::Fma);
        gpu.gated_delta_rule(qkv.gpu, a.gpu, b.gpu, a_log->gpu, dt_bias->gpu, fma, 0, batch,
                             out_fma.gpu);
        gpu.set_delta_chunk_math(cuda::DeltaChunkMath::Tf32x3);
        gpu.set_delta_rule_chunk_min_tokens(INT32_MAX);
        gpu.gated_delta_rule(qkv.gpu, a.gpu, b.gpu, a_log->gpu, dt_bias->gpu, recurrent, 0, batch,
                             out_recurrent.gpu);
        gpu.set_delta_rule_chunk_min_tokens(cuda::kDeltaChunkMinTokens);
        const std::vector<float> want_state = all_state(backends().ref, cpu),
                                 got_state = all_state(gpu, chunked);
        EXPECT_LE(out.error(), tol);
        EXPECT_LE(note_error(rel_error(got_state, want_state)), tol);
        EXPECT_LE(note_error(rel_error(out.get_gpu(), out_recurrent.get_gpu())), tol);
        EXPECT_LE(note_error(rel_error(got_state, all_state(gpu, recurrent))), tol);
        most_from_fma = std::max(most_from_fma, rel_error(out.get_gpu(), out_fma.get_gpu()));
        float largest = 0.0f;
        for (float x : out.get_cpu()) largest = std::max(largest, std::fabs(x));
        EXPECT_GT(largest, 1e-2f);  // the outputs are not trivially zero
      }
    }
  }
  return most_from_fma;
}

// The f32 FMA kernels. Tolerance: it accumulates in f32 (dots of <= 128 terms, the 64-row
// triangular solve) against a double oracle; a host run of the same kernel code came within
// 5e-7 relative at these sizes, and the token-by-token kernel's own bound here is 1e-5.
TEST(HybridOps, GatedDeltaRuleChunkedMatchesOracle) {
  AKV_SKIP_WITHOUT_CUDA();
  check_chunked_delta_rule(cuda::DeltaChunkMath::Fma, 1e-5);
}

// The tensor-core kernels with 3xTF32 products (the default). Each f32 operand is split into two
// tf32 parts (22 significant bits together) and the dropped small x small product is ~2^-22 of a
// term, below f32 accumulation's own rounding: a host emulation of both launches' products at
// the Qwen3.5 shape (k_dim = v_dim = 128, 1,000 tokens) came within 5.2e-7 (out) and 2.1e-7
// (state) of double, as the FMA form (5.1e-7 / 1.8e-7); so the FMA form's 1e-5.
TEST(HybridOps, GatedDeltaRuleChunkedOnTensorCoresMatchesOracle) {
  AKV_SKIP_WITHOUT_CUDA();
  check_chunked_delta_rule(cuda::DeltaChunkMath::Tf32x3, 1e-5);
}

// The tensor-core kernels with one tf32 product each (operands rounded to 11 significant bits,
// 2^-12 relative at most): the host emulation came within 4.5e-4 to 5.9e-4 of double over this
// test's head dims, fast and slow decays, 1,000 tokens; 2e-3 bounds that, and a wrong chunk is
// O(1) off. Its distance from the FMA form shows the tensor cores ran.
TEST(HybridOps, GatedDeltaRuleChunkedTf32MatchesOracle) {
  AKV_SKIP_WITHOUT_CUDA();
  EXPECT_GT(check_chunked_delta_rule(cuda::DeltaChunkMath::Tf32, 2e-3), 1e-5);
}

// Sequences longer than the chunked kernels' scratch holds at once (about 64 MiB of per-chunk
// matrices) go in several launch pairs, the state kept in its slot in between: two sequences of
// a few thousand tokens, the second ending one window later than the first.
TEST(HybridOps, GatedDeltaRuleChunkedAcrossScratchWindows) {
  AKV_SKIP_WITHOUT_CUDA();
  const HeadDims d{2, 8, 16, 16};
  const int nv = static_cast<int>(d.n_v_heads);
  const std::size_t per_chunk = cuda::delta_rule_chunked_scratch_bytes(2, 1, nv);
  const auto window =
      static_cast<std::int32_t>(cuda::delta_rule_chunked_scratch_bytes(2, 1 << 30, nv) / per_chunk);
  const std::int32_t n0 = window * cuda::kDeltaChunkTokens + 7,
                     n1 = n0 + window * cuda::kDeltaChunkTokens;
  KvStorage cpu = state_storage(backends().ref, d), gpu = state_storage(backends().gpu, d),
            start = state_storage(backends().ref, d);  // the states before the call
  random_states(cpu, gpu, nullptr);
  for (std::int32_t slot = 0; slot < cpu.state.n_slots; ++slot) {
    std::vector<float> v(static_cast<std::size_t>(cpu.state.slot_floats()));
    read_state_slot(backends().ref, cpu, slot, v);
    write_state_slot(backends().ref, start, slot, v);
  }
  const StateLayout& st = cpu.state;
  const std::int64_t rows = n0 + n1;
  Pair qkv = Pair::random(rows, st.conv_channels), b = Pair::random(rows, nv, 0, 2.0f);
  Pair a = Pair::make(rows, nv);
  std::vector<float> a_values = random_floats(static_cast<std::size_t>(rows * nv));
  for (float& x : a_values) x -= 6.0f;  // slow decay: the state carries across the windows
  a.set(a_values);
  Pair out = Pair::make(rows, nv * st.v_head_dim);
  out.poison_gpu();
  auto a_log = WeightPair::random(DType::F32, 1, nv, 1.0f, true),
       dt_bias = WeightPair::random(DType::F32, 1, nv, 1.0f, true);
  const std::vector<SequenceChunk> seqs{
      {.first_row = 0, .n_tokens = n0, .start_pos = 0, .block_table = {}, .state_slot = 3},
      {.first_row = n0, .n_tokens = n1, .start_pos = 64, .block_table = {}, .state_slot = 1}};
  const std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows), 1),
      positions(tokens.size(), 0);
  const ForwardBatch batch{
      .tokens = tokens, .positions = positions, .sequences = seqs, .logit_rows = {}};
  ASSERT_GT(n0, cuda::kDeltaChunkMinTokens);
  backends().ref.gated_delta_rule(qkv.cpu, a.cpu, b.cpu, a_log->cpu, dt_bias->cpu, cpu, 0, batch,
                                  out.cpu);
  const std::vector<float> want_state = all_state(backends().ref, cpu);
  for (const cuda::DeltaChunkMath math :
       {cuda::DeltaChunkMath::Fma, cuda::DeltaChunkMath::Tf32x3}) {
    SCOPED_TRACE(::testing::Message() << "products " << static_cast<int>(math));
    for (std::int32_t slot = 0; slot < st.n_slots; ++slot) {  // back to the starting states
      std::vector<float> v(static_cast<std::size_t>(st.slot_floats()));
      read_state_slot(backends().ref, start, slot, v);
      write_state_slot(backends().gpu, gpu, slot, v);
    }
    out.poison_gpu();
    backends().gpu.set_delta_chunk_math(math);
    backends().gpu.gated_delta_rule(qkv.gpu, a.gpu, b.gpu, a_log->gpu, dt_bias->gpu, gpu, 0, batch,
                                    out.gpu);
    backends().gpu.set_delta_chunk_math(cuda::DeltaChunkMath::Tf32x3);
    EXPECT_LE(out.error(), 1e-5) << window << " chunks a window";
    EXPECT_LE(note_error(rel_error(all_state(backends().gpu, gpu), want_state)), 1e-5);
  }
}

// The dispatch: in one batch a prefill chunk past kDeltaChunkMinTokens (chunked kernels) beside
// a decode token and a short chunk (token by token), and the state carried from a chunked call
// into later calls of either kind equals the reference.
TEST(HybridOps, GatedDeltaRuleMixedBatchCarriesState) {
  AKV_SKIP_WITHOUT_CUDA();
  const HeadDims d{2, 4, 64, 64};
  KvStorage cpu = state_storage(backends().ref, d), gpu = state_storage(backends().gpu, d);
  random_states(cpu, gpu);
  const StateLayout& st = cpu.state;
  const std::int64_t nv = st.n_v_heads;
  auto a_log = WeightPair::random(DType::F32, 1, nv, 1.0f, true),
       dt_bias = WeightPair::random(DType::F32, 1, nv, 1.0f, true);
  const std::int32_t long_n = 3 * cuda::kDeltaChunkMinTokens + 5;
  // Call 1: slot 1 fresh (long), slot 3 at 50 (1 token), slot 0 at 9 (a chunk just short of the
  // cut). Call 2: slot 1 at long_n (long again), slot 3 at 51 (1 token). Call 3: slot 1 one token.
  const std::vector<std::vector<SequenceChunk>> calls{
      {{.first_row = 0, .n_tokens = long_n, .start_pos = 0, .block_table = {}, .state_slot = 1},
       {.first_row = long_n, .n_tokens = 1, .start_pos = 50, .block_table = {}, .state_slot = 3},
       {.first_row = long_n + 1,
        .n_tokens = cuda::kDeltaChunkMinTokens - 1,
        .start_pos = 9,
        .block_table = {},
        .state_slot = 0}},
      {{.first_row = 0, .n_tokens = 1, .start_pos = 51, .block_table = {}, .state_slot = 3},
       {.first_row = 1,
        .n_tokens = long_n,
        .start_pos = long_n,
        .block_table = {},
        .state_slot = 1}},
      {{.first_row = 0,
        .n_tokens = 1,
        .start_pos = 2 * long_n,
        .block_table = {},
        .state_slot = 1}}};
  for (const std::vector<SequenceChunk>& seqs : calls) {
    std::int64_t rows = 0;
    for (const SequenceChunk& s : seqs) rows += s.n_tokens;
    Pair qkv = Pair::random(rows, st.conv_channels), a = Pair::random(rows, nv),
         b = Pair::random(rows, nv, 0, 2.0f);
    Pair out = Pair::make(rows, nv * st.v_head_dim);
    out.poison_gpu();
    const std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows), 1),
        positions(tokens.size(), 0);
    const ForwardBatch batch{
        .tokens = tokens, .positions = positions, .sequences = seqs, .logit_rows = {}};
    backends().ref.gated_delta_rule(qkv.cpu, a.cpu, b.cpu, a_log->cpu, dt_bias->cpu, cpu, 0, batch,
                                    out.cpu);
    backends().gpu.gated_delta_rule(qkv.gpu, a.gpu, b.gpu, a_log->gpu, dt_bias->gpu, gpu, 0, batch,
                                    out.gpu);
    EXPECT_LE(out.error(), 1e-5) << rows << " rows";
    EXPECT_LE(note_error(rel_error(all_state(backends().gpu, gpu), all_state(backends().ref, cpu))),
              1e-5);
  }
}

std::vector<std::int32_t> read_ids(const SafetensorsReader& r) {
  const TensorInfo& t = r.get_or_throw("full_ids");
  std::vector<std::int32_t> ids;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    ids.push_back(
        static_cast<std::int32_t>(reinterpret_cast<const std::int64_t*>(t.bytes.data())[i]));
  return ids;
}

class HybridOnCuda : public ::testing::TestWithParam<std::string> {};

struct FixtureRun {
  std::vector<float> got;    // [n_tokens, vocab] logits of every prompt position
  std::vector<double> want;  // the fp64 reference's
};

// The fixture's prompt through the CUDA backend in chunks of `first` tokens, then `rest` tokens
// per step (slot 1 of 2). `name`: a tiny-random-w2 checkpoint, or "gguf/<checkpoint>" for its
// f32 GGUF file (same reference).
FixtureRun run_fixture(const std::string& name, std::int32_t first, std::int32_t rest) {
  const bool gguf = name.starts_with("gguf/");
  const std::string checkpoint = gguf ? name.substr(5) : name;
  const std::string dir = testdata_dir() + "/models/tiny-random-w2/" + checkpoint;
  CudaBackend& gpu = backends().gpu;
  auto model = load_model(gguf ? gguf_fixture(checkpoint + "-f32") : dir, gpu);
  const SafetensorsReader ref = SafetensorsReader::open_or_throw(dir + "/reference.safetensors");
  const std::vector<std::int32_t> ids = read_ids(ref);
  const TensorInfo& t = ref.get_or_throw("full_logits_f64");
  const auto* p = reinterpret_cast<const double*>(t.bytes.data());
  FixtureRun r{.got = {}, .want = std::vector<double>(p, p + t.numel())};
  const std::int64_t vocab = model->config().vocab_size, block = 16;
  const std::int64_t n_blocks = (static_cast<std::int64_t>(ids.size()) + block - 1) / block;
  KvStorage kv = alloc_model_kv(gpu, model->config(), n_blocks, block, DType::F32, 2);
  std::vector<std::int32_t> table;
  for (std::int64_t i = 0; i < n_blocks; ++i)
    table.push_back(static_cast<std::int32_t>(n_blocks - 1 - i));
  r.got.resize(ids.size() * vocab);
  std::int32_t pos = 0;
  while (pos < static_cast<std::int32_t>(ids.size())) {
    const std::int32_t n =
        std::min(pos == 0 ? first : rest, static_cast<std::int32_t>(ids.size()) - pos);
    const SequenceChunk chunk{
        .first_row = 0, .n_tokens = n, .start_pos = pos, .block_table = table, .state_slot = 1};
    const std::vector<std::int32_t> positions = positions_for({&chunk, 1});
    std::vector<std::int32_t> rows(n);
    for (std::int32_t i = 0; i < n; ++i) rows[i] = i;
    const ForwardBatch batch{.tokens = std::span(ids).subspan(pos, n),
                             .positions = positions,
                             .sequences = {&chunk, 1},
                             .logit_rows = rows};
    model->forward(batch, kv, std::span<float>(r.got).subspan(pos * vocab, n * vocab));
    pos += n;
  }
  return r;
}

// Prefill of the first 100 tokens in one chunk (the chunked delta rule), then the rest one
// token per step (recorded steps, token by token).
TEST_P(HybridOnCuda, PrefillThenDecodeMatchFp64) {
  AKV_SKIP_WITHOUT_CUDA();
  const FixtureRun r = run_fixture(GetParam(), 100, 1);
  const double err = note_error(rel_error(r.got, r.want));
  EXPECT_LE(err, 3e-4) << GetParam();  // the reference's own f32 run is ~7e-5 off its f64 one
  std::printf("%-20s rel err %.3g\n", GetParam().c_str(), err);
}

// The whole prompt (150-300 tokens) in one chunk and in chunks of 70 (states carried between
// chunked calls, partial 64-token chunks) through the chunked delta rule with each form of its
// products, against the same prompt with the delta rule token by token, and against fp64. Tolerance
// between the two: both are f32 runs, each ~1e-5 from fp64 (PrefillThenDecodeMatchFp64: 0.9-1.5e-5
// on an H100); the delta rule's forms differ by ~1e-6 at the op
// (GatedDeltaRuleChunkedMatchesOracle), which the layers (norms, MoE routing weights) carry to up
// to 2.1e-5 in the logits (H100). 1e-4 sits well under the 3e-4 the fp64 comparison allows; a wrong
// chunk moves the logits by O(1). The TF32 form (~5e-4 at the op) moves the logits by
// 1.8e-3 (qwen3_5-text) to 1.6e-2 (qwen3-next) from fp64 on an H100, past the 3e-4 the fixtures
// allow: it is printed, and held only to 0.1 (a wrong chunk moves the logits by O(1)).
TEST_P(HybridOnCuda, ChunkedPrefillMatchesTokenByToken) {
  AKV_SKIP_WITHOUT_CUDA();
  CudaBackend& gpu = backends().gpu;
  gpu.set_delta_rule_chunk_min_tokens(INT32_MAX);
  const FixtureRun recurrent = run_fixture(GetParam(), 1 << 20, 1 << 20);
  gpu.set_delta_rule_chunk_min_tokens(cuda::kDeltaChunkMinTokens);
  const struct {
    cuda::DeltaChunkMath math;
    const char* name;
  } forms[] = {{cuda::DeltaChunkMath::Fma, "fma"},
               {cuda::DeltaChunkMath::Tf32x3, "3xtf32"},
               {cuda::DeltaChunkMath::Tf32, "tf32"}};
  for (const auto& form : forms) {
    gpu.set_delta_chunk_math(form.math);
    for (const std::int32_t chunk : {1 << 20, 70}) {
      const FixtureRun chunked = run_fixture(GetParam(), chunk, chunk);
      const double from_recurrent = rel_error(chunked.got, recurrent.got),
                   from_fp64 = rel_error(chunked.got, chunked.want);
      std::printf("%-20s %-6s chunks of %7d: rel diff to token by token %.3g, to fp64 %.3g\n",
                  GetParam().c_str(), form.name, chunk, from_recurrent, from_fp64);
      if (form.math == cuda::DeltaChunkMath::Tf32) {  // 1.8e-3 to 1.6e-2 on an H100: not exact
        EXPECT_LE(from_fp64, 0.1) << GetParam() << " tf32 chunks of " << chunk;
        continue;
      }
      EXPECT_LE(note_error(from_recurrent), 1e-4)
          << GetParam() << " " << form.name << " chunks of " << chunk;
      EXPECT_LE(note_error(from_fp64), 3e-4)
          << GetParam() << " " << form.name << " chunks of " << chunk;
    }
  }
  gpu.set_delta_chunk_math(cuda::DeltaChunkMath::Tf32x3);
}

INSTANTIATE_TEST_SUITE_P(Models, HybridOnCuda,
                         ::testing::Values("qwen3_5-text", "qwen3-next", "qwen3_5-moe-text",
                                           "gguf/qwen3_5-text", "gguf/qwen3-next",
                                           "gguf/qwen3_5-moe-text"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-' || ch == '/') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace akv::test
