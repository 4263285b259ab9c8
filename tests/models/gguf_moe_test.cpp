// Mixture-of-experts models from GGUF files made by llama.cpp's converter from the tiny-random-w2
// checkpoints (testdata/gguf, README there): Qwen3-MoE in f32, GPT-OSS in f16 and with its
// experts in MXFP4. The same ModelConfig as config.json, the checkpoint's expert tensors back
// under their names and layouts, logits as the safetensors model's. Qwen3-MoE with quantized
// experts (the f32 file rewritten with its expert stacks in Q8_0 and Q5_0) keeps their blocks and
// computes the logits of the same file with its experts dequantized at load.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../tensor/gguf_test_writer.h"
#include "backend/cpu/fast_backend.h"
#include "backend/cpu/reference_backend.h"
#include "base/error.h"
#include "gguf_test_util.h"
#include "models/gguf_config.h"
#include "models/gguf_weights.h"
#include "models/model.h"
#include "models/moe_block.h"
#include "models/rope.h"
#include "models/weight_loader.h"
#include "tensor/dequantize.h"
#include "tensor/dtype.h"
#include "tensor/quantize.h"
#include "tensor/safetensors.h"

namespace akv {
namespace {

using namespace test;  // NOLINT: the helpers of gguf_test_util.h
const std::string kW2 = std::string(AGENTKV_TESTDATA) + "/models/tiny-random-w2/";

std::shared_ptr<const GgufReader> open_gguf_path(const std::string& path) {
  return std::make_shared<const GgufReader>(GgufReader::open_or_throw(path));
}
std::shared_ptr<const GgufReader> open_gguf(const std::string& fixture) {
  return open_gguf_path(gguf_fixture(fixture));
}

std::vector<std::unique_ptr<Backend>> both_backends() {
  std::vector<std::unique_ptr<Backend>> b;
  b.push_back(std::make_unique<ReferenceBackend>());
  b.push_back(std::make_unique<FastBackend>());
  return b;
}

struct MoeFixture {
  std::string checkpoint, gguf;
};
void PrintTo(const MoeFixture& f, std::ostream* os) {
  *os << f.gguf;
}
class GgufMoeConfig : public ::testing::TestWithParam<MoeFixture> {};

// Every field of the ModelConfig, the MoE ones included, agrees with config.json's.
TEST_P(GgufMoeConfig, MatchesConfigJson) {
  const ModelConfig want = load_model_config(kW2 + GetParam().checkpoint);
  const ModelConfig got = model_config_from_gguf(*open_gguf(GetParam().gguf));
  EXPECT_EQ(got.architecture, want.architecture);
  expect_same_config(got, want);
}

INSTANTIATE_TEST_SUITE_P(Models, GgufMoeConfig,
                         ::testing::Values(MoeFixture{"qwen3-moe", "qwen3-moe-f32"},
                                           MoeFixture{"gpt-oss", "gpt-oss-f16"},
                                           MoeFixture{"gpt-oss", "gpt-oss-mxfp4"}),
                         [](const auto& info) {
                           std::string n = info.param.gguf;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// The f32 file's tensors are the checkpoint's exactly, the per-expert matrices sliced from the
// stacked ones, all of them and nothing else.
TEST(GgufMoe, Qwen3MoeWeightsAreTheCheckpoints) {
  const SafetensorsReader want = SafetensorsReader::open_or_throw(kW2 + "qwen3-moe");
  auto gguf = open_gguf("qwen3-moe-f32");
  EXPECT_EQ(gguf_weight_dtype(*gguf, DType::BF16), DType::F32);
  const SafetensorsReader got = weights_from_gguf(gguf, model_config_from_gguf(*gguf), DType::F32);
  EXPECT_EQ(got.size(), want.size());
  expect_same_tensors(got, want);
}

// Loaded from GGUF, Qwen3-MoE computes the safetensors model's logits and meets the fp64
// reference at the safetensors path's tolerance, on both CPU backends.
TEST(GgufMoe, Qwen3MoeLogitsMatchTheCheckpointAndReference) {
  const Reference ref = read_reference_at(kW2 + "qwen3-moe");
  for (const auto& backend : both_backends()) {
    std::unique_ptr<Model> gguf = load_model(gguf_fixture("qwen3-moe-f32"), *backend);
    std::unique_ptr<Model> st = load_model(kW2 + "qwen3-moe", *backend);
    const std::vector<float> got = prefill_logits(*gguf, *backend, ref.ids);
    const std::vector<float> want = prefill_logits(*st, *backend, ref.ids);
    const auto [err, max_ref] = max_error(got, ref.logits);
    EXPECT_LE(err, 1e-5 * max_ref + 1e-5) << "max abs error " << err;
    const auto [diff, max_st] = max_error(got, std::vector<double>(want.begin(), want.end()));
    EXPECT_LE(diff, 1e-6 * max_st + 1e-6) << "against the safetensors model: " << diff;
  }
}

// The f16 file's GPT-OSS tensors are the checkpoint's rounded to f16: the float experts
// transposed back to [E, in, out] with gate and up interleaved again, biases likewise, the
// sinks and the MLP norm under their checkpoint names.
TEST(GgufMoe, GptOssF16WeightsAreTheCheckpointsRounded) {
  const SafetensorsReader want = SafetensorsReader::open_or_throw(kW2 + "gpt-oss");
  auto gguf = open_gguf("gpt-oss-f16");
  EXPECT_EQ(gguf_weight_dtype(*gguf, DType::BF16), DType::F16);
  const SafetensorsReader got = weights_from_gguf(gguf, model_config_from_gguf(*gguf), DType::F16);
  EXPECT_EQ(got.size(), want.size());
  for (const std::string& tensor : want.names()) {
    SCOPED_TRACE(tensor);
    const TensorInfo* g = got.find(tensor);
    ASSERT_NE(g, nullptr);
    const TensorInfo& w = want.get_or_throw(tensor);
    ASSERT_EQ(g->shape, w.shape);
    EXPECT_EQ(g->dtype, DType::F16);
    const std::vector<float> gv = to_f32(*g), wv = to_f32(w);
    std::size_t n_diff = 0;
    for (std::size_t i = 0; i < wv.size(); ++i) n_diff += gv[i] != f16_to_f32(f32_to_f16(wv[i]));
    EXPECT_EQ(n_diff, 0u);
  }
}

// The f16 GPT-OSS model runs within f16 rounding of the fp64 reference and of the f32
// safetensors model (a wrong layout errs by the size of the logits).
TEST(GgufMoe, GptOssF16LogitsWithinF16OfTheReference) {
  const Reference ref = read_reference_at(kW2 + "gpt-oss");
  for (const auto& backend : both_backends()) {
    std::unique_ptr<Model> model = load_model(gguf_fixture("gpt-oss-f16"), *backend);
    EXPECT_EQ(model->config().dtype, DType::F16);
    const auto [err, max_ref] = max_error(prefill_logits(*model, *backend, ref.ids), ref.logits);
    EXPECT_LE(err, 5e-3 * max_ref) << "max abs error " << err;
  }
}

// The checkpoint of testdata/gguf's MXFP4 experts: the float tiny-random GPT-OSS with its
// experts replaced by those released-layout blocks and scales, in `dir`.
std::string write_mxfp4_checkpoint(const std::string& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kW2 + "gpt-oss/config.json", dir + "/config.json");
  const SafetensorsReader floats = SafetensorsReader::open_or_throw(kW2 + "gpt-oss");
  const SafetensorsReader experts =
      SafetensorsReader::open_or_throw(unpacked_fixture("gpt-oss-mxfp4-experts.safetensors"));
  std::vector<TensorToWrite> tensors;
  for (const SafetensorsReader* r : {&floats, &experts})
    for (const std::string& name : r->names()) {
      if (name.ends_with("experts.gate_up_proj") || name.ends_with("experts.down_proj")) continue;
      const TensorInfo& t = r->get_or_throw(name);
      tensors.push_back({t.name, t.dtype, t.shape, t.bytes});
    }
  write_safetensors(dir + "/model.safetensors", tensors);
  return dir;
}

// The converter repacked the released MXFP4 experts into ggml blocks and split gate from up;
// mapped back they are the released bytes exactly, and the rest of the file loads in f32.
TEST(GgufMoe, GptOssMxfp4ExpertsAreTheReleasedBytes) {
  auto gguf = open_gguf("gpt-oss-mxfp4");
  EXPECT_EQ(gguf_weight_dtype(*gguf, DType::BF16), DType::F32);
  const SafetensorsReader got = weights_from_gguf(gguf, model_config_from_gguf(*gguf), DType::F32);
  const SafetensorsReader want =
      SafetensorsReader::open_or_throw(unpacked_fixture("gpt-oss-mxfp4-experts.safetensors"));
  ASSERT_EQ(want.size(), 16u);  // 4 layers x gate_up/down x blocks/scales
  EXPECT_EQ(want.get_or_throw("model.layers.0.mlp.experts.down_proj_blocks").dtype, DType::U8);
  expect_same_tensors(got, want);
  EXPECT_EQ(got.find("model.layers.0.mlp.experts.gate_up_proj"), nullptr);
}

// The MXFP4 GGUF model computes the MXFP4 safetensors model's logits, on both CPU backends.
TEST(GgufMoe, GptOssMxfp4LogitsMatchTheMxfp4Checkpoint) {
  const std::string dir = write_mxfp4_checkpoint(::testing::TempDir() + "/gguf_gpt_oss_mxfp4");
  const Reference ref = read_reference_at(kW2 + "gpt-oss");
  for (const auto& backend : both_backends()) {
    std::unique_ptr<Model> gguf = load_model(gguf_fixture("gpt-oss-mxfp4"), *backend);
    std::unique_ptr<Model> st = load_model(dir, *backend);
    const std::vector<float> got = prefill_logits(*gguf, *backend, ref.ids);
    const std::vector<float> want = prefill_logits(*st, *backend, ref.ids);
    const auto [diff, max_st] = max_error(got, std::vector<double>(want.begin(), want.end()));
    EXPECT_LE(diff, 1e-6 * max_st + 1e-6) << "against the safetensors model: " << diff;
  }
}

// A stacked expert tensor of the wrong shape is refused, naming the file and the tensor.
TEST(GgufMoe, WrongExpertShapeIsNamed) {
  auto gguf = open_gguf("qwen3-moe-f32");
  ModelConfig c = model_config_from_gguf(*gguf);
  c.moe.inter *= 2;
  try {
    weights_from_gguf(gguf, c, DType::F32);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadFormat);
    EXPECT_NE(std::string(e.what()).find("'blk.0.ffn_gate_exps.weight'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(gguf->path()), std::string::npos) << e.what();
  }
}

// `src` rewritten to `out` with its ffn_{gate,up}_exps stacks quantized to `gate_up` and
// ffn_down_exps to `down` (the repo's quantizer, row by row); every other tensor as it is.
void write_quantized_experts(const GgufReader& src, const std::string& out, DType gate_up, DType down) {
  test::GgufTestWriter w;
  for (const auto& [key, value] : src.metadata().entries())
    if (key != "general.alignment") w.kv_value(key, value);
  for (const std::string& name : src.names()) {
    const GgufTensor& t = *src.find(name);
    std::vector<std::uint64_t> dims(t.dims.begin(), t.dims.end());
    std::string data(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
    GgmlType type = t.type;
    const bool gu = name.ends_with("ffn_gate_exps.weight") || name.ends_with("ffn_up_exps.weight");
    if (gu || name.ends_with("ffn_down_exps.weight")) {
      EXPECT_EQ(t.type, GgmlType::F32) << name;
      const DType q = gu ? gate_up : down;
      const auto cols = static_cast<std::int64_t>(dims[0]);
      const std::size_t row_bytes = dtype_row_bytes(q, cols);
      const std::int64_t rows = t.numel() / cols;
      const auto* f = reinterpret_cast<const float*>(t.bytes.data());
      std::vector<std::uint8_t> blocks(row_bytes * static_cast<std::size_t>(rows));
      for (std::int64_t r = 0; r < rows; ++r)
        quantize_row(q, {f + r * cols, static_cast<std::size_t>(cols)}, {blocks.data() + r * row_bytes, row_bytes});
      data.assign(reinterpret_cast<const char*>(blocks.data()), blocks.size());
      type = *find_ggml_type_of(q);
    }
    w.tensor({name, type, dims, data, -1});
  }
  w.write(out);
}

// A reference backend that takes every quantized type but Q5_0 (whose experts are then
// dequantized at load, the fallback of a backend without kernels for a type).
class NoQ5Backend : public ReferenceBackend {
 public:
  bool takes_quantized_weight(DType t) const override { return t != DType::Q5_0 && dtype_is_quantized(t); }
};

// Quantized experts stay in their blocks (gate/up Q8_0, down Q5_0 zero copy from the mapping) and
// compute the logits of the same file with its experts dequantized at load: exactly on the
// reference backend, within the int8 rounding of the inputs on the fast one.
TEST(GgufMoe, Qwen3MoeQuantizedExpertsKeepTheirBlocks) {
  const std::string path = ::testing::TempDir() + "/gguf_qwen3_moe_q8_q5.gguf";
  write_quantized_experts(*open_gguf("qwen3-moe-f32"), path, DType::Q8_0, DType::Q5_0);
  auto gguf = open_gguf_path(path);
  const ModelConfig c = model_config_from_gguf(*gguf);
  {
    ReferenceBackend backend;
    const SafetensorsReader st = weights_from_gguf(gguf, c, DType::F32, [](DType) { return true; });
    WeightLoader loader(st, backend, path);
    const MoeLayerWeights l = load_qwen3_moe_experts(loader, "model.layers.1.mlp.", c);
    EXPECT_EQ(l.experts.format, ExpertFormat::GgufBlocks);
    EXPECT_EQ(l.experts.gate_up.dtype, DType::Q8_0);
    EXPECT_EQ(l.experts.down.dtype, DType::Q5_0);
    EXPECT_EQ(l.experts.down.data, gguf->get_or_throw("blk.1.ffn_down_exps.weight").bytes.data());
    NoQ5Backend no_q5;
    const SafetensorsReader deq = weights_from_gguf(
        gguf, c, DType::F32, [&no_q5](DType t) { return no_q5.takes_quantized_weight(t); });
    WeightLoader deq_loader(deq, no_q5, path);
    const MoeLayerWeights f = load_qwen3_moe_experts(deq_loader, "model.layers.1.mlp.", c);
    EXPECT_EQ(f.experts.format, ExpertFormat::Float);
    EXPECT_EQ(f.experts.gate_up.dtype, DType::F32);
  }
  const Reference ref = read_reference_at(kW2 + "qwen3-moe");
  NoQ5Backend no_q5;
  std::unique_ptr<Model> dequantized = load_model(path, no_q5);
  const std::vector<float> want = prefill_logits(*dequantized, no_q5, ref.ids);
  const std::vector<double> want_d(want.begin(), want.end());
  ReferenceBackend reference;
  std::unique_ptr<Model> blocks = load_model(path, reference);
  const auto [same, max_ref] = max_error(prefill_logits(*blocks, reference, ref.ids), want_d);
  EXPECT_LE(same, 1e-6 * max_ref) << "reference backend: " << same;
  FastBackend fast;
  std::unique_ptr<Model> fast_blocks = load_model(path, fast);
  const auto [diff, max_fast] = max_error(prefill_logits(*fast_blocks, fast, ref.ids), want_d);
  EXPECT_LE(diff, 2e-2 * max_fast) << "fast backend: " << diff;
}

// Quantized gate/up with float down (a --quantize fallback for a width no block fits) load as
// float experts: the quantized ones dequantized at load, the op's result that of the blocks.
TEST(GgufMoe, Qwen3MoeMixedQuantizedAndFloatExpertsFallBackToFloat) {
  const std::string path = ::testing::TempDir() + "/gguf_qwen3_moe_q8_q5_mixed.gguf";
  write_quantized_experts(*open_gguf("qwen3-moe-f32"), path, DType::Q8_0, DType::Q5_0);
  auto gguf = open_gguf_path(path);
  const ModelConfig c = model_config_from_gguf(*gguf);
  const SafetensorsReader st = weights_from_gguf(gguf, c, DType::F32, [](DType) { return true; });
  std::vector<TensorInfo> tensors;
  std::vector<std::vector<std::uint8_t>> storage;
  for (const std::string& name : st.names()) {
    TensorInfo t = st.get_or_throw(name);
    if (name.ends_with("down_proj.weight") && dtype_is_quantized(t.dtype)) {
      std::vector<float> v(static_cast<std::size_t>(t.numel()));
      dequantize(*find_ggml_type_of(t.dtype), t.bytes, v);
      storage.emplace_back(reinterpret_cast<const std::uint8_t*>(v.data()),
                           reinterpret_cast<const std::uint8_t*>(v.data() + v.size()));
      t.dtype = DType::F32;
      t.bytes = storage.back();
    }
    tensors.push_back(t);
  }
  const SafetensorsReader mixed = SafetensorsReader::from_memory(path, std::move(tensors), std::move(storage), gguf);
  ReferenceBackend backend;
  WeightLoader blocks_loader(st, backend, path), mixed_loader(mixed, backend, path);
  const MoeLayerWeights b = load_qwen3_moe_experts(blocks_loader, "model.layers.0.mlp.", c);
  const MoeLayerWeights f = load_qwen3_moe_experts(mixed_loader, "model.layers.0.mlp.", c);
  ASSERT_EQ(b.experts.format, ExpertFormat::GgufBlocks);
  EXPECT_EQ(f.experts.format, ExpertFormat::Float);
  EXPECT_EQ(f.experts.gate_up.dtype, DType::F32);
  EXPECT_EQ(f.experts.down.dtype, DType::F32);
  std::vector<float> got(static_cast<std::size_t>(c.hidden_size)), want(got.size());
  for (const std::int64_t row : {std::int64_t{0}, b.experts.gate_up.rows - 1}) {
    expert_matrix_row(ExpertFormat::GgufBlocks, b.experts.gate_up, {}, row, want.data());
    expert_matrix_row(ExpertFormat::Float, f.experts.gate_up, {}, row, got.data());
    EXPECT_EQ(got, want) << "gate_up row " << row;
  }
}

}  // namespace
}  // namespace akv
