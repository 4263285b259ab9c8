// Every tiny random model of ../shared/testdata/models/tiny-random against its fp64 reference
// logits, on the scalar reference backend and on the fast CPU backend (same tolerance: the fast
// path's f32 accumulation stays well inside it), in one prefill and token by token.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/fast_backend.h"
#include "backend/cpu/reference_backend.h"
#include "models/model.h"
#include "prefill_logits.h"
#include "tensor/safetensors.h"

namespace akv {
namespace {

using test::prefill_logits;

const std::string kTinyRandom = std::string(AGENTKV_TESTDATA) + "/models/tiny-random/";

std::vector<std::int32_t> read_ids(const SafetensorsReader& r, const std::string& name) {
  const TensorInfo& t = r.get_or_throw(name);
  std::vector<std::int32_t> ids;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype == DType::I64) ids.push_back(static_cast<std::int32_t>(reinterpret_cast<const std::int64_t*>(t.bytes.data())[i]));
    else ids.push_back(reinterpret_cast<const std::int32_t*>(t.bytes.data())[i]);
  }
  return ids;
}

std::vector<double> read_f64(const SafetensorsReader& r, const std::string& name) {
  const TensorInfo& t = r.get_or_throw(name);
  EXPECT_EQ(t.dtype, DType::F64);
  const auto* p = reinterpret_cast<const double*>(t.bytes.data());
  return {p, p + t.numel()};
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "fast") return std::make_unique<FastBackend>();
  return std::make_unique<ReferenceBackend>();
}

// Tolerance: |got - want| <= 1e-5 * max|want| + 1e-5 (fp32 weights and activations).
void expect_logits_close(std::span<const float> got, std::span<const double> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double max_ref = 0, max_err = 0;
  for (double w : want) max_ref = std::max(max_ref, std::fabs(w));
  for (std::size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, std::fabs(got[i] - want[i]));
  EXPECT_LE(max_err, 1e-5 * max_ref + 1e-5) << what << ": max abs error " << max_err << " (max |logit| " << max_ref << ")";
  ::testing::Test::RecordProperty("max_abs_error", std::to_string(max_err));
}

// Runs ids through the model one token per forward pass (decode) and returns every step's logits.
std::vector<float> decode_logits(Model& model, Backend& backend, const std::vector<std::int32_t>& ids) {
  const ModelConfig& c = model.config();
  const std::int64_t block = 4;
  const std::int64_t n_blocks = (static_cast<std::int64_t>(ids.size()) + block - 1) / block;
  KvStorage kv = backend.alloc_kv(kv_layout_for(c, n_blocks, block, DType::F32));
  std::vector<std::int32_t> table(n_blocks);
  for (std::int64_t i = 0; i < n_blocks; ++i) table[i] = static_cast<std::int32_t>(n_blocks - 1 - i);  // not identity
  std::vector<float> logits(ids.size() * c.vocab_size);
  const std::int32_t row0 = 0;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    SequenceChunk chunk{.first_row = 0, .n_tokens = 1, .start_pos = static_cast<std::int32_t>(t), .block_table = table};
    const std::int32_t pos = static_cast<std::int32_t>(t);
    ForwardBatch batch{.tokens = {&ids[t], 1}, .positions = {&pos, 1}, .sequences = {&chunk, 1}, .logit_rows = {&row0, 1}};
    model.forward(batch, kv, std::span<float>(logits).subspan(t * c.vocab_size, c.vocab_size));
  }
  return logits;
}

// (model directory under tiny-random/, backend name)
class TinyRandom : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

// A tiny-random model on a backend with its reference ids and fp64 logits.
struct WithReference {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;  // declared after the backend it uses, so destroyed first
  std::vector<std::int32_t> ids;
  std::vector<double> want;
};

WithReference load_with_reference(const std::string& name, const std::string& backend_name) {
  const std::string dir = kTinyRandom + name;
  WithReference r;
  r.backend = make_backend(backend_name);
  r.model = load_model(dir, *r.backend);
  const SafetensorsReader ref = SafetensorsReader::open_or_throw(dir + "/reference.safetensors");
  r.ids = read_ids(ref, "full_ids");
  r.want = read_f64(ref, "full_logits_f64");
  return r;
}

TEST_P(TinyRandom, LogitsMatchFp64Reference) {
  const auto& [name, backend_name] = GetParam();
  WithReference r = load_with_reference(name, backend_name);
  expect_logits_close(prefill_logits(*r.model, *r.backend, r.ids, /*reversed_table=*/true), r.want, name + " on " + backend_name);
}

TEST_P(TinyRandom, DecodeStepsMatchFp64Reference) {
  const auto& [name, backend_name] = GetParam();
  WithReference r = load_with_reference(name, backend_name);
  expect_logits_close(decode_logits(*r.model, *r.backend, r.ids), r.want, name + " decode on " + backend_name);
}

class TinyRandomBf16 : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyRandomBf16, LogitsMatchFp32ComputeOnBf16Weights) {
  const std::string dir = kTinyRandom + "llama3-rope-scaled-bf16";
  auto backend_ptr = make_backend(GetParam());
  Backend& backend = *backend_ptr;
  auto model = load_model(dir, backend);
  const SafetensorsReader ref = SafetensorsReader::open_or_throw(dir + "/reference.safetensors");
  const std::vector<std::int32_t> ids = read_ids(ref, "input_ids");
  const TensorInfo& want_t = ref.get_or_throw("logits_f32_from_bf16_weights");
  const auto* want = reinterpret_cast<const float*>(want_t.bytes.data());
  const std::vector<float> got = prefill_logits(*model, backend, ids, /*reversed_table=*/true);
  ASSERT_EQ(static_cast<std::int64_t>(got.size()), want_t.numel());
  double max_ref = 0, max_err = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(double(want[i])));
    max_err = std::max(max_err, std::fabs(double(got[i]) - want[i]));
  }
  EXPECT_LE(max_err, 1e-5 * max_ref + 1e-5) << "max abs error " << max_err;
}

std::string test_name(const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& info) {
  std::string dir = std::get<0>(info.param);
  dir = dir.substr(dir.rfind('/') + 1);  // "../tiny-random-w2/gpt-oss" -> "gpt-oss"
  std::string n = dir + "_" + std::get<1>(info.param);
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Models, TinyRandom,
                         ::testing::Combine(::testing::Values("llama3-rope-scaled", "smollm2-like-llama-tied",
                                                              "qwen2-bias-tied", "qwen3-qknorm-tied",
                                                              "mistral-swa8", "phi3-fused", "gemma3-text-swa8"),
                                            ::testing::Values("reference", "fast")),
                         test_name);
// The mixture-of-experts models of tiny-random-w2 (same tolerance).
INSTANTIATE_TEST_SUITE_P(MoeModels, TinyRandom,
                         ::testing::Combine(::testing::Values("../tiny-random-w2/qwen3-moe", "../tiny-random-w2/gpt-oss"),
                                            ::testing::Values("reference", "fast")),
                         test_name);
INSTANTIATE_TEST_SUITE_P(Backends, TinyRandomBf16, ::testing::Values("reference", "fast"));

}  // namespace
}  // namespace akv
