// FastBackend element-wise ops against the reference on random inputs, including strided views,
// odd widths and rows enough to go through the thread pool.
//
// Tolerances (per element): embed and add exact; rms_norm, rope and glu
// |fast - ref| <= 2e-6 * max(1, |ref|) (f32 arithmetic and a ~1 ulp polynomial exp, against the
// reference's double arithmetic rounded once).
#include <limits>
#include <tuple>

#include "parity_util.h"

namespace akv::test {
namespace {

void expect_close(const OwnedTensor& fast, const OwnedTensor& ref, double tol, const char* what) {
  const std::vector<float> got = fast.host(), want = ref.host();
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * std::max(1.0f, std::fabs(want[i]))) && bad++ < 5)
      ADD_FAILURE() << what << " elem " << i << " fast " << got[i] << " ref " << want[i];
  EXPECT_EQ(bad, 0) << what;
  EXPECT_TRUE(padding_intact(fast)) << what << " wrote outside its view";
}

class FastOps : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << isa_name(GetParam()) << " not supported";
    fast_ = std::make_unique<FastBackend>(3, GetParam());
  }
  ReferenceBackend ref_;
  std::unique_ptr<FastBackend> fast_;
  std::mt19937 rng_{42};
};

TEST_P(FastOps, Embed) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    const OwnedWeight table = random_weight(rng_, dtype, 50, 37);
    const std::vector<std::int32_t> ids = {3, 0, 49, 3, 17};
    OwnedTensor a = random_tensor(rng_, 5, 37, 2), b = copy_of(a);
    fast_->embed(table.ref, ids, 1.5f, a.ref);
    ref_.embed(table.ref, ids, 1.5f, b.ref);
    expect_close(a, b, 0.0, "embed");
  }
}

TEST_P(FastOps, RmsNorm) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (std::int64_t rows : {1, 3, 200}) {
      // whole-row groups and per-head groups, with a weight offset (Gemma); out of place
      const OwnedWeight w_row = random_weight(rng_, dtype, 1, 96);
      const OwnedWeight w_head = random_weight(rng_, dtype, 1, 24);
      const OwnedTensor x = random_tensor(rng_, rows, 96, 3, 2.0f);
      OwnedTensor a = random_tensor(rng_, rows, 96, 1), b = copy_of(a);
      fast_->rms_norm(x.ref, w_row.ref, 1e-5f, 0.0f, a.ref);
      ref_.rms_norm(x.ref, w_row.ref, 1e-5f, 0.0f, b.ref);
      expect_close(a, b, 2e-6, "rms_norm row");
      // in place, per head: the q/k-norm use
      OwnedTensor c = random_tensor(rng_, rows, 96, 4, 2.0f), d = copy_of(c);
      fast_->rms_norm(c.ref, w_head.ref, 1e-6f, 1.0f, c.ref);
      ref_.rms_norm(d.ref, w_head.ref, 1e-6f, 1.0f, d.ref);
      expect_close(c, d, 2e-6, "rms_norm per head in place");
    }
  }
}

TEST_P(FastOps, Rope) {
  std::vector<double> inv_freq;
  for (int i = 0; i < 12; ++i) inv_freq.push_back(std::pow(10000.0, -2.0 * i / 24.0));
  for (std::int64_t rows : {1, 5, 300}) {
    std::vector<std::int32_t> pos(rows);
    for (std::int64_t i = 0; i < rows; ++i) pos[i] = static_cast<std::int32_t>((i * 37) % 1000);
    // full rotary (24 of head 24) and partial rotary (16 of head 24, scaled)
    for (auto [rot, scaling] : {std::pair{24, 1.0}, std::pair{16, 1.2}}) {
      const RopeParams rp{std::span<const double>(inv_freq).first(rot / 2), rot, scaling};
      OwnedTensor a = random_tensor(rng_, rows, 72, 5, 2.0f), b = copy_of(a);
      fast_->rope(a.ref, 24, rp, pos);
      ref_.rope(b.ref, 24, rp, pos);
      expect_close(a, b, 2e-6, "rope");
      // the same call again (the fast path caches its cos/sin table)
      OwnedTensor c = random_tensor(rng_, rows, 72, 0, 2.0f), d = copy_of(c);
      fast_->rope(c.ref, 24, rp, pos);
      ref_.rope(d.ref, 24, rp, pos);
      expect_close(c, d, 2e-6, "rope repeated");
    }
  }
}

TEST_P(FastOps, Glu) {
  for (GluActivation act : {GluActivation::Silu, GluActivation::GeluTanh}) {
    for (std::int64_t rows : {1, 4, 300}) {
      const OwnedTensor gate_up = random_tensor(rng_, rows, 2 * 37, 1, 6.0f);
      const TensorRef gate = gate_up.ref.cols_slice(0, 37), up = gate_up.ref.cols_slice(37, 37);
      OwnedTensor a = random_tensor(rng_, rows, 37, 2), b = copy_of(a);
      fast_->glu(gate, up, act, a.ref);
      ref_.glu(gate, up, act, b.ref);
      expect_close(a, b, 2e-6, act == GluActivation::Silu ? "glu silu" : "glu gelu_tanh");
    }
  }
}

TEST_P(FastOps, Add) {
  for (std::int64_t rows : {1, 400}) {
    const OwnedTensor x = random_tensor(rng_, rows, 129, 3);
    OwnedTensor a = random_tensor(rng_, rows, 129, 1), b = copy_of(a);
    fast_->add(a.ref, x.ref);
    ref_.add(b.ref, x.ref);
    expect_close(a, b, 0.0, "add");
  }
}

// Greedy sampling picks argmax_row's id on every instruction set: ties to the lowest id (the
// maximum repeated, also as +0 / -0), NaNs skipped, a NaN at id 0 winning, -inf rows, the
// maximum in the vector part or in the scalar tail (odd widths), a strided view; temperature
// rows draw as the reference does.
TEST_P(FastOps, SampleRowsGreedyMatchesArgmaxRow) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  for (const std::int64_t cols : {1, 7, 8, 33, 64, 1000, 49157}) {
    OwnedTensor logits = random_tensor(rng_, 9, cols, 2);
    std::uniform_int_distribution<std::int64_t> at(0, cols - 1);
    for (std::int64_t r = 0; r < 9; ++r) {
      float* x = logits.ref.row<float>(r);
      switch (r) {
        case 1:  // a repeated maximum
          x[at(rng_)] = 100.0f, x[at(rng_)] = 100.0f;
          break;
        case 2:  // the maximum in the tail
          x[cols - 1] = 50.0f;
          break;
        case 3:
          for (std::int64_t c = 0; c < cols; c += 3) x[c] = nan;
          break;
        case 4:
          x[0] = nan;
          break;
        case 5:
          for (std::int64_t c = 0; c < cols; ++c) x[c] = c % 2 ? 0.0f : -0.0f;
          break;
        case 6:
          for (std::int64_t c = 0; c < cols; ++c) x[c] = -inf;
          break;
        case 7:
          x[at(rng_)] = inf;
          break;
        default:
          break;
      }
    }
    const std::vector<float> temperature = {0, 0, 0, 0, 0, 0, 0, 0, 0.7f};
    const std::vector<double> u = {0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.3};
    std::vector<std::int32_t> got(9, -1), want(9, -2);
    fast_->sample_rows(logits.ref, temperature, u, got);
    ref_.sample_rows(logits.ref, temperature, u, want);
    for (std::int64_t r = 0; r < 9; ++r) {
      EXPECT_EQ(got[r], want[r]) << "cols " << cols << " row " << r;
      if (r < 8) {
        EXPECT_EQ(want[r], argmax_row({logits.ref.row<float>(r), static_cast<std::size_t>(cols)}))
            << "cols " << cols << " row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, FastOps, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace akv::test
