// Helpers of the GGUF model tests: the decompressed fixtures of testdata/gguf, a prefill on a
// fresh KV, the fp64 references of the tiny-random checkpoints, the max error against them.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"
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

inline std::vector<float> prefill_logits(Model& model, Backend& backend,
                                         const std::vector<std::int32_t>& ids) {
  const ModelConfig& c = model.config();
  const std::int64_t block = 16;
  const std::int64_t n_blocks = (static_cast<std::int64_t>(ids.size()) + block - 1) / block;
  KvStorage kv = backend.alloc_kv(kv_layout_for(c, n_blocks, block, DType::F32));
  std::vector<std::int32_t> table(n_blocks);
  for (std::int64_t i = 0; i < n_blocks; ++i) table[i] = static_cast<std::int32_t>(i);
  SequenceChunk chunk{.first_row = 0,
                      .n_tokens = static_cast<std::int32_t>(ids.size()),
                      .start_pos = 0,
                      .block_table = table};
  std::vector<std::int32_t> rows(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) rows[i] = static_cast<std::int32_t>(i);
  const std::vector<std::int32_t> pos = positions_for({&chunk, 1});
  ForwardBatch batch{.tokens = ids, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = rows};
  std::vector<float> logits(ids.size() * c.vocab_size);
  model.forward(batch, kv, logits);
  return logits;
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

}  // namespace akv::test
