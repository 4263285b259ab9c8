// The mixture-of-experts models on the CUDA backend: attention with sinks (decode and prefill
// chunks on the tensor-core kernels and the CUDA-core one, windows, splits), and the tiny Qwen3-MoE and
// GPT-OSS models against their fp64 logits and greedy ids. The moe op itself:
// moe_kernels_parity_test.cpp.
#include <fstream>

#include <nlohmann/json.hpp>

#include "attention_util.h"
#include "backend/moe.h"
#include "models/model.h"

namespace akv::test {
namespace {

TEST(AttentionSinksOnCuda, MatchReference) {
  AKV_SKIP_WITHOUT_CUDA();
  for (DType kv : {DType::F32, DType::BF16}) {
    const double tol = kv == DType::F32 ? 1e-5 : 1e-2;
    // Decode over short and long (split) contexts, a prefill chunk past kMinPrefillChunk, windows.
    EXPECT_LE(attention_error(kv, 8, 2, 64, 0, 0.0, {{0, 1}, {40, 1}, {700, 1}}, true), tol);
    EXPECT_LE(attention_error(kv, 8, 2, 64, 0, 0.0, {{0, 70}, {100, 33}}, true), tol);
    EXPECT_LE(attention_error(kv, 4, 2, 16, 8, 0.0, {{0, 40}, {50, 1}}, true), tol);
    EXPECT_LE(attention_error(kv, 8, 1, 128, 128, 0.0, {{0, 300}, {600, 1}}, true), tol);
    // Long chunks (one split a tile) and a short chunk over a long context (split keys, merged).
    EXPECT_LE(attention_error(kv, 8, 2, 64, 0, 0.0, {{0, 512}, {600, 40}}, true), tol);
    EXPECT_LE(attention_error(kv, 8, 2, 64, 128, 0.0, {{0, 512}, {600, 40}}, true), tol);
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
