// config.json of the hybrid linear-attention families: layer kinds, Gated DeltaNet shapes, the
// shared-expert MoE, and errors naming the field.
#include <gtest/gtest.h>

#include "base/error.h"
#include "base/mapped_file.h"
#include "models/config.h"
#include "models/hybrid_blocks.h"

namespace akv {
namespace {

const std::string kDir = std::string(AGENTKV_TESTDATA) + "/models/tiny-random-w2/";

ModelConfig parse_dir(const std::string& name) {
  const std::string path = kDir + name + "/config.json";
  return parse_model_config(read_file_or_throw(path), path);
}

TEST(HybridConfig, Qwen3NextParses) {
  const ModelConfig c = parse_dir("qwen3-next");
  EXPECT_EQ(c.family, Family::Qwen3Next);
  EXPECT_EQ(c.hybrid.linear.layer_is_linear, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(c.layer_is_sliding, (std::vector<bool>{false, false, false, false}));
  EXPECT_EQ(c.hybrid.linear.n_k_heads, 2);
  EXPECT_EQ(c.hybrid.linear.n_v_heads, 4);
  EXPECT_EQ(c.hybrid.linear.conv_channels(), 2 * 2 * 16 + 4 * 16);
  EXPECT_EQ(c.hybrid.moe.n_experts, 8);
  EXPECT_EQ(c.hybrid.moe.top_k, 2);
  EXPECT_EQ(c.hybrid.moe.shared_intermediate, 32);
  EXPECT_TRUE(c.hybrid.moe.layer_is_sparse(0));
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.25);
  const StateLayout st = state_layout_for(c, 3);
  EXPECT_EQ(st.n_layers, 3);
  EXPECT_EQ(st.conv_rows, 3);
  EXPECT_EQ(st.slot_floats(), 3 * (3 * 128 + 4 * 16 * 16));
}

TEST(HybridConfig, Qwen35DenseAndMoeParse) {
  const ModelConfig dense = parse_dir("qwen3_5-text");
  EXPECT_EQ(dense.family, Family::Qwen35);
  EXPECT_EQ(dense.hybrid.moe.n_experts, 0);
  EXPECT_EQ(dense.intermediate_size, 128);
  const ModelConfig moe = parse_dir("qwen3_5-moe-text");
  EXPECT_EQ(moe.family, Family::Qwen35);
  EXPECT_EQ(moe.hybrid.moe.n_experts, 8);
  EXPECT_TRUE(moe.hybrid.moe.norm_topk_prob);
  EXPECT_EQ(moe.intermediate_size, 32);  // no dense MLP: sized for the experts
  // The common MoE block's config: the experts, their shared expert and the sparse layers.
  EXPECT_EQ(moe.moe.n_experts, 8);
  EXPECT_EQ(moe.moe.top_k, moe.hybrid.moe.top_k);
  EXPECT_EQ(moe.moe.inter, moe.hybrid.moe.expert_intermediate);
  EXPECT_EQ(moe.moe.shared_inter, moe.hybrid.moe.shared_intermediate);
  EXPECT_GT(moe.moe.shared_inter, 0);
  EXPECT_TRUE(moe.moe.norm_topk_prob);
  ASSERT_EQ(moe.moe.layer_is_moe.size(), static_cast<std::size_t>(moe.n_layers));
  for (std::int64_t l = 0; l < moe.n_layers; ++l) EXPECT_EQ(moe.moe.layer_is_moe[l], moe.hybrid.moe.layer_is_sparse(l));
  EXPECT_EQ(dense.moe.n_experts, 0);
}

TEST(HybridConfig, BadFieldsAreNamed) {
  std::string text = read_file_or_throw(kDir + "qwen3_5-text/config.json");
  const auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  for (const auto& [json, field] : std::vector<std::pair<std::string, std::string>>{
           {replace("\"linear_num_value_heads\": 4", "\"linear_num_value_heads\": 3"),
            "linear_num_value_heads"},
           {replace("\"linear_conv_kernel_dim\": 4", "\"linear_conv_kernel_dim\": 0"),
            "linear_conv_kernel_dim"},
           {replace("\"linear_key_head_dim\": 16,", ""), "linear_key_head_dim"}}) {
    try {
      parse_model_config(json, "x/config.json");
      ADD_FAILURE() << "expected an error about " << field;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadFormat);
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace akv
