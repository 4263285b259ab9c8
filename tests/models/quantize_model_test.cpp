// --quantize: a safetensors checkpoint's matrices quantized at load (models/quantize_weights.h).
// Which tensors get which type (k-quant fallbacks included), that the quantized model runs on
// both CPU backends close to its unquantized self, and the refusals.
//
// Tolerances (a random 2-layer model, hidden 256 so Q4_K and Q6_K apply; such models are
// sensitive: the converter's own Q8_0 files move 20% of their greedy ids, gguf_model_test):
// the weights' rounding (per-element bounds in tests/tensor/quantize_test.cpp: Q8_0 ~1/254,
// Q6_K ~1/62, Q4_K ~1/15 of each block's range) moves the largest logit error to measured 2%,
// 7.7% and 28% of the largest logit, held to 4%, 12% and 40%, and in that order. The fast
// backend adds int8 inputs: held to 5% of the largest logit against the reference on the same
// quantized weights.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu/fast_backend.h"
#include "backend/cpu/reference_backend.h"
#include "base/error.h"
#include "models/model.h"
#include "models/quantize_weights.h"
#include "prefill_logits.h"
#include "tiny_model.h"

namespace akv {
namespace {

namespace fs = std::filesystem;
using test::prefill_logits;

std::string tiny_dir() {
  static const std::string dir = [] {
    const std::string d =
        (fs::temp_directory_path() / ("akv_quantize_" + std::to_string(::getpid()))).string();
    TinyModelSpec s;
    s.family = "llama";
    s.hidden = 256, s.intermediate = 512, s.layers = 2, s.heads = 4, s.kv_heads = 2, s.vocab = 512;
    s.dtype = DType::BF16;
    s.seed = 5;
    write_tiny_model(s, d);
    return d;
  }();
  return dir;
}

// max |a - b| / max |b|
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(double(a[i]) - b[i]));
    ref = std::max(ref, std::fabs(double(b[i])));
  }
  return err / ref;
}

const std::vector<std::int32_t> kIds = {1, 17, 300, 42, 99, 5, 511, 250, 3, 77, 128, 64};

TEST(QuantizeWeights, TypesAndFallbacks) {
  EXPECT_EQ(find_quantize_type("q8_0"), DType::Q8_0);
  EXPECT_EQ(find_quantize_type("q6_k"), DType::Q6_K);
  EXPECT_EQ(find_quantize_type("q4_k"), DType::Q4_K);
  EXPECT_FALSE(find_quantize_type("Q4_K").has_value());
  EXPECT_FALSE(find_quantize_type("q4_0").has_value());
  EXPECT_EQ(quantized_type_for(DType::Q4_K, 512), DType::Q4_K);
  EXPECT_EQ(quantized_type_for(DType::Q4_K, 576), DType::Q5_0);  // SmolLM2's hidden size
  EXPECT_EQ(quantized_type_for(DType::Q6_K, 576), DType::Q8_0);
  EXPECT_EQ(quantized_type_for(DType::Q8_0, 576), DType::Q8_0);
  EXPECT_FALSE(quantized_type_for(DType::Q8_0, 40).has_value());

  ModelConfig c = load_model_config(tiny_dir());
  const SafetensorsReader q =
      quantize_weights(SafetensorsReader::open_or_throw(tiny_dir()), c, DType::Q4_K, [](DType) { return true; });
  EXPECT_EQ(q.get_or_throw("model.layers.0.self_attn.q_proj.weight").dtype, DType::Q4_K);
  EXPECT_EQ(q.get_or_throw("model.layers.1.mlp.down_proj.weight").dtype, DType::Q4_K);
  EXPECT_EQ(q.get_or_throw("model.embed_tokens.weight").dtype, DType::Q4_K);
  EXPECT_EQ(q.get_or_throw("model.layers.0.input_layernorm.weight").dtype, DType::BF16);
  EXPECT_EQ(q.get_or_throw("model.norm.weight").dtype, DType::BF16);
  const TensorInfo& up = q.get_or_throw("model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(up.bytes.size(), dtype_row_bytes(DType::Q4_K, 256) * 512);
}

TEST(QuantizeWeights, QuantizedModelsRunCloseToTheirCheckpoint) {
  ReferenceBackend ref;
  FastBackend fast(2);
  const std::vector<float> want = prefill_logits(*load_model(tiny_dir(), ref), ref, kIds);
  std::vector<double> errors;
  for (const auto& [t, tol] :
       {std::pair{DType::Q8_0, 0.04}, {DType::Q6_K, 0.12}, {DType::Q4_K, 0.40}}) {
    const std::vector<float> on_ref = prefill_logits(*load_model(tiny_dir(), ref, t), ref, kIds);
    const std::vector<float> on_fast = prefill_logits(*load_model(tiny_dir(), fast, t), fast, kIds);
    const double e_ref = rel_error(on_ref, want), e_fast = rel_error(on_fast, on_ref);
    EXPECT_LE(e_ref, tol) << dtype_name(t);
    EXPECT_GT(e_ref, 0.0) << dtype_name(t) << ": the weights were not quantized";
    EXPECT_LE(e_fast, 0.05) << dtype_name(t);
    RecordProperty(std::string(dtype_name(t)) + "_rel_error",
                   std::to_string(e_ref) + " fast " + std::to_string(e_fast));
    errors.push_back(e_ref);
  }
  EXPECT_TRUE(errors[0] < errors[1] && errors[1] < errors[2]) << "coarser types must err more";
}

class NoQuantizedWeights : public ReferenceBackend {
 public:
  bool takes_quantized_weight(DType) const override { return false; }
};

TEST(QuantizeWeights, Refusals) {
  NoQuantizedWeights backend;
  try {
    load_model(tiny_dir(), backend, DType::Q8_0);
    ADD_FAILURE() << "a backend without quantized matmul accepted --quantize";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("Q8_0"), std::string::npos) << e.what();
  }
  // quantize_weights names the first matrix stored in a type the backend refuses.
  ModelConfig c = load_model_config(tiny_dir());
  try {
    quantize_weights(SafetensorsReader::open_or_throw(tiny_dir()), c, DType::Q4_K,
                     [](DType t) { return t != DType::Q4_K; });
    ADD_FAILURE() << "a refused type was produced";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find(".weight: --quantize Q4_K stores it as Q4_K"), std::string::npos) << e.what();
  }
  // The k-quants' fallback (Q5_0 for Q4_K) is needed only by a matrix that is not whole
  // 256-element blocks: a backend without it still takes this checkpoint.
  EXPECT_NO_THROW(quantize_weights(SafetensorsReader::open_or_throw(tiny_dir()), c, DType::Q4_K,
                                   [](DType t) { return t != DType::Q5_0; }));
  ReferenceBackend ref;
  try {
    load_model("/nonexistent/model.gguf", ref, DType::Q8_0);
    ADD_FAILURE() << "--quantize accepted for a GGUF file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  }
}

}  // namespace
}  // namespace akv
