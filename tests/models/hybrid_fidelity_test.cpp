// The hybrid linear-attention models of ../shared/testdata/models/tiny-random-w2 (Qwen3.5 text,
// Qwen3-Next, Qwen3.5-MoE) against their fp64 reference logits, on the scalar reference backend
// and the fast CPU backend, loaded from the checkpoint and from its f32 GGUF conversion
// (testdata/gguf): the whole sequence in one prefill, in uneven chunks (the recurrent state
// carried across chunk boundaries), and token by token (the decode form of the recurrence);
// plus the greedy continuation.
//
// Tolerance: |got - want| <= 3e-4 * max|want|. The reference's own f32 run is off its f64 run
// by up to 7.8e-5 relative (SOURCES.md: the delta-rule recurrence accumulates f32 rounding over
// 170-320 tokens); an f32 engine summing in another order lands in the same band, so the bound
// is ~4x that. A wrong gate, decay or norm moves logits by > 1e-2 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/fast_backend.h"
#include "backend/cpu/reference_backend.h"
#include "gguf_test_util.h"
#include "models/model.h"
#include "tensor/safetensors.h"

namespace akv {
namespace {

const std::string kDir = std::string(AGENTKV_TESTDATA) + "/models/tiny-random-w2/";
constexpr double kRelTolerance = 3e-4;

std::vector<std::int32_t> read_ids(const SafetensorsReader& r, const std::string& name) {
  const TensorInfo& t = r.get_or_throw(name);
  std::vector<std::int32_t> ids;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    ids.push_back(
        static_cast<std::int32_t>(reinterpret_cast<const std::int64_t*>(t.bytes.data())[i]));
  return ids;
}

struct Fixture {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;  // after the backend it uses, so destroyed first
  std::vector<std::int32_t> ids;
  std::vector<double> want;  // [ids, vocab]
};

// `source`: "safetensors" (the checkpoint) or "gguf" (testdata/gguf/<name>-f32.gguf).
Fixture load(const std::string& name, const std::string& backend_name, const std::string& source) {
  Fixture f;
  if (backend_name == "fast")
    f.backend = std::make_unique<FastBackend>();
  else
    f.backend = std::make_unique<ReferenceBackend>();
  f.model =
      load_model(source == "gguf" ? test::gguf_fixture(name + "-f32") : kDir + name, *f.backend);
  const SafetensorsReader ref =
      SafetensorsReader::open_or_throw(kDir + name + "/reference.safetensors");
  f.ids = read_ids(ref, "full_ids");
  const TensorInfo& t = ref.get_or_throw("full_logits_f64");
  const auto* p = reinterpret_cast<const double*>(t.bytes.data());
  f.want.assign(p, p + t.numel());
  return f;
}

// Runs the ids through the model in chunks of the given sizes (cycled), returning every
// position's logits. Block table reversed so block ids differ from positions.
std::vector<float> run_chunks(Model& model, Backend& backend, const std::vector<std::int32_t>& ids,
                              const std::vector<std::int32_t>& sizes) {
  const ModelConfig& c = model.config();
  const std::int64_t block = 16;
  const std::int64_t n_blocks = (static_cast<std::int64_t>(ids.size()) + block - 1) / block;
  // Two state slots; the sequence uses slot 1, so slot indexing is exercised.
  KvStorage kv = alloc_model_kv(backend, c, n_blocks, block, DType::F32, 2);
  std::vector<std::int32_t> table(n_blocks);
  for (std::int64_t i = 0; i < n_blocks; ++i)
    table[i] = static_cast<std::int32_t>(n_blocks - 1 - i);
  std::vector<float> logits(ids.size() * c.vocab_size);
  std::int32_t pos = 0;
  for (std::size_t k = 0; pos < static_cast<std::int32_t>(ids.size()); ++k) {
    const std::int32_t n = std::min<std::int32_t>(sizes[k % sizes.size()],
                                                  static_cast<std::int32_t>(ids.size()) - pos);
    const SequenceChunk chunk{
        .first_row = 0, .n_tokens = n, .start_pos = pos, .block_table = table, .state_slot = 1};
    std::vector<std::int32_t> rows(n);
    for (std::int32_t i = 0; i < n; ++i) rows[i] = i;
    const std::vector<std::int32_t> positions = positions_for({&chunk, 1});
    const ForwardBatch batch{.tokens = std::span(ids).subspan(pos, n),
                             .positions = positions,
                             .sequences = {&chunk, 1},
                             .logit_rows = rows};
    model.forward(batch, kv,
                  std::span<float>(logits).subspan(pos * c.vocab_size, n * c.vocab_size));
    pos += n;
  }
  return logits;
}

double max_rel_error(std::span<const float> got, std::span<const double> want) {
  double max_ref = 0, max_err = 0;
  for (double w : want) max_ref = std::max(max_ref, std::fabs(w));
  for (std::size_t i = 0; i < got.size(); ++i)
    max_err = std::max(max_err, std::fabs(got[i] - want[i]));
  return max_err / max_ref;
}

class Hybrid : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {
};

TEST_P(Hybrid, OnePrefillMatchesFp64Reference) {
  const auto& [name, backend_name, source] = GetParam();
  Fixture f = load(name, backend_name, source);
  const double err = max_rel_error(
      run_chunks(*f.model, *f.backend, f.ids, {static_cast<std::int32_t>(f.ids.size())}), f.want);
  EXPECT_LE(err, kRelTolerance);
  RecordProperty("max_rel_error", std::to_string(err));
}

TEST_P(Hybrid, UnevenChunksMatchFp64Reference) {
  const auto& [name, backend_name, source] = GetParam();
  Fixture f = load(name, backend_name, source);
  const double err =
      max_rel_error(run_chunks(*f.model, *f.backend, f.ids, {37, 1, 64, 5, 100}), f.want);
  EXPECT_LE(err, kRelTolerance);
}

TEST_P(Hybrid, TokenByTokenMatchesFp64Reference) {
  const auto& [name, backend_name, source] = GetParam();
  Fixture f = load(name, backend_name, source);
  const double err = max_rel_error(run_chunks(*f.model, *f.backend, f.ids, {1}), f.want);
  EXPECT_LE(err, kRelTolerance);
}

// The KV arrays (and so KV blocks in every tier) hold the full-attention layers only; the
// fidelity tests above run on that layout, so each attention layer finds its own array.
TEST_P(Hybrid, KvHoldsTheFullAttentionLayersOnly) {
  const auto& [name, backend_name, source] = GetParam();
  Fixture f = load(name, backend_name, source);
  const ModelConfig& c = f.model->config();
  std::ifstream in(kDir + name + "/config.json");
  const auto config = nlohmann::json::parse(in);
  std::int64_t n_full = 0;
  for (const auto& t : config["layer_types"]) n_full += t == "full_attention" ? 1 : 0;
  ASSERT_GT(n_full, 0);
  ASSERT_LT(n_full, c.n_layers);
  const KvLayout layout = kv_layout_for(c, 4, 16, DType::F32);
  EXPECT_EQ(layout.n_layers, n_full);
  EXPECT_EQ(layout.block_bytes(), 2 * n_full * 16 * c.n_kv_heads * c.head_dim * 4);
  const KvStorage kv = alloc_model_kv(*f.backend, c, 4, 16, DType::F32);
  EXPECT_EQ(static_cast<std::int64_t>(kv.k.size()), n_full);
}

TEST_P(Hybrid, GreedyContinuationMatchesReferenceIds) {
  const auto& [name, backend_name, source] = GetParam();
  Fixture f = load(name, backend_name, source);
  std::ifstream in(kDir + name + "/reference.json");
  const auto ref = nlohmann::json::parse(in);
  const auto prompt = ref["input_ids"].get<std::vector<std::int32_t>>();
  const auto want = ref["greedy_ids"].get<std::vector<std::int32_t>>();
  // full_ids = prompt + greedy ids, so the argmax at each position from the prompt's last on
  // is the next greedy id.
  const std::vector<float> logits =
      run_chunks(*f.model, *f.backend, f.ids, {static_cast<std::int32_t>(prompt.size()), 1});
  const std::int64_t vocab = f.model->config().vocab_size;
  std::vector<std::int32_t> got;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const float* row = logits.data() + (prompt.size() - 1 + i) * vocab;
    got.push_back(argmax_row({row, static_cast<std::size_t>(vocab)}));
  }
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(Models, Hybrid,
                         ::testing::Combine(::testing::Values("qwen3_5-text", "qwen3-next",
                                                              "qwen3_5-moe-text"),
                                            ::testing::Values("reference", "fast"),
                                            ::testing::Values("safetensors", "gguf")),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           if (std::get<2>(info.param) == "gguf") n += "_gguf";
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace akv
