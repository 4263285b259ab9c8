// Hybrid linear-attention models on the CUDA backend: the ops (output gate, short causal conv,
// gated delta rule) against the scalar reference on a batch of chunks that start fresh or continue
// a state in their slots, and the Qwen3.5 / Qwen3-Next fixtures' logits against their fp64
// references (prefill, then decode steps: recorded CUDA graphs, the MoE models' routing on the
// device through Backend::moe). The output gate also in its one-gate-per-row form (a MoE
// block's shared expert).
#include "models/model.h"
#include "../engine/engine_test_util.h"
#include "parity_util.h"

namespace akv::test {
namespace {

// State-only storage (no KV layers) with 4 slots on one backend.
KvStorage state_storage(Backend& b) {
  KvStorage kv = b.alloc_kv(KvLayout{});
  alloc_state_arrays(b, kv,
                     {.n_layers = 1,
                      .n_slots = 4,
                      .conv_rows = 3,
                      .conv_channels = 2 * 2 * 32 + 4 * 24,
                      .n_k_heads = 2,
                      .n_v_heads = 4,
                      .k_head_dim = 32,
                      .v_head_dim = 24});
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

void random_states(KvStorage& cpu, KvStorage& gpu) {
  for (std::int32_t slot = 0; slot < cpu.state.n_slots; ++slot) {
    const std::vector<float> s =
        random_floats(static_cast<std::size_t>(cpu.state.slot_floats()), 0.3f);
    write_state_slot(backends().ref, cpu, slot, s);
    write_state_slot(backends().gpu, gpu, slot, s);
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

std::vector<std::int32_t> read_ids(const SafetensorsReader& r) {
  const TensorInfo& t = r.get_or_throw("full_ids");
  std::vector<std::int32_t> ids;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    ids.push_back(
        static_cast<std::int32_t>(reinterpret_cast<const std::int64_t*>(t.bytes.data())[i]));
  return ids;
}

class HybridOnCuda : public ::testing::TestWithParam<std::string> {};

// Prefill of the first 100 tokens in one chunk, then the rest one token per step (slot 1 of 2).
TEST_P(HybridOnCuda, PrefillThenDecodeMatchFp64) {
  AKV_SKIP_WITHOUT_CUDA();
  const std::string dir = testdata_dir() + "/models/tiny-random-w2/" + GetParam();
  CudaBackend& gpu = backends().gpu;
  auto model = load_model(dir, gpu);
  const SafetensorsReader ref = SafetensorsReader::open_or_throw(dir + "/reference.safetensors");
  const std::vector<std::int32_t> ids = read_ids(ref);
  const TensorInfo& t = ref.get_or_throw("full_logits_f64");
  const auto* p = reinterpret_cast<const double*>(t.bytes.data());
  const std::vector<double> want(p, p + t.numel());
  const std::int64_t vocab = model->config().vocab_size, block = 16;
  const std::int64_t n_blocks = (static_cast<std::int64_t>(ids.size()) + block - 1) / block;
  KvStorage kv = alloc_model_kv(gpu, model->config(), n_blocks, block, DType::F32, 2);
  std::vector<std::int32_t> table;
  for (std::int64_t i = 0; i < n_blocks; ++i)
    table.push_back(static_cast<std::int32_t>(n_blocks - 1 - i));
  std::vector<float> got(ids.size() * vocab);
  std::int32_t pos = 0;
  while (pos < static_cast<std::int32_t>(ids.size())) {
    const std::int32_t n = pos == 0 ? 100 : 1;
    const SequenceChunk chunk{
        .first_row = 0, .n_tokens = n, .start_pos = pos, .block_table = table, .state_slot = 1};
    const std::vector<std::int32_t> positions = positions_for({&chunk, 1});
    std::vector<std::int32_t> rows(n);
    for (std::int32_t i = 0; i < n; ++i) rows[i] = i;
    const ForwardBatch batch{.tokens = std::span(ids).subspan(pos, n),
                             .positions = positions,
                             .sequences = {&chunk, 1},
                             .logit_rows = rows};
    model->forward(batch, kv, std::span<float>(got).subspan(pos * vocab, n * vocab));
    pos += n;
  }
  const double err = note_error(rel_error(got, want));
  EXPECT_LE(err, 3e-4) << GetParam();  // the reference's own f32 run is ~7e-5 off its f64 one
  std::printf("%-20s rel err %.3g\n", GetParam().c_str(), err);
}

INSTANTIATE_TEST_SUITE_P(Models, HybridOnCuda,
                         ::testing::Values("qwen3_5-text", "qwen3-next", "qwen3_5-moe-text"),
                         fixture_test_name);

}  // namespace
}  // namespace akv::test
