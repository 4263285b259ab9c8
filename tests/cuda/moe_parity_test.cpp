// The mixture-of-experts pieces on the CUDA backend: the moe op against the scalar reference
// (F32, BF16 and MXFP4 experts, both gatings, decode and prefill row counts), attention with
// sinks (decode, prefill chunks that would otherwise take the tensor-core kernels, windows,
// splits), and the tiny Qwen3-MoE and GPT-OSS models against their fp64 logits and greedy ids.
#include <fstream>

#include <nlohmann/json.hpp>

#include "attention_util.h"
#include "backend/moe.h"
#include "models/model.h"

namespace akv::test {
namespace {

// A U8 weight [rows, bytes_per_row] of random bytes in [lo, hi] on both backends, presented with
// `cols` as its logical width (MoeWeights' MXFP4 convention).
std::unique_ptr<WeightPair> random_bytes(std::int64_t rows, std::int64_t bytes_per_row,
                                         std::int64_t cols, int lo, int hi) {
  auto w = std::make_unique<WeightPair>();
  std::uniform_int_distribution<int> d(lo, hi);
  w->bytes.resize(static_cast<std::size_t>(rows * bytes_per_row));
  for (auto& b : w->bytes) b = static_cast<std::uint8_t>(d(rng()));
  w->info.name = "mxfp4";
  w->info.dtype = DType::U8;
  w->info.shape = {rows, bytes_per_row};
  w->info.bytes = w->bytes;
  w->cpu = backends().ref.upload_weight(w->info);
  w->gpu = backends().gpu.upload_weight(w->info);
  w->cpu.cols = w->gpu.cols = cols;
  return w;
}

struct MoeCase {
  DType dtype;
  bool mxfp4;
  bool gpt_oss;  // TopKSoftmax + clamped SwiGLU + interleaved gate/up, else Qwen3-MoE rules
  std::int64_t n;
};

class MoeOpOnCuda : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeOpOnCuda, MatchesReference) {
  AKV_SKIP_WITHOUT_CUDA();
  const MoeCase c = GetParam();
  const std::int64_t hidden = 128, inter = 64, n = c.n;
  MoeParams p{.n_experts = 8,
              .top_k = c.gpt_oss ? 2 : 3,
              .inter = inter,
              .gating = MoeGating::SoftmaxTopK,
              .norm_topk_prob = true};
  if (c.gpt_oss)
    p = {.n_experts = 8,
         .top_k = 2,
         .inter = inter,
         .gating = MoeGating::TopKSoftmax,
         .act = ExpertActivation::ClampedSwiglu,
         .swiglu_limit = 7.0f,
         .swiglu_alpha = 1.702f,
         .interleaved_gate_up = true};
  std::unique_ptr<WeightPair> gu, dn, gu_scales, dn_scales;
  if (c.mxfp4) {
    gu = random_bytes(p.n_experts * 2 * inter, hidden / 2, hidden, 0, 255);
    gu_scales = random_bytes(p.n_experts * 2 * inter, hidden / 32, hidden / 32, 120, 126);
    dn = random_bytes(p.n_experts * hidden, inter / 2, inter, 0, 255);
    dn_scales = random_bytes(p.n_experts * hidden, inter / 32, inter / 32, 120, 126);
  } else {
    gu = WeightPair::random(c.dtype, p.n_experts * 2 * inter, hidden, 0.2f);
    dn = WeightPair::random(c.dtype, p.n_experts * hidden, inter, 0.2f);
  }
  const auto gu_bias = WeightPair::random(DType::F32, p.n_experts, 2 * inter, 0.5f);
  const auto dn_bias = WeightPair::random(DType::F32, p.n_experts, hidden, 0.5f);
  auto weights = [&](bool gpu) {
    auto pick = [gpu](const std::unique_ptr<WeightPair>& w) {
      return w ? (gpu ? w->gpu : w->cpu) : WeightRef{};
    };
    return MoeWeights{.format = c.mxfp4 ? ExpertFormat::Mxfp4 : ExpertFormat::Float,
                      .gate_up = pick(gu),
                      .down = pick(dn),
                      .gate_up_scales = pick(gu_scales),
                      .down_scales = pick(dn_scales),
                      .gate_up_bias = pick(gu_bias),
                      .down_bias = pick(dn_bias)};
  };
  Pair x = Pair::random(n, hidden, 6, 1.5f);
  Pair logits = Pair::random(n, p.n_experts, 2, 2.0f);
  Pair route = Pair::make(n, 2 * p.top_k), gate_up = Pair::make(n * p.top_k, 2 * inter);
  Pair act = Pair::make(n * p.top_k, inter), down = Pair::make(n * p.top_k, hidden);
  Pair out = Pair::make(n, hidden);
  out.poison_gpu();
  backends().ref.moe(x.cpu, logits.cpu, weights(false), p,
                     {route.cpu, gate_up.cpu, act.cpu, down.cpu}, out.cpu);
  backends().gpu.moe(x.gpu, logits.gpu, weights(true), p,
                     {route.gpu, gate_up.gpu, act.gpu, down.gpu}, out.gpu);
  EXPECT_LE(out.error(), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MoeOpOnCuda,
    ::testing::Values(MoeCase{DType::F32, false, false, 1}, MoeCase{DType::BF16, false, false, 1},
                      MoeCase{DType::BF16, false, false, 37}, MoeCase{DType::F32, false, true, 1},
                      MoeCase{DType::F16, false, true, 9}, MoeCase{DType::F32, true, true, 1},
                      MoeCase{DType::F32, true, true, 64}));

TEST(AttentionSinksOnCuda, MatchReference) {
  AKV_SKIP_WITHOUT_CUDA();
  for (DType kv : {DType::F32, DType::BF16}) {
    const double tol = kv == DType::F32 ? 1e-5 : 1e-2;
    // Decode over short and long (split) contexts, a prefill chunk past kMinPrefillChunk, windows.
    EXPECT_LE(attention_error(kv, 8, 2, 64, 0, 0.0, {{0, 1}, {40, 1}, {700, 1}}, true), tol);
    EXPECT_LE(attention_error(kv, 8, 2, 64, 0, 0.0, {{0, 70}, {100, 33}}, true), tol);
    EXPECT_LE(attention_error(kv, 4, 2, 16, 8, 0.0, {{0, 40}, {50, 1}}, true), tol);
    EXPECT_LE(attention_error(kv, 8, 1, 128, 128, 0.0, {{0, 300}, {600, 1}}, true), tol);
  }
}

std::vector<std::int32_t> ids_of(const SafetensorsReader& r, const std::string& name) {
  const TensorInfo& t = r.get_or_throw(name);
  std::vector<std::int32_t> ids;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    ids.push_back(
        t.dtype == DType::I64
            ? static_cast<std::int32_t>(reinterpret_cast<const std::int64_t*>(t.bytes.data())[i])
            : reinterpret_cast<const std::int32_t*>(t.bytes.data())[i]);
  return ids;
}

// Logits of ids on the GPU: one prefill (all rows), or token by token.
std::vector<float> run_ids(Model& model, Backend& b, const std::vector<std::int32_t>& ids,
                           bool prefill) {
  const std::int64_t block = 16,
                     n_blocks = (static_cast<std::int64_t>(ids.size()) + block - 1) / block;
  KvStorage kv = b.alloc_kv(kv_layout_for(model.config(), n_blocks, block, DType::F32));
  std::vector<std::int32_t> table;
  for (std::int64_t i = 0; i < n_blocks; ++i)
    table.push_back(static_cast<std::int32_t>(n_blocks - 1 - i));
  const std::int64_t vocab = model.config().vocab_size;
  std::vector<float> logits(ids.size() * vocab);
  const std::size_t step = prefill ? ids.size() : 1;
  for (std::size_t t = 0; t < ids.size(); t += step) {
    const SequenceChunk chunk{.first_row = 0,
                              .n_tokens = static_cast<std::int32_t>(step),
                              .start_pos = static_cast<std::int32_t>(t),
                              .block_table = table};
    const std::vector<std::int32_t> pos = positions_for({&chunk, 1});
    std::vector<std::int32_t> rows(step);
    for (std::size_t i = 0; i < step; ++i) rows[i] = static_cast<std::int32_t>(i);
    const ForwardBatch batch{.tokens = {ids.data() + t, step},
                             .positions = pos,
                             .sequences = {&chunk, 1},
                             .logit_rows = rows};
    model.forward(batch, kv, std::span<float>(logits).subspan(t * vocab, step * vocab));
  }
  return logits;
}

class MoeModelOnCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeModelOnCuda, LogitsMatchFp64AndGreedyIdsMatch) {
  AKV_SKIP_WITHOUT_CUDA();
  const std::string dir = testdata_dir() + "/models/tiny-random-w2/" + GetParam();
  auto model = load_model(dir, backends().gpu);
  const SafetensorsReader ref = SafetensorsReader::open_or_throw(dir + "/reference.safetensors");
  const std::vector<std::int32_t> ids = ids_of(ref, "full_ids");
  const TensorInfo& want_t = ref.get_or_throw("full_logits_f64");
  const auto* w = reinterpret_cast<const double*>(want_t.bytes.data());
  const std::vector<double> want(w, w + want_t.numel());
  for (bool prefill : {true, false}) {
    const double err = note_error(rel_error(run_ids(*model, backends().gpu, ids, prefill), want));
    EXPECT_LE(err, 1e-5) << GetParam() << (prefill ? " prefill" : " decode");
  }
  // full_ids = prompt + greedy ids: the argmax of each row from the prompt's last on is the next
  // id.
  const std::vector<std::int32_t> prompt = ids_of(ref, "input_ids");
  const std::vector<float> got = run_ids(*model, backends().gpu, ids, false);
  const std::int64_t vocab = model->config().vocab_size;
  for (std::size_t t = prompt.size() - 1; t + 1 < ids.size(); ++t) {
    const float* row = got.data() + t * vocab;
    EXPECT_EQ(std::max_element(row, row + vocab) - row, ids[t + 1])
        << GetParam() << " position " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MoeModelOnCuda, ::testing::Values("qwen3-moe", "gpt-oss"),
                         [](const auto& info) {
                           return info.param == "gpt-oss" ? std::string("gpt_oss")
                                                          : std::string("qwen3_moe");
                         });

}  // namespace
}  // namespace akv::test
