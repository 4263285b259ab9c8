// Helpers of the GGUF model tests: the decompressed fixtures of testdata/gguf, a prefill on a
// fresh KV, the fp64 references of the tiny-random checkpoints, the max error against them.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"
#include "prefill_logits.h"
#include "models/rope.h"
#include "tensor/dtype.h"
#include "tensor/safetensors.h"

namespace akv::test {

namespace fs = std::filesystem;

// The decompressed copy of testdata/gguf/<file>.xz in the build tree.
inline std::string unpacked_fixture(const std::string& file) {
  const fs::path xz = fs::path(AGENTKV_MODELS_TESTDATA) / "gguf" / (file + ".xz");
  const fs::path out = fs::path(AGENTKV_TESTDATA_UNPACKED) / "models-gguf" / file;
  if (!fs::exists(out)) {
    fs::create_directories(out.parent_path());
    const std::string tmp = out.string() + ".tmp" + std::to_string(::getpid());
    EXPECT_EQ(std::system(("xz -dkc '" + xz.string() + "' > '" + tmp + "'").c_str()), 0) << xz;
    fs::rename(tmp, out);
  }
  return out.string();
}

// testdata/gguf/<name>.gguf.xz, decompressed.
inline std::string gguf_fixture(const std::string& name) {
  return unpacked_fixture(name + ".gguf");
}

inline std::vector<float> to_f32(const TensorInfo& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  convert_to_f32(t.dtype, t.bytes.data(), v.data(), v.size());
  return v;
}

struct Reference {
  std::vector<std::int32_t> ids;
  std::vector<double> logits;
};

// The fp64 reference of the checkpoint in `dir` (reference.safetensors: ids and logits).
inline Reference read_reference_at(const std::string& dir) {
  const SafetensorsReader r = SafetensorsReader::open_or_throw(dir + "/reference.safetensors");
  Reference out;
  const TensorInfo& ids = r.get_or_throw("full_ids");
  for (std::int64_t i = 0; i < ids.numel(); ++i)
    out.ids.push_back(
        ids.dtype == DType::I64
            ? static_cast<std::int32_t>(reinterpret_cast<const std::int64_t*>(ids.bytes.data())[i])
            : reinterpret_cast<const std::int32_t*>(ids.bytes.data())[i]);
  const TensorInfo& l = r.get_or_throw("full_logits_f64");
  const auto* p = reinterpret_cast<const double*>(l.bytes.data());
  out.logits.assign(p, p + l.numel());
  return out;
}

// max |got - want| and max |want|.
inline std::pair<double, double> max_error(std::span<const float> got,
                                           std::span<const double> want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    ref = std::max(ref, std::fabs(want[i]));
  }
  return {err, ref};
}

// Every field a GGUF file sets agrees (RoPE compared by the frequency tables it produces: GGUF
// carries Llama 3 scaling as per-frequency factors, and YaRN's truncate changes them).
inline void expect_same_config(const ModelConfig& got, const ModelConfig& want) {
  EXPECT_EQ(got.family, want.family);
  EXPECT_EQ(got.vocab_size, want.vocab_size);
  EXPECT_EQ(got.hidden_size, want.hidden_size);
  EXPECT_EQ(got.intermediate_size, want.intermediate_size);
  EXPECT_EQ(got.n_layers, want.n_layers);
  EXPECT_EQ(got.n_heads, want.n_heads);
  EXPECT_EQ(got.n_kv_heads, want.n_kv_heads);
  EXPECT_EQ(got.head_dim, want.head_dim);
  EXPECT_EQ(got.max_position_embeddings, want.max_position_embeddings);
  EXPECT_NEAR(got.rms_norm_eps, want.rms_norm_eps, 1e-12);
  EXPECT_EQ(got.activation, want.activation);
  EXPECT_EQ(got.tie_word_embeddings, want.tie_word_embeddings);
  EXPECT_EQ(got.attention_bias, want.attention_bias);
  EXPECT_EQ(got.mlp_bias, want.mlp_bias);
  EXPECT_EQ(got.sliding_window, want.sliding_window);
  EXPECT_EQ(got.layer_is_sliding, want.layer_is_sliding);
  EXPECT_DOUBLE_EQ(got.attention_scale, want.attention_scale);
  EXPECT_DOUBLE_EQ(got.embedding_multiplier, want.embedding_multiplier);
  EXPECT_EQ(got.attn_logit_softcap, want.attn_logit_softcap);
  EXPECT_EQ(got.final_logit_softcap, want.final_logit_softcap);
  for (const bool sliding : {false, true}) {
    const RopeFrequencies g = rope_frequencies(sliding ? got.rope_sliding : got.rope, got.head_dim,
                                               got.max_position_embeddings, 1);
    const RopeFrequencies w = rope_frequencies(sliding ? want.rope_sliding : want.rope,
                                               want.head_dim, want.max_position_embeddings, 1);
    EXPECT_EQ(g.rotary_dim, w.rotary_dim);
    EXPECT_DOUBLE_EQ(g.attention_scaling, w.attention_scaling);
    ASSERT_EQ(g.inv_freq.size(), w.inv_freq.size());
    for (std::size_t i = 0; i < g.inv_freq.size(); ++i)
      EXPECT_NEAR(g.inv_freq[i], w.inv_freq[i], 1e-6 * w.inv_freq[i])
          << (sliding ? "sliding " : "") << i;
  }
  EXPECT_EQ(got.moe.n_experts, want.moe.n_experts);
  EXPECT_EQ(got.moe.top_k, want.moe.top_k);
  EXPECT_EQ(got.moe.inter, want.moe.inter);
  EXPECT_EQ(got.moe.norm_topk_prob, want.moe.norm_topk_prob);
  EXPECT_EQ(got.moe.swiglu_limit, want.moe.swiglu_limit);
  EXPECT_EQ(got.moe.layer_is_moe, want.moe.layer_is_moe);
}

// `got` holds every tensor of `want` with the same shape and bytes.
inline void expect_same_tensors(const SafetensorsReader& got, const SafetensorsReader& want) {
  for (const std::string& tensor : want.names()) {
    SCOPED_TRACE(tensor);
    const TensorInfo* g = got.find(tensor);
    ASSERT_NE(g, nullptr);
    const TensorInfo& w = want.get_or_throw(tensor);
    EXPECT_EQ(g->dtype, w.dtype);
    EXPECT_EQ(g->shape, w.shape);
    ASSERT_EQ(g->bytes.size(), w.bytes.size());
    EXPECT_EQ(0, std::memcmp(g->bytes.data(), w.bytes.data(), w.bytes.size()));
  }
}

}  // namespace akv::test
