// The two forms of the gated delta rule (delta_rule.h) against each other: token by token and
// chunked, from a zero and from a non-zero state, over lengths that do and do not fill the
// last chunk; and the state carried across calls equals one call over the whole sequence.
#include "backend/cpu/delta_rule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace akv {
namespace {

struct Head {
  std::int64_t n, dk, dv;
  std::vector<float> q, k, v, g, beta, state;

  Head(std::int64_t n_tokens, std::int64_t k_dim, std::int64_t v_dim, unsigned seed)
      : n(n_tokens), dk(k_dim), dv(v_dim) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (auto* x : {&q, &k}) {
      x->resize(static_cast<std::size_t>(n * dk));
      for (float& f : *x) f = normal(rng);
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
    for (std::int64_t t = 0; t < n; ++t) {
      l2_normalize(std::span<float>(q).subspan(t * dk, dk), 1e-6f, scale);
      l2_normalize(std::span<float>(k).subspan(t * dk, dk), 1e-6f, 1.0f);
    }
    v.resize(static_cast<std::size_t>(n * dv));
    for (float& f : v) f = normal(rng);
    for (std::int64_t t = 0; t < n; ++t) g.push_back(-2.0f * unit(rng)), beta.push_back(unit(rng));
    state.resize(static_cast<std::size_t>(dk * dv));
    for (float& f : state) f = 0.3f * normal(rng);
  }

  DeltaRuleInputs inputs(std::int64_t begin, std::int64_t count) const {
    return {.q = q.data() + begin * dk,
            .k = k.data() + begin * dk,
            .v = v.data() + begin * dv,
            .q_stride = dk,
            .k_stride = dk,
            .v_stride = dv,
            .g = g.data() + begin,
            .beta = beta.data() + begin,
            .g_stride = 1,
            .n_tokens = count,
            .k_dim = dk,
            .v_dim = dv};
  }
};

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(DeltaRule, ChunkedEqualsRecurrent) {
  for (const std::int64_t n : {1, 7, 64, 150}) {
    for (const std::int64_t chunk : {1, 5, 64}) {
      for (const bool zero_state : {true, false}) {
        SCOPED_TRACE(testing::Message()
                     << "n " << n << " chunk " << chunk << " zero " << zero_state);
        const Head h(n, 16, 8, static_cast<unsigned>(n * 31 + chunk));
        std::vector<float> s1 = zero_state ? std::vector<float>(h.state.size()) : h.state, s2 = s1;
        std::vector<float> o1(n * h.dv), o2(n * h.dv), scratch;
        delta_rule_recurrent(h.inputs(0, n), s1.data(), o1.data(), h.dv);
        delta_rule_chunked(h.inputs(0, n), s2.data(), o2.data(), h.dv, chunk, scratch);
        EXPECT_LE(max_diff(o1, o2), 2e-5f);
        EXPECT_LE(max_diff(s1, s2), 2e-5f);
        float norm = 0;
        for (float x : o1) norm = std::max(norm, std::fabs(x));
        EXPECT_GT(norm, 1e-4f);  // the outputs are not trivially zero
      }
    }
  }
}

TEST(DeltaRule, StateCarriesAcrossCalls) {
  const Head h(100, 16, 16, 7);
  std::vector<float> whole = h.state, split = h.state;
  std::vector<float> o_whole(100 * h.dv), o_split(100 * h.dv), scratch;
  delta_rule_chunked(h.inputs(0, 100), whole.data(), o_whole.data(), h.dv, 64, scratch);
  delta_rule_chunked(h.inputs(0, 37), split.data(), o_split.data(), h.dv, 64, scratch);
  delta_rule_recurrent(h.inputs(37, 1), split.data(), o_split.data() + 37 * h.dv, h.dv);
  delta_rule_chunked(h.inputs(38, 62), split.data(), o_split.data() + 38 * h.dv, h.dv, 16, scratch);
  EXPECT_LE(max_diff(o_whole, o_split), 2e-5f);
  EXPECT_LE(max_diff(whole, split), 2e-5f);
}

}  // namespace
}  // namespace akv
