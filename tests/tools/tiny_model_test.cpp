// make_tiny_model's library: every family writes a checkpoint the reader and the config parser
// accept, with HF names and shapes; the same seed gives the same bytes; sharding changes only
// the file layout.
#include "tiny_model.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/reference_backend.h"
#include "base/error.h"
#include "models/config.h"
#include "models/model.h"
#include "models/sequence_runner.h"

namespace akv {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/tiny_model_test_" + name;
  fs::remove_all(dir);
  return dir;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<float> values(const TensorInfo& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  convert_to_f32(t.dtype, t.bytes.data(), out.data(), out.size());
  return out;
}

bool same_bytes(const TensorInfo& a, const TensorInfo& b) {
  return std::equal(a.bytes.begin(), a.bytes.end(), b.bytes.begin(), b.bytes.end());
}

TinyModelSpec small(const std::string& family) {
  TinyModelSpec s;
  s.family = family;
  s.hidden = 32, s.intermediate = 48, s.layers = 2, s.heads = 4, s.kv_heads = 2, s.vocab = 64;
  s.seed = 7;
  return s;
}

TEST(TinyModel, EveryFamilyRoundTrips) {
  for (const std::string family : {"llama", "mistral", "qwen2", "qwen3", "gemma3", "phi3"}) {
    SCOPED_TRACE(family);
    const TinyModelSpec spec = resolve_tiny_model_spec(small(family));
    const std::string dir = temp_dir(family);
    write_tiny_model(spec, dir);
    SafetensorsReader r = SafetensorsReader::open_or_throw(dir);
    ASSERT_TRUE(fs::exists(dir + "/model.safetensors"));

    const std::vector<TensorSpec> expected = tiny_model_tensors(spec);
    ASSERT_EQ(r.size(), expected.size());
    for (const TensorSpec& t : expected) {
      const TensorInfo& got = r.get_or_throw(t.name, t.shape);
      EXPECT_EQ(got.dtype, DType::F32) << t.name;
    }
    const std::int64_t h = 32, hd = 8, inter = 48, v = 64;
    const std::string l1 = "model.layers.1.";
    const std::vector<std::int64_t> embed_shape = {v, h}, norm_shape = {h};
    r.get_or_throw("model.embed_tokens.weight", embed_shape);
    r.get_or_throw("model.norm.weight", norm_shape);
    if (family == "phi3") {
      r.get_or_throw(l1 + "self_attn.qkv_proj.weight", std::vector<std::int64_t>{(4 + 4) * hd, h});
      r.get_or_throw(l1 + "mlp.gate_up_proj.weight", std::vector<std::int64_t>{2 * inter, h});
      EXPECT_EQ(r.find(l1 + "self_attn.q_proj.weight"), nullptr);
    } else {
      r.get_or_throw(l1 + "self_attn.q_proj.weight", std::vector<std::int64_t>{4 * hd, h});
      r.get_or_throw(l1 + "self_attn.k_proj.weight", std::vector<std::int64_t>{2 * hd, h});
      r.get_or_throw(l1 + "mlp.down_proj.weight", std::vector<std::int64_t>{h, inter});
    }
    r.get_or_throw(l1 + "self_attn.o_proj.weight", std::vector<std::int64_t>{h, 4 * hd});
    EXPECT_EQ(r.find(l1 + "self_attn.q_proj.bias") != nullptr, family == "qwen2");
    EXPECT_EQ(r.find(l1 + "self_attn.q_norm.weight") != nullptr,
              family == "qwen3" || family == "gemma3");
    EXPECT_EQ(r.find(l1 + "pre_feedforward_layernorm.weight") != nullptr, family == "gemma3");
    EXPECT_EQ(r.find("lm_head.weight") != nullptr, family != "gemma3");  // gemma3 ties

    // Norms are 1 (Gemma stores w - 1, so 0); matrices are centred noise of std 1/sqrt(fan_in).
    const float norm_value = family == "gemma3" ? 0.0f : 1.0f;
    for (float x : values(r.get_or_throw(l1 + "input_layernorm.weight"))) ASSERT_EQ(x, norm_value);
    const std::vector<float> w = values(r.get_or_throw(l1 + "mlp.down_proj.weight"));
    double sum = 0, sum_sq = 0;
    for (float x : w) sum += x, sum_sq += double(x) * x;
    const double mean = sum / w.size(), stddev = std::sqrt(sum_sq / w.size() - mean * mean);
    EXPECT_NEAR(stddev, 1.0 / std::sqrt(double(inter)), 0.015);
    EXPECT_NEAR(mean, 0.0, 0.02);

    // The config parses as the family it claims.
    const ModelConfig c = load_model_config(dir);
    EXPECT_EQ(c.hidden_size, h);
    EXPECT_EQ(c.n_layers, 2);
    EXPECT_EQ(c.n_heads, 4);
    EXPECT_EQ(c.n_kv_heads, 2);
    EXPECT_EQ(c.head_dim, hd);
    EXPECT_EQ(c.vocab_size, v);
    EXPECT_EQ(c.tie_word_embeddings, family == "gemma3");
    EXPECT_EQ(c.attention_bias, family == "qwen2");
    if (family == "mistral") {
      EXPECT_EQ(c.sliding_window, 4096);
    }
    if (family == "gemma3") {
      EXPECT_EQ(c.family, Family::Gemma3);
      EXPECT_EQ(c.activation, Activation::GeluTanh);
      EXPECT_EQ(c.rope_sliding.theta, 10000.0);
      EXPECT_EQ(c.rope.theta, 1000000.0);
    }
    const auto config = nlohmann::json::parse(read_all(dir + "/config.json"));
    EXPECT_EQ(config["architectures"].size(), 1u);
  }
}

TEST(TinyModel, Qwen3MoeWritesPerExpertTensorsTheLoaderRuns) {
  TinyModelSpec spec = small("qwen3_moe");
  spec.moe = {.n_experts = 6, .top_k = 2, .expert_intermediate = 24};
  const std::string dir = temp_dir("qwen3_moe");
  write_tiny_model(spec, dir);
  SafetensorsReader r = SafetensorsReader::open_or_throw(dir);
  const std::string l1 = "model.layers.1.mlp.";
  r.get_or_throw(l1 + "gate.weight", std::vector<std::int64_t>{6, 32});
  r.get_or_throw(l1 + "experts.5.gate_proj.weight", std::vector<std::int64_t>{24, 32});
  r.get_or_throw(l1 + "experts.5.up_proj.weight", std::vector<std::int64_t>{24, 32});
  r.get_or_throw(l1 + "experts.5.down_proj.weight", std::vector<std::int64_t>{32, 24});
  EXPECT_EQ(r.find(l1 + "experts.6.gate_proj.weight"), nullptr);
  EXPECT_EQ(r.find(l1 + "down_proj.weight"), nullptr);  // no dense MLP
  r.get_or_throw("model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(r.size(), 1 + 2 * (8 + 1 + 6 * 3) +
                          2u);  // embed, layers (attention, router, experts), norm, head

  const ModelConfig c = load_model_config(dir);
  EXPECT_EQ(c.family, Family::Qwen3Moe);
  EXPECT_EQ(c.moe.n_experts, 6);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.moe.inter, 24);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.layer_is_moe, std::vector<bool>({true, true}));

  // The model loads and runs: finite logits over the vocabulary.
  ReferenceBackend backend;
  std::unique_ptr<Model> model = load_model(dir, backend);
  SequenceRunner runner(*model, backend, 16);
  const std::vector<std::int32_t> ids = {1, 5, 60, 33};
  std::span<const float> logits = runner.append(ids);
  ASSERT_EQ(static_cast<std::int64_t>(logits.size()), 64);
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  // The greedy form picks the same id where the logits are, prefill and decode step alike.
  const std::int32_t want = argmax_row(logits);
  SequenceRunner greedy(*model, backend, 16);
  EXPECT_EQ(greedy.append_greedy(ids), want);
  EXPECT_EQ(greedy.append_greedy({&want, 1}), argmax_row(runner.append({&want, 1})));
  EXPECT_EQ(greedy.n_tokens(), 5);

  spec.moe.top_k = 7;
  EXPECT_THROW(resolve_tiny_model_spec(spec), Error);
}

// GPT-OSS's E2M1 code values; an MXFP4 element is kE2m1[code] * 2^(scale - 127).
constexpr float kE2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

// Row `row` of expert `e` of an MXFP4 projection as released (blocks [E, rows, groups, 16]:
// value 2k of a group in the low nibble of byte k; scales [E, rows, groups]).
std::vector<float> mxfp4_row(const TensorInfo& blocks, const TensorInfo& scales, std::int64_t e,
                             std::int64_t row) {
  const std::int64_t rows = blocks.shape[1], groups = blocks.shape[2];
  std::vector<float> out;
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::size_t at = static_cast<std::size_t>((e * rows + row) * groups + g);
    const float scale = std::ldexp(1.0f, int(scales.bytes[at]) - 127);
    for (std::int64_t k = 0; k < 16; ++k) {
      const std::uint8_t b = blocks.bytes[at * 16 + static_cast<std::size_t>(k)];
      out.push_back(kE2m1[b & 15] * scale);
      out.push_back(kE2m1[b >> 4] * scale);
    }
  }
  return out;
}

TinyModelSpec small_gpt_oss() {
  TinyModelSpec s = small("gpt_oss");
  s.hidden = 64, s.intermediate = 32, s.layers = 4, s.heads = 4, s.kv_heads = 2, s.head_dim = 16;
  s.moe.n_experts = 8, s.moe.top_k = 2, s.sliding_window = 8, s.dtype = DType::BF16;
  s.yarn = {4.0, 128, 32.0, 1.0};
  return s;
}

// Prefill of four ids and one decode step through the reference backend: finite logits, and
// the greedy form agrees with the arg-max of the logits.
void expect_runs(const std::string& dir, std::int64_t vocab) {
  ReferenceBackend backend;
  std::unique_ptr<Model> model = load_model(dir, backend);
  SequenceRunner runner(*model, backend, 32);
  const std::vector<std::int32_t> ids = {1, 5, 60, 33};
  std::span<const float> logits = runner.append(ids);
  ASSERT_EQ(static_cast<std::int64_t>(logits.size()), vocab);
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  const std::int32_t want = argmax_row(logits);
  SequenceRunner greedy(*model, backend, 32);
  EXPECT_EQ(greedy.append_greedy(ids), want);
  EXPECT_EQ(greedy.append_greedy({&want, 1}), argmax_row(runner.append({&want, 1})));
}

TEST(TinyModel, GptOssWritesTheReleasedMxfp4LayoutTheLoaderRuns) {
  const TinyModelSpec spec = small_gpt_oss();
  const std::string dir = temp_dir("gpt_oss");
  write_tiny_model(spec, dir);
  SafetensorsReader r = SafetensorsReader::open_or_throw(dir);
  const std::string a = "model.layers.3.self_attn.", e = "model.layers.3.mlp.experts.";
  r.get_or_throw(a + "q_proj.bias", std::vector<std::int64_t>{64});
  r.get_or_throw(a + "k_proj.bias", std::vector<std::int64_t>{32});
  r.get_or_throw(a + "o_proj.bias", std::vector<std::int64_t>{64});
  r.get_or_throw(a + "sinks", std::vector<std::int64_t>{4});
  r.get_or_throw("model.layers.3.mlp.router.weight", std::vector<std::int64_t>{8, 64});
  r.get_or_throw("model.layers.3.mlp.router.bias", std::vector<std::int64_t>{8});
  const TensorInfo& gu =
      r.get_or_throw(e + "gate_up_proj_blocks", std::vector<std::int64_t>{8, 64, 2, 16});
  const TensorInfo& gu_s =
      r.get_or_throw(e + "gate_up_proj_scales", std::vector<std::int64_t>{8, 64, 2});
  const TensorInfo& dn =
      r.get_or_throw(e + "down_proj_blocks", std::vector<std::int64_t>{8, 64, 1, 16});
  const TensorInfo& dn_s =
      r.get_or_throw(e + "down_proj_scales", std::vector<std::int64_t>{8, 64, 1});
  EXPECT_EQ(r.get_or_throw(e + "gate_up_proj_bias", std::vector<std::int64_t>{8, 64}).dtype,
            DType::BF16);
  EXPECT_EQ(r.get_or_throw(e + "down_proj_bias", std::vector<std::int64_t>{8, 64}).dtype,
            DType::BF16);
  for (const TensorInfo* t : {&gu, &gu_s, &dn, &dn_s}) EXPECT_EQ(t->dtype, DType::U8) << t->name;
  EXPECT_EQ(r.find(e + "gate_up_proj"), nullptr);
  EXPECT_EQ(r.find("model.layers.3.mlp.down_proj.weight"), nullptr);  // no dense MLP
  EXPECT_EQ(r.size(), 1 + 4 * (2 + 9 + 2 + 6) + 2u);                  // embed, layers, norm, head
  EXPECT_EQ(tiny_model_parameters(resolve_tiny_model_spec(spec)),
            2 * 64 * 64 + 64 +
                4 * (2 * 64 + 64 * 64 * 2 + 32 * 64 * 2 + 64 + 32 * 2 + 64 + 4 + 8 * 64 + 8 +
                     8 * 64 * 64 + 8 * 64 + 8 * 32 * 64 + 8 * 64));

  // Every E2M1 code occurs; the scales sit within 2^+-1 of the power of two nearest
  // 1/(2.93 sqrt(fan_in)) (2.93: the codes' rms; fan_in 64: 2^-5, byte 122; 32: 2^-4), so the
  // decoded weights have a std near 1/sqrt(fan_in), as the float tensors do.
  std::array<int, 16> seen{};
  for (std::uint8_t b : gu.bytes) ++seen[b & 15], ++seen[b >> 4];
  for (int c = 0; c < 16; ++c) EXPECT_GT(seen[c], 0) << "code " << c;
  std::array<int, 256> scale_seen{};
  for (std::uint8_t sc : gu_s.bytes) ++scale_seen[sc];
  EXPECT_EQ(scale_seen[121] + scale_seen[122] + scale_seen[123],
            static_cast<int>(gu_s.bytes.size()));
  EXPECT_TRUE(scale_seen[121] > 0 && scale_seen[122] > 0 && scale_seen[123] > 0);
  for (std::uint8_t sc : dn_s.bytes) ASSERT_TRUE(sc >= 122 && sc <= 124) << int(sc);
  double sum_sq = 0;
  std::int64_t n = 0;
  for (std::int64_t ex = 0; ex < 8; ++ex)
    for (std::int64_t row = 0; row < 64; ++row)
      for (float x : mxfp4_row(gu, gu_s, ex, row)) sum_sq += double(x) * x, ++n;
  ASSERT_EQ(n, 8 * 64 * 64);
  const double rms = std::sqrt(sum_sq / double(n));
  EXPECT_GT(rms, 0.6 / 8.0);
  EXPECT_LT(rms, 2.0 / 8.0);

  // The config parses as GPT-OSS with everything the loader keys on.
  const ModelConfig c = load_model_config(dir);
  EXPECT_EQ(c.family, Family::GptOss);
  EXPECT_EQ(c.moe.n_experts, 8);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.moe.inter, 32);
  EXPECT_EQ(c.moe.swiglu_limit, 7.0);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.layer_is_sliding, std::vector<bool>({true, false, true, false}));
  EXPECT_EQ(c.rope.type, RopeType::Yarn);
  EXPECT_EQ(c.rope.theta, 150000.0);
  EXPECT_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position, 128);
  EXPECT_FALSE(c.rope.truncate);
  const auto config = nlohmann::json::parse(read_all(dir + "/config.json"));
  EXPECT_EQ(config["quantization_config"]["quant_method"], "mxfp4");

  expect_runs(dir, 64);
}

TEST(TinyModel, GptOssFloatExpertsRun) {
  TinyModelSpec spec = small_gpt_oss();
  spec.moe.expert_dtype = DType::BF16;
  spec.intermediate = 24;  // float experts need no multiple of 32
  const std::string dir = temp_dir("gpt_oss_bf16");
  write_tiny_model(spec, dir);
  SafetensorsReader r = SafetensorsReader::open_or_throw(dir);
  const std::string e = "model.layers.0.mlp.experts.";
  EXPECT_EQ(r.get_or_throw(e + "gate_up_proj", std::vector<std::int64_t>{8, 64, 48}).dtype,
            DType::BF16);
  r.get_or_throw(e + "down_proj", std::vector<std::int64_t>{8, 24, 64});
  EXPECT_EQ(r.find(e + "gate_up_proj_blocks"), nullptr);
  const auto config = nlohmann::json::parse(read_all(dir + "/config.json"));
  EXPECT_FALSE(config.contains("quantization_config"));
  EXPECT_EQ(load_model_config(dir).moe.inter, 24);
  expect_runs(dir, 64);

  spec.moe.expert_dtype = DType::MXFP4;  // 24 is no multiple of 32
  EXPECT_THROW(resolve_tiny_model_spec(spec), Error);
  spec.intermediate = 32, spec.moe.expert_dtype = DType::I32;
  EXPECT_THROW(resolve_tiny_model_spec(spec), Error);
}

TEST(TinyModel, GptOssShardsKeepBlocksWithTheirScales) {
  TinyModelSpec spec = small_gpt_oss();
  const std::string single = temp_dir("gpt_oss_single"), sharded = temp_dir("gpt_oss_sharded");
  write_tiny_model(spec, single);
  spec.max_shard_bytes = 3000;  // below one gate_up_proj_blocks (8 * 64 * 2 * 16 = 16 KiB)
  write_tiny_model(spec, sharded);
  const auto index = nlohmann::json::parse(read_all(sharded + "/model.safetensors.index.json"));
  const auto& map = index["weight_map"];
  for (std::int64_t l = 0; l < 4; ++l)
    for (const std::string proj : {"gate_up_proj", "down_proj"}) {
      const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts." + proj;
      EXPECT_EQ(map[p + "_blocks"], map[p + "_scales"]) << p;
      EXPECT_NE(map[p + "_scales"], map[p + "_bias"]) << p;  // the limit splits after the pair
    }
  SafetensorsReader a = SafetensorsReader::open_or_throw(single);
  SafetensorsReader b = SafetensorsReader::open_or_throw(sharded);
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names())
    EXPECT_TRUE(same_bytes(a.get_or_throw(name), b.get_or_throw(name))) << name;
}

TEST(TinyModel, SameSeedSameBytesOtherSeedOther) {
  const std::string a = temp_dir("seed_a"), b = temp_dir("seed_b"), c = temp_dir("seed_c");
  TinyModelSpec spec = small("qwen2");
  write_tiny_model(spec, a);
  write_tiny_model(spec, b);
  spec.seed = 8;
  write_tiny_model(spec, c);
  EXPECT_EQ(read_all(a + "/model.safetensors"), read_all(b + "/model.safetensors"));
  EXPECT_EQ(read_all(a + "/config.json"), read_all(b + "/config.json"));
  EXPECT_NE(read_all(a + "/model.safetensors"), read_all(c + "/model.safetensors"));
}

TEST(TinyModel, ShardingKeepsEveryTensor) {
  TinyModelSpec spec = small("llama");
  const std::string single = temp_dir("single"), sharded = temp_dir("sharded");
  write_tiny_model(spec, single);
  spec.max_shard_bytes = 20000;
  write_tiny_model(spec, sharded);

  EXPECT_FALSE(fs::exists(sharded + "/model.safetensors"));
  const auto index = nlohmann::json::parse(read_all(sharded + "/model.safetensors.index.json"));
  std::set<std::string> shard_files;
  for (const auto& [name, file] : index["weight_map"].items()) shard_files.insert(file);
  EXPECT_GE(shard_files.size(), 3u);
  for (const std::string& f : shard_files) {
    EXPECT_TRUE(fs::exists(sharded + "/" + f)) << f;
    EXPECT_LE(fs::file_size(sharded + "/" + f), 20000u + 4096u) << f;  // data + header
  }

  SafetensorsReader a = SafetensorsReader::open_or_throw(single);
  SafetensorsReader b = SafetensorsReader::open_or_throw(sharded);
  ASSERT_EQ(a.names(), b.names());
  std::uint64_t total = 0;
  for (const std::string& name : a.names()) {
    EXPECT_TRUE(same_bytes(a.get_or_throw(name), b.get_or_throw(name))) << name;
    total += b.get_or_throw(name).bytes.size();
  }
  EXPECT_EQ(index["metadata"]["total_size"], total);

  // Writing the unsharded form over it removes the stale shards' index.
  spec.max_shard_bytes = 1ull << 30;
  write_tiny_model(spec, sharded);
  EXPECT_FALSE(fs::exists(sharded + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(sharded + "/model.safetensors"));
}

TEST(TinyModel, Bf16IsTheF32ModelRounded) {
  TinyModelSpec spec = small("qwen3");
  const std::string f32 = temp_dir("f32"), bf16 = temp_dir("bf16");
  write_tiny_model(spec, f32);
  spec.dtype = DType::BF16;
  write_tiny_model(spec, bf16);
  SafetensorsReader a = SafetensorsReader::open_or_throw(f32);
  SafetensorsReader b = SafetensorsReader::open_or_throw(bf16);
  const std::string name = "model.layers.0.self_attn.v_proj.weight";
  ASSERT_EQ(b.get_or_throw(name).dtype, DType::BF16);
  const std::vector<float> fa = values(a.get_or_throw(name)), fb = values(b.get_or_throw(name));
  ASSERT_EQ(fa.size(), fb.size());
  for (std::size_t i = 0; i < fa.size(); ++i) ASSERT_EQ(bf16_to_f32(f32_to_bf16(fa[i])), fb[i]);
  EXPECT_EQ(load_model_config(bf16).dtype, DType::BF16);
}

// Parameters in the checkpoint a spec describes.
std::uint64_t parameters_of(const TinyModelSpec& spec) {
  std::uint64_t total = 0;
  for (const TensorSpec& t : tiny_model_tensors(spec)) {
    std::uint64_t n = 1;
    for (std::int64_t d : t.shape) n *= static_cast<std::uint64_t>(d);
    total += n;
  }
  return total;
}

TEST(TinyModel, PresetsHaveTheRealShapes) {
  TinyModelSpec spec;
  apply_tiny_model_preset("llama3-8b", spec);
  spec = resolve_tiny_model_spec(spec);
  const std::uint64_t n_params = parameters_of(spec);
  EXPECT_EQ(n_params, 8030261248u);  // Llama 3.1 8B
  const ModelConfig c = parse_model_config(tiny_model_config_json(spec), "llama3-8b");
  EXPECT_EQ(c.rope.type, RopeType::Llama3);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_position, 8192);
  EXPECT_EQ(c.max_position_embeddings, 131072);

  TinyModelSpec smol;
  apply_tiny_model_preset("smollm2-135m", smol);
  smol = resolve_tiny_model_spec(smol);
  EXPECT_TRUE(*smol.tied);
  EXPECT_EQ(smol.head_dim, 64);
  const std::uint64_t smol_params = parameters_of(smol);
  EXPECT_EQ(smol_params, 134515008u);  // SmolLM2-135M

  TinyModelSpec moe;
  apply_tiny_model_preset("qwen3-30b-a3b", moe);
  moe = resolve_tiny_model_spec(moe);
  const std::uint64_t moe_params = parameters_of(moe);
  EXPECT_EQ(moe_params, 30532122624u);  // Qwen3-30B-A3B
  const ModelConfig mc = parse_model_config(tiny_model_config_json(moe), "qwen3-30b-a3b");
  EXPECT_EQ(mc.family, Family::Qwen3Moe);
  EXPECT_EQ(mc.moe.n_experts, 128);
  EXPECT_EQ(mc.moe.top_k, 8);
  EXPECT_EQ(mc.moe.inter, 768);
  EXPECT_EQ(mc.n_kv_heads, 4);
  EXPECT_EQ(mc.head_dim, 128);

  TinyModelSpec oss;
  apply_tiny_model_preset("gpt-oss-20b", oss);
  oss = resolve_tiny_model_spec(oss);
  EXPECT_EQ(tiny_model_parameters(oss), 20914757184u);  // gpt-oss-20b
  TinyModelSpec oss_bf16 = oss;
  oss_bf16.moe.expert_dtype = DType::BF16;
  EXPECT_EQ(parameters_of(oss_bf16), 20914757184u);  // the same model with float experts
  const ModelConfig oc = parse_model_config(tiny_model_config_json(oss), "gpt-oss-20b");
  EXPECT_EQ(oc.family, Family::GptOss);
  EXPECT_EQ(oc.hidden_size, 2880);
  EXPECT_EQ(oc.n_layers, 24);
  EXPECT_EQ(oc.n_heads, 64);
  EXPECT_EQ(oc.n_kv_heads, 8);
  EXPECT_EQ(oc.head_dim, 64);
  EXPECT_EQ(oc.vocab_size, 201088);
  EXPECT_EQ(oc.moe.n_experts, 32);
  EXPECT_EQ(oc.moe.top_k, 4);
  EXPECT_EQ(oc.moe.inter, 2880);
  EXPECT_EQ(oc.moe.swiglu_limit, 7.0);
  EXPECT_EQ(oc.sliding_window, 128);
  ASSERT_EQ(oc.layer_is_sliding.size(), 24u);
  for (std::size_t l = 0; l < 24; ++l) EXPECT_EQ(oc.layer_is_sliding[l], l % 2 == 0) << l;
  EXPECT_EQ(oc.rope.type, RopeType::Yarn);
  EXPECT_EQ(oc.rope.theta, 150000.0);
  EXPECT_EQ(oc.rope.factor, 32.0);
  EXPECT_EQ(oc.rope.original_max_position, 4096);
  EXPECT_EQ(oc.rope.beta_fast, 32.0);
  EXPECT_EQ(oc.rope.beta_slow, 1.0);
  EXPECT_FALSE(oc.rope.truncate);
  EXPECT_EQ(oc.max_position_embeddings, 131072);
  EXPECT_TRUE(oc.attention_bias);
  EXPECT_FALSE(oc.tie_word_embeddings);
}

TEST(TinyModel, BadSpecsAreRejected) {
  auto expect_invalid = [](TinyModelSpec s, const std::string& needle) {
    try {
      resolve_tiny_model_spec(s);
      ADD_FAILURE() << "expected an error about " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  TinyModelSpec s = small("llama");
  s.family = "gpt2";
  expect_invalid(s, "gpt2");
  s = small("llama"), s.kv_heads = 3;
  expect_invalid(s, "kv-heads");
  s = small("llama"), s.layers = 0;
  expect_invalid(s, "layers");
  s = small("phi3"), s.head_dim = 16;
  expect_invalid(s, "phi3");
  s = small("llama"), s.dtype = DType::I32;
  expect_invalid(s, "dtype");
  TinyModelSpec p;
  EXPECT_THROW(apply_tiny_model_preset("gpt-5", p), Error);
}

}  // namespace
}  // namespace akv
