// The error of a bf16 state snapshot (kv/state_codec.h) where it matters: a hybrid model resumed
// from a snapshot taken at position P, through the state codec, against a cold run of the whole
// prompt, over the next tokens (teacher-forced on the cold run's greedy tokens, so every step
// compares the same inputs). Reports max |logit diff| over the whole vocabulary, whether the
// greedy ids agree, and the snapshot's bytes; the same resume through the exact codec shows the
// part that is only the prefill's chunking. Scalar reference backend, f32 (the numbers in
// docs/perf/hybrid.md come from this test's output).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "backend/cpu/reference_backend.h"
#include "kv/state_codec.h"
#include "models/model.h"
#include "engine_test_util.h"

namespace akv {
namespace {

using Ids = std::vector<std::int32_t>;

std::string fixture(const std::string& name) {
  return std::string(AGENTKV_TESTDATA) + "/models/tiny-random-w2/" + name;
}

constexpr std::int32_t kPrompt = 200;   // the fixtures' references are 150-300 tokens
constexpr std::int32_t kNext = 24;      // tokens compared after the prompt
constexpr std::int32_t kBlockSize = 16;

// One sequence on its own KV and state slot 0, in chunks that may start anywhere.
class Sequence {
 public:
  Sequence(Model& model, ReferenceBackend& backend)
      : model_(model),
        backend_(backend),
        kv_(alloc_model_kv(backend, model.config(), (kPrompt + kNext) / kBlockSize + 1, kBlockSize, DType::F32)) {
    for (std::int32_t i = 0; i * kBlockSize < kPrompt + kNext + kBlockSize; ++i) table_.push_back(i);
    logits_.resize(static_cast<std::size_t>(model.config().vocab_size));
  }
  // Appends tokens at position n_ and returns the last one's logits [vocab].
  const std::vector<float>& append(std::span<const std::int32_t> tokens) {
    const SequenceChunk chunk{.first_row = 0, .n_tokens = static_cast<std::int32_t>(tokens.size()), .start_pos = n_,
                              .block_table = table_, .state_slot = 0};
    positions_.clear();
    for (std::int32_t i = 0; i < chunk.n_tokens; ++i) positions_.push_back(n_ + i);
    const std::int32_t last = chunk.n_tokens - 1;
    model_.forward({.tokens = tokens, .positions = positions_, .sequences = {&chunk, 1}, .logit_rows = {&last, 1}},
                   kv_, logits_);
    n_ += chunk.n_tokens;
    return logits_;
  }
  // The state slot through `codec`: read, encoded, decoded, written back. Returns its bytes.
  std::size_t snapshot_through(StateCodec codec) {
    std::vector<float> state(static_cast<std::size_t>(kv_.state.slot_floats()));
    read_state_slot(backend_, kv_, 0, state);
    const std::vector<std::byte> encoded = encode_state(codec, state);
    decode_state(codec, encoded, state);
    write_state_slot(backend_, kv_, 0, state);
    return encoded.size();
  }

 private:
  Model& model_;
  ReferenceBackend& backend_;
  KvStorage kv_;
  std::vector<std::int32_t> table_, positions_;
  std::vector<float> logits_;
  std::int32_t n_ = 0;
};

struct Comparison {
  double max_logit_diff = 0;
  bool greedy_equal = true;
  std::size_t snapshot_bytes = 0;
};

class HybridStateCodec : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = load_model(fixture(GetParam()), backend_);
    std::mt19937 rng(21);
    for (std::int32_t i = 0; i < kPrompt; ++i) prompt_.push_back(std::uniform_int_distribution<int>(3, 511)(rng));
    // Cold: the prompt in one chunk, then greedy decoding.
    Sequence cold(*model_, backend_);
    std::vector<float> logits = cold.append(prompt_);
    for (std::int32_t i = 0; i < kNext; ++i) {
      cold_logits_.push_back(logits);
      next_.push_back(static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      logits = cold.append(std::span(&next_.back(), 1));
    }
  }
  // Prefill up to `at`, the snapshot through `codec`, the rest of the prompt, then the cold
  // run's tokens.
  Comparison resume(std::int32_t at, StateCodec codec) {
    Sequence s(*model_, backend_);
    s.append(std::span(prompt_).first(static_cast<std::size_t>(at)));
    Comparison c;
    c.snapshot_bytes = s.snapshot_through(codec);
    std::vector<float> logits = s.append(std::span(prompt_).subspan(static_cast<std::size_t>(at)));
    for (std::int32_t i = 0; i < kNext; ++i) {
      const std::vector<float>& want = cold_logits_[static_cast<std::size_t>(i)];
      for (std::size_t v = 0; v < want.size(); ++v)
        c.max_logit_diff = std::max(c.max_logit_diff, std::abs(static_cast<double>(logits[v]) - want[v]));
      c.greedy_equal &= std::max_element(logits.begin(), logits.end()) - logits.begin() == next_[static_cast<std::size_t>(i)];
      logits = s.append(std::span(&next_[static_cast<std::size_t>(i)], 1));
    }
    return c;
  }

  ReferenceBackend backend_;
  std::unique_ptr<Model> model_;
  Ids prompt_, next_;
  std::vector<std::vector<float>> cold_logits_;
};

TEST_P(HybridStateCodec, Bf16SnapshotsResumeCloseToTheColdRun) {
  double logit_range = 0;  // of the cold run's first step: what the differences compare with
  const auto [lo, hi] = std::minmax_element(cold_logits_[0].begin(), cold_logits_[0].end());
  logit_range = *hi - *lo;
  for (std::int32_t at : {64, 128, 192}) {
    const Comparison exact = resume(at, StateCodec::Exact), bf16 = resume(at, StateCodec::Bf16);
    std::printf("[state codec] %s resume at %d of %d, next %d tokens: exact max|dlogit| %.3g (greedy %s, %zu B), "
                "bf16 max|dlogit| %.3g (greedy %s, %zu B); cold logit range %.3g\n",
                GetParam().c_str(), at, kPrompt, kNext, exact.max_logit_diff, exact.greedy_equal ? "equal" : "DIFFERS",
                exact.snapshot_bytes, bf16.max_logit_diff, bf16.greedy_equal ? "equal" : "DIFFERS", bf16.snapshot_bytes,
                logit_range);
    EXPECT_EQ(bf16.snapshot_bytes * 2, exact.snapshot_bytes);
    // Exact: only the prefill's chunking differs (measured <= 6e-7 on logits ranging over ~10).
    EXPECT_TRUE(exact.greedy_equal);
    EXPECT_LT(exact.max_logit_diff, 1e-5 * logit_range);
    // bf16: the rounding of the state shows, and stays small against the logits' range
    // (measured <= 2.5e-3 on ~10, 2.4e-4 of it; bounded at 4x that).
    EXPECT_TRUE(bf16.greedy_equal) << "at " << at;
    EXPECT_GT(bf16.max_logit_diff, exact.max_logit_diff) << "the codec rounded nothing";
    EXPECT_LT(bf16.max_logit_diff, 1e-3 * logit_range) << "at " << at;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, HybridStateCodec,
                         ::testing::Values("qwen3_5-text", "qwen3-next", "qwen3_5-moe-text"),
                         test::fixture_test_name);

}  // namespace
}  // namespace akv
