// Loading MoE experts: GPT-OSS's released MXFP4 layout (`*_blocks` [E, out, in / 32, 16] and
// `*_scales` [E, out, in / 32]) against the float layout transformers dequantises it to
// ([E, in, out]: decoded, then the last two dims swapped), through the whole moe op; small
// weights converted to F32 at load (GPT-OSS's bf16 sinks); Qwen3-MoE's dense (mlp_only) layers.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <random>

#include "backend/cpu/host_buffer.h"
#include "backend/cpu/reference_backend.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "models/model.h"
#include "models/moe_block.h"
#include "tensor/safetensors.h"

namespace akv {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("akv_moe_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

template <typename T>
std::span<const std::uint8_t> bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T)};
}

std::vector<std::uint8_t> random_bytes(std::mt19937& rng, std::size_t n, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<std::uint8_t> b(n);
  for (auto& v : b) v = static_cast<std::uint8_t>(d(rng));
  return b;
}

std::vector<float> random_floats(std::mt19937& rng, std::size_t n) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// [E, out, in] MXFP4 rows decoded, stored as transformers' [E, in, out] floats.
std::vector<float> dequantize_transposed(const std::vector<std::uint8_t>& blocks,
                                         const std::vector<std::uint8_t>& scales,
                                         std::int64_t n_experts, std::int64_t out,
                                         std::int64_t in) {
  std::vector<float> row(static_cast<std::size_t>(in)),
      t(static_cast<std::size_t>(n_experts * out * in));
  for (std::int64_t e = 0; e < n_experts; ++e)
    for (std::int64_t o = 0; o < out; ++o) {
      const std::int64_t r = e * out + o;
      decode_mxfp4_row(blocks.data() + r * in / 2, scales.data() + r * in / 32, in, row.data());
      for (std::int64_t i = 0; i < in; ++i) t[(e * in + i) * out + o] = row[i];
    }
  return t;
}

TEST(GptOssExperts, Mxfp4CheckpointEqualsItsDequantisedFloatCheckpoint) {
  const std::int64_t n = 4, hidden = 64, inter = 32, rows = 5;
  ModelConfig c;
  c.hidden_size = hidden;
  c.moe = {.n_experts = n, .top_k = 2, .inter = inter, .swiglu_limit = 7.0, .layer_is_moe = {true}};
  std::mt19937 rng(7);
  const auto gu_blocks = random_bytes(rng, n * 2 * inter * hidden / 2, 0, 255);
  const auto gu_scales = random_bytes(rng, n * 2 * inter * hidden / 32, 122, 127);
  const auto dn_blocks = random_bytes(rng, n * hidden * inter / 2, 0, 255);
  const auto dn_scales = random_bytes(rng, n * hidden * inter / 32, 122, 127);
  const auto router = random_floats(rng, n * hidden), router_bias = random_floats(rng, n);
  const auto gu_bias = random_floats(rng, n * 2 * inter), dn_bias = random_floats(rng, n * hidden);
  const auto gu_float = dequantize_transposed(gu_blocks, gu_scales, n, 2 * inter, hidden);
  const auto dn_float = dequantize_transposed(dn_blocks, dn_scales, n, hidden, inter);

  const std::string p = "model.layers.0.mlp.";
  const std::vector<TensorToWrite> common = {
      {p + "router.weight", DType::F32, {n, hidden}, bytes_of(router)},
      {p + "router.bias", DType::F32, {n}, bytes_of(router_bias)},
      {p + "experts.gate_up_proj_bias", DType::F32, {n, 2 * inter}, bytes_of(gu_bias)},
      {p + "experts.down_proj_bias", DType::F32, {n, hidden}, bytes_of(dn_bias)}};
  std::vector<TensorToWrite> mx = common, fl = common;
  mx.push_back(
      {p + "experts.gate_up_proj_blocks", DType::U8, {n, 2 * inter, hidden / 32, 16}, gu_blocks});
  mx.push_back(
      {p + "experts.gate_up_proj_scales", DType::U8, {n, 2 * inter, hidden / 32}, gu_scales});
  mx.push_back({p + "experts.down_proj_blocks", DType::U8, {n, hidden, inter / 32, 16}, dn_blocks});
  mx.push_back({p + "experts.down_proj_scales", DType::U8, {n, hidden, inter / 32}, dn_scales});
  fl.push_back(
      {p + "experts.gate_up_proj", DType::F32, {n, hidden, 2 * inter}, bytes_of(gu_float)});
  fl.push_back({p + "experts.down_proj", DType::F32, {n, inter, hidden}, bytes_of(dn_float)});
  const std::string dir = temp_dir("gpt_oss");
  write_safetensors(dir + "/mxfp4.safetensors", mx);
  write_safetensors(dir + "/float.safetensors", fl);

  ReferenceBackend backend;
  const SafetensorsReader mx_reader = SafetensorsReader::open_or_throw(dir + "/mxfp4.safetensors");
  const SafetensorsReader fl_reader = SafetensorsReader::open_or_throw(dir + "/float.safetensors");
  WeightLoader mx_loader(mx_reader, backend, "mxfp4"), fl_loader(fl_reader, backend, "float");
  const MoeLayerWeights mx_w = load_gpt_oss_experts(mx_loader, p, c);
  const MoeLayerWeights fl_w = load_gpt_oss_experts(fl_loader, p, c);
  EXPECT_EQ(mx_w.experts.format, ExpertFormat::Mxfp4);
  EXPECT_EQ(fl_w.experts.format, ExpertFormat::Float);

  HostBuffer x(DType::F32, rows, hidden), logits(DType::F32, rows, n), route(DType::F32, rows, 4),
      gate_up(DType::F32, rows * 2, 2 * inter), act(DType::F32, rows * 2, inter),
      down(DType::F32, rows * 2, hidden);
  const auto xs = random_floats(rng, rows * hidden);
  backend.upload(xs, x.tensor());
  backend.matmul(x.tensor(), mx_w.router, &mx_w.router_bias, logits.tensor());
  const MoeScratch s{route.tensor(), gate_up.tensor(), act.tensor(), down.tensor()};
  std::vector<float> got[2];
  for (int i = 0; i < 2; ++i) {
    const MoeLayerWeights& w = i == 0 ? mx_w : fl_w;
    HostBuffer out(DType::F32, rows, hidden);
    backend.moe(x.tensor(), logits.tensor(), w.experts, w.params, s, out.tensor());
    got[i].resize(static_cast<std::size_t>(rows * hidden));
    backend.download(out.tensor(), got[i]);
  }
  EXPECT_EQ(got[0], got[1]);  // the same values in the same order: bit for bit
  double norm = 0;
  for (float v : got[0]) norm += std::fabs(v);
  EXPECT_GT(norm, 0.0);
  fs::remove_all(dir);
}

TEST(WeightLoader, GetF32ConvertsBf16AtLoad) {
  const std::vector<std::uint16_t> sinks = {f32_to_bf16(1.5f), f32_to_bf16(-0.25f),
                                            f32_to_bf16(3.0f)};
  const std::string dir = temp_dir("sinks");
  write_safetensors(dir + "/model.safetensors",
                    std::vector<TensorToWrite>{{"sinks", DType::BF16, {3}, bytes_of(sinks)}});
  ReferenceBackend backend;
  const SafetensorsReader reader = SafetensorsReader::open_or_throw(dir + "/model.safetensors");
  WeightLoader loader(reader, backend, "test");
  const WeightRef w = loader.get_f32("sinks", {3});
  ASSERT_EQ(w.dtype, DType::F32);
  ASSERT_EQ(w.cols, 3);
  const auto* f = static_cast<const float*>(w.data);
  EXPECT_EQ(f[0], 1.5f);
  EXPECT_EQ(f[1], -0.25f);
  EXPECT_EQ(f[2], 3.0f);
  EXPECT_THROW(loader.get_bytes("sinks", {3}, 1), Error);  // not U8
  fs::remove_all(dir);
}

}  // namespace
}  // namespace akv

namespace akv {
namespace {

// Qwen3-MoE's dense layers (mlp_only_layers): the tiny Qwen3-MoE with layer 1 made dense (its MLP
// = expert 0 of that layer) gives the logits of the same model with every expert of layer 1 set
// to expert 0 (norm_topk_prob: the chosen weights sum to 1, so the layer is that expert).
TEST(Qwen3MoeDenseLayers, MlpOnlyLayerEqualsIdenticalExperts) {
  const std::string src = std::string(AGENTKV_TESTDATA) + "/models/tiny-random-w2/qwen3-moe";
  const SafetensorsReader fixture = SafetensorsReader::open_or_throw(src + "/model.safetensors");
  const std::string l1 = "model.layers.1.mlp.";
  std::vector<TensorToWrite> dense, same;
  for (const std::string& name : fixture.names()) {
    const TensorInfo& t = fixture.get_or_throw(name);
    TensorToWrite w{name, t.dtype, t.shape, t.bytes};
    if (name.starts_with(l1 + "experts.")) {
      const std::string proj =
          name.substr(name.rfind('.', name.size() - 8) + 1);  // "gate_proj.weight"
      w.bytes = fixture.get_or_throw(l1 + "experts.0." + proj).bytes;
      same.push_back(w);
      if (name.starts_with(l1 + "experts.0."))
        dense.push_back({l1 + proj, t.dtype, t.shape, w.bytes});
    } else {
      same.push_back(w);
      if (name != l1 + "gate.weight") dense.push_back(w);
    }
  }
  std::string config = read_file_or_throw(src + "/config.json");
  const std::string dir_same = temp_dir("qwen3_same"), dir_dense = temp_dir("qwen3_dense");
  write_safetensors(dir_same + "/model.safetensors", same);
  write_safetensors(dir_dense + "/model.safetensors", dense);
  auto write_config = [](const std::string& path, const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  };
  write_config(dir_same + "/config.json", config);
  auto replace = [&config](const std::string& from, const std::string& to) {
    const std::size_t at = config.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    config.replace(at, from.size(), to);
  };
  replace("\"mlp_only_layers\": []", "\"mlp_only_layers\": [1]");
  replace("\"intermediate_size\": 96", "\"intermediate_size\": 32");  // the dense MLP's width
  write_config(dir_dense + "/config.json", config);

  std::vector<float> logits[2];
  for (int i = 0; i < 2; ++i) {
    ReferenceBackend backend;
    auto model = load_model(i == 0 ? dir_same : dir_dense, backend);
    EXPECT_EQ(model->config().moe.layer_is_moe, (std::vector<bool>{true, i == 0}));
    const std::vector<std::int32_t> ids = {81, 213, 287, 262, 424, 213, 75};
    const std::int64_t block = 16;
    KvStorage kv = backend.alloc_kv(kv_layout_for(model->config(), 1, block, DType::F32));
    const std::int32_t table[] = {0};
    const SequenceChunk chunk{.first_row = 0,
                              .n_tokens = static_cast<std::int32_t>(ids.size()),
                              .start_pos = 0,
                              .block_table = table};
    const std::vector<std::int32_t> pos = positions_for({&chunk, 1});
    const std::int32_t last = chunk.n_tokens - 1;
    const ForwardBatch batch{
        .tokens = ids, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = {&last, 1}};
    logits[i].resize(static_cast<std::size_t>(model->config().vocab_size));
    model->forward(batch, kv, logits[i]);
  }
  double max_err = 0, max_ref = 0;
  for (std::size_t j = 0; j < logits[0].size(); ++j) {
    max_ref = std::max(max_ref, std::fabs(double(logits[0][j])));
    max_err = std::max(max_err, std::fabs(double(logits[0][j]) - logits[1][j]));
  }
  EXPECT_GT(max_ref, 0.1);
  EXPECT_LE(max_err, 1e-5 * max_ref);
  fs::remove_all(dir_same);
  fs::remove_all(dir_dense);
}

}  // namespace
}  // namespace akv
