// Whole models on the CUDA backend: every tiny random model's logits against its fp64 reference
// (one prefill through cuBLAS, then token-by-token decode through the GEMV and split attention),
// and stories260K's 200 greedy ids from BOS exactly.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/model.h"
#include "parity_util.h"

namespace akv::test {
namespace {

std::vector<std::int32_t> read_ids(const SafetensorsReader& r, const std::string& name) {
  const TensorInfo& t = r.get_or_throw(name);
  std::vector<std::int32_t> ids;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype == DType::I64)
      ids.push_back(static_cast<std::int32_t>(reinterpret_cast<const std::int64_t*>(t.bytes.data())[i]));
    else
      ids.push_back(reinterpret_cast<const std::int32_t*>(t.bytes.data())[i]);
  }
  return ids;
}

std::vector<double> read_f64(const SafetensorsReader& r, const std::string& name) {
  const TensorInfo& t = r.get_or_throw(name);
  if (t.dtype == DType::F32) {
    const auto* p = reinterpret_cast<const float*>(t.bytes.data());
    return {p, p + t.numel()};
  }
  const auto* p = reinterpret_cast<const double*>(t.bytes.data());
  return {p, p + t.numel()};
}

// A sequence on the GPU with a reversed (non-identity) block table.
struct Sequence {
  static constexpr std::int64_t kBlock = 16;
  Sequence(Model& m, Backend& b, std::int64_t max_len)
      : model(m), n_blocks((max_len + kBlock - 1) / kBlock), kv(b.alloc_kv(kv_layout_for(m.config(), n_blocks, kBlock, DType::F32))) {
    for (std::int64_t i = 0; i < n_blocks; ++i) table.push_back(static_cast<std::int32_t>(n_blocks - 1 - i));
  }
  // Appends `ids` as one chunk; returns the logits of every row (all_rows) or of the last.
  std::vector<float> step(const std::vector<std::int32_t>& ids, bool all_rows) {
    const SequenceChunk chunk{.first_row = 0, .n_tokens = static_cast<std::int32_t>(ids.size()),
                              .start_pos = static_cast<std::int32_t>(len), .block_table = table};
    const std::vector<std::int32_t> pos = positions_for({&chunk, 1});
    std::vector<std::int32_t> rows;
    for (std::size_t i = all_rows ? 0 : ids.size() - 1; i < ids.size(); ++i) rows.push_back(static_cast<std::int32_t>(i));
    const ForwardBatch batch{.tokens = ids, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = rows};
    std::vector<float> logits(rows.size() * model.config().vocab_size);
    model.forward(batch, kv, logits);
    len += static_cast<std::int64_t>(ids.size());
    return logits;
  }
  Model& model;
  std::int64_t n_blocks, len = 0;
  KvStorage kv;
  std::vector<std::int32_t> table;
};

class TinyRandomOnCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyRandomOnCuda, PrefillAndDecodeLogitsMatchFp64) {
  AKV_SKIP_WITHOUT_CUDA();
  const std::string dir = testdata_dir() + "/models/tiny-random/" + GetParam();
  CudaBackend& gpu = backends().gpu;
  auto model = load_model(dir, gpu);
  // The sharded checkpoint is llama3-rope-scaled split in four: same reference. The bf16 one has
  // f32 logits of its bf16 weights for its 12 input ids.
  const std::string ref_dir =
      GetParam() == "llama3-rope-scaled-sharded" ? testdata_dir() + "/models/tiny-random/llama3-rope-scaled" : dir;
  const SafetensorsReader ref = SafetensorsReader::open_or_throw(ref_dir + "/reference.safetensors");
  const bool f64 = ref.find("full_logits_f64") != nullptr;
  const std::vector<std::int32_t> ids = read_ids(ref, f64 ? "full_ids" : "input_ids");
  const std::vector<double> want = read_f64(ref, f64 ? "full_logits_f64" : "logits_f32_from_bf16_weights");
  const std::int64_t vocab = model->config().vocab_size;
  const bool bf16 = model->config().dtype == DType::BF16;

  Sequence prefill(*model, gpu, static_cast<std::int64_t>(ids.size()));
  const double prefill_err = note_error(rel_error(prefill.step(ids, true), want));
  // bf16 weights: cuBLAS rounds the activations to bf16 for the prefill.
  EXPECT_LE(prefill_err, bf16 ? 1e-2 : 1e-5) << GetParam() << " prefill";

  Sequence decode(*model, gpu, static_cast<std::int64_t>(ids.size()));
  std::vector<float> got;
  for (std::int32_t id : ids) {
    const std::vector<float> l = decode.step({id}, false);
    got.insert(got.end(), l.begin(), l.end());
  }
  const double decode_err = note_error(rel_error(got, want));
  EXPECT_LE(decode_err, 1e-5) << GetParam() << " decode";
  EXPECT_EQ(static_cast<std::int64_t>(got.size()), static_cast<std::int64_t>(ids.size()) * vocab);
  RecordProperty("prefill_rel_error", std::to_string(prefill_err));
  RecordProperty("decode_rel_error", std::to_string(decode_err));
  std::printf("%-28s prefill rel err %.3g  decode rel err %.3g\n", GetParam().c_str(), prefill_err, decode_err);
}

INSTANTIATE_TEST_SUITE_P(Models, TinyRandomOnCuda,
                         ::testing::Values("llama3-rope-scaled", "llama3-rope-scaled-bf16", "llama3-rope-scaled-sharded",
                                           "smollm2-like-llama-tied", "qwen2-bias-tied", "qwen3-qknorm-tied",
                                           "mistral-swa8", "phi3-fused", "gemma3-text-swa8"));

TEST(Stories260KOnCuda, GreedyIdsFromBosExact) {
  AKV_SKIP_WITHOUT_CUDA();
  const std::string dir = testdata_dir() + "/models/stories260K/hf";
  std::ifstream f(dir + "/reference.json");
  ASSERT_TRUE(f.good()) << dir;
  const nlohmann::json ref = nlohmann::json::parse(f);
  const auto& g = ref["greedy_from_bos"];
  const std::vector<std::int32_t> input = g["input_ids"].get<std::vector<std::int32_t>>();
  const std::vector<std::int32_t> want = g["generated_ids_200_steps"].get<std::vector<std::int32_t>>();

  auto model = load_model(dir, backends().gpu);
  Sequence seq(*model, backends().gpu, static_cast<std::int64_t>(input.size() + want.size()));
  std::vector<std::int32_t> got;
  std::vector<float> logits = seq.step(input, false);
  while (got.size() < want.size()) {
    const auto next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    got.push_back(next);
    logits = seq.step({next}, false);
  }
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace akv::test
