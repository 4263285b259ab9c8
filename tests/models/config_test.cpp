// config.json parsing: the real configs of ../shared/testdata/configs (transformers 4.x form),
// the tiny-random ones (5.x form), the MoE families, and clear errors for bad or unsupported
// configs.
#include "models/config.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.h"
#include "base/mapped_file.h"

namespace akv {
namespace {

const std::string kConfigs = std::string(AGENTKV_TESTDATA) + "/configs/";

ModelConfig parse_file(const std::string& path) { return parse_model_config(read_file_or_throw(path), path); }

TEST(ModelConfig, RealDenseConfigsParse) {
  for (const char* name : {"Llama-3.1-8B", "Llama-3.2-3B", "Qwen2.5-3B", "Qwen2.5-7B", "Qwen2.5-14B",
                           "Qwen2.5-32B", "Qwen3-4B", "Qwen3-8B", "Qwen3-14B", "Qwen3-32B", "gemma-3-1b"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = parse_file(kConfigs + name + ".config.json");
    EXPECT_GT(c.n_layers, 0);
    EXPECT_EQ(c.n_heads % c.n_kv_heads, 0);
    EXPECT_EQ(static_cast<std::int64_t>(c.layer_is_sliding.size()), c.n_layers);
  }
  const ModelConfig smol = parse_file(kConfigs + "SmolLM2-135M.config.dump.json");
  EXPECT_EQ(smol.hidden_size, 576);
  EXPECT_EQ(smol.n_kv_heads, 3);
  EXPECT_TRUE(smol.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(smol.rope.theta, 100000.0);
}

TEST(ModelConfig, Llama31RopeScaling) {
  const ModelConfig c = parse_file(kConfigs + "Llama-3.1-8B.config.json");
  EXPECT_EQ(c.family, Family::Llama);
  EXPECT_EQ(c.rope.type, RopeType::Llama3);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_position, 8192);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.dtype, DType::BF16);
  EXPECT_EQ(c.sliding_window, 0);
}

TEST(ModelConfig, Qwen3AndQwen2) {
  const ModelConfig q3 = parse_file(kConfigs + "Qwen3-8B.config.json");
  EXPECT_EQ(q3.family, Family::Qwen3);
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_EQ(q3.sliding_window, 0);  // use_sliding_window: false
  const ModelConfig q2 = parse_file(kConfigs + "Qwen2.5-7B.config.json");
  EXPECT_EQ(q2.family, Family::Qwen2);
  EXPECT_TRUE(q2.attention_bias);
}

TEST(ModelConfig, Gemma3LayerPatternAndTwoRopeBases) {
  const ModelConfig c = parse_file(kConfigs + "gemma-3-1b.config.json");
  EXPECT_EQ(c.family, Family::Gemma3);
  EXPECT_EQ(c.sliding_window, 512);
  ASSERT_GE(c.n_layers, 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c.layer_is_sliding[i], i != 5) << i;
  EXPECT_DOUBLE_EQ(c.rope.theta, 1000000.0);
  EXPECT_DOUBLE_EQ(c.rope_sliding.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / 16.0);  // query_pre_attn_scalar 256
  EXPECT_EQ(c.activation, Activation::GeluTanh);
}

TEST(ModelConfig, TransformersFiveFormKeyedRopeParameters) {
  const ModelConfig c = parse_file(std::string(AGENTKV_TESTDATA) + "/models/tiny-random/gemma3-text-swa8/config.json");
  EXPECT_DOUBLE_EQ(c.rope.theta, 1000000.0);
  EXPECT_DOUBLE_EQ(c.rope_sliding.theta, 10000.0);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_TRUE(c.layer_is_sliding[0]);
  EXPECT_FALSE(c.layer_is_sliding[5]);
}

TEST(ModelConfig, Qwen3MoeExpertsAndSparseLayers) {
  const ModelConfig c = parse_file(kConfigs + "Qwen3-30B-A3B.config.json");  // 4.x: num_experts
  EXPECT_EQ(c.family, Family::Qwen3Moe);
  EXPECT_EQ(c.moe.n_experts, 128);
  EXPECT_EQ(c.moe.top_k, 8);
  EXPECT_EQ(c.moe.inter, 768);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_EQ(std::count(c.moe.layer_is_moe.begin(), c.moe.layer_is_moe.end(), true), 48);
  EXPECT_EQ(c.sliding_window, 0);
  // 5.x: num_local_experts; decoder_sparse_step 2 and mlp_only_layers [3] leave layers 0, 2, 3 dense.
  const std::string json = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
    "vocab_size": 10, "num_hidden_layers": 6, "num_attention_heads": 4, "num_local_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 4, "decoder_sparse_step": 2, "mlp_only_layers": [3]})";
  const ModelConfig s = parse_model_config(json, "config.json");
  EXPECT_EQ(s.moe.n_experts, 4);
  EXPECT_FALSE(s.moe.norm_topk_prob);
  EXPECT_EQ(s.moe.layer_is_moe, (std::vector<bool>{false, true, false, false, false, true}));
}

TEST(ModelConfig, GptOssSlidingLayersYarnAndExperts) {
  const ModelConfig c =
      parse_file(std::string(AGENTKV_TESTDATA) + "/models/tiny-random-w2/gpt-oss/config.json");
  EXPECT_EQ(c.family, Family::GptOss);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.layer_is_sliding, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(c.rope.type, RopeType::Yarn);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.moe.n_experts, 8);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.moe.inter, 32);
  EXPECT_DOUBLE_EQ(c.moe.swiglu_limit, 7.0);
  EXPECT_EQ(c.moe.layer_is_moe, std::vector<bool>(4, true));
}

TEST(ModelConfig, OtherMixturesOfExpertsAreReportedUnsupported) {
  const std::string json = R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
    "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4, "num_local_experts": 8})";
  try {
    parse_model_config(json, "dir/config.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("dir/config.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("MixtralForCausalLM"), std::string::npos) << e.what();
  }
}

struct BadConfig {
  const char* json;
  const char* expect;  // a substring of the error
};

TEST(ModelConfig, BadConfigsNameTheField) {
  const std::string ok_tail = R"("vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4)";
  const BadConfig cases[] = {
      {"not json", "not a JSON object"},
      {R"({"hidden_size": 8})", "architectures"},
      {R"({"architectures": ["GPT2LMHeadModel"], "hidden_size": 8})", "GPT2LMHeadModel"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16, "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3})", "num_key_value_heads"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": -8, "intermediate_size": 16, "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4})", "hidden_size"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16, "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4, "rms_norm_eps": 0})", "rms_norm_eps"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16, "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4, "rope_scaling": {"rope_type": "weird"}})", "rope_type"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": "16", "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4})", "intermediate_size"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16, "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_act": "relu2"})", "hidden_act"},
      {R"({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 8, "intermediate_size": 16, "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4, "layer_types": ["full_attention"]})", "layer_types"},
      {R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 8, "intermediate_size": 16, "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4, "num_experts": 4, "num_experts_per_tok": 2})", "moe_intermediate_size"},
      {R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 8, "intermediate_size": 16, "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4, "num_experts": 4, "num_experts_per_tok": 5, "moe_intermediate_size": 4})", "num_experts_per_tok"},
      {R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 8, "intermediate_size": 16, "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 4, "mlp_only_layers": [2]})", "mlp_only_layers"},
      {R"({"architectures": ["GptOssForCausalLM"], "hidden_size": 8, "intermediate_size": 16, "vocab_size": 10, "num_hidden_layers": 2, "num_attention_heads": 4, "num_experts_per_tok": 2})", "num_experts"},
  };
  for (const BadConfig& bad : cases) {
    SCOPED_TRACE(bad.json);
    try {
      parse_model_config(bad.json, "dir/config.json");
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("dir/config.json"), std::string::npos) << msg;
      EXPECT_NE(msg.find(bad.expect), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace akv
