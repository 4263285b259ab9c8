// Plain temperature draws (backend.h's draw_row) against the Sampler's draw: a seeded request
// draws the tokens it drew before draw_row existed; the CPU backends and the Backend default
// pick what draw_row and argmax_row pick (Backend::sample_rows); and when a request may take
// such an id (Sampler::draws_plain, draw_uniform, take_drawn).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/fast_backend.h"
#include "backend/cpu/reference_backend.h"
#include "engine/sampler.h"
#include "sample_rows_util.h"

namespace akv {
namespace {

using test::sample_on;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Sampler::draw as it was before draw_row, for a request without filters: the reference the
// golden sequences below were recorded with.
std::int32_t draw_as_before(std::vector<float> x, float temperature, double uniform) {
  const auto vocab = static_cast<std::int32_t>(x.size());
  const float inv_t = 1.0f / temperature;
  for (float& v : x) v *= inv_t;
  std::vector<std::int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  float max = x[order[0]];
  for (std::int32_t i = 0; i < vocab; ++i) max = std::max(max, x[order[i]]);
  double total = 0.0;
  for (std::int32_t i = 0; i < vocab; ++i)
    total += std::exp(static_cast<double>(x[order[i]]) - max);
  double u = uniform * total;
  for (std::int32_t i = 0; i < vocab; ++i) {
    u -= std::exp(static_cast<double>(x[order[i]]) - max);
    if (u < 0) return order[i];
  }
  return order[vocab - 1];
}

// The Sampler's uniform01 on its own RNG: the values a request seeded `seed` draws with.
struct Uniforms {
  explicit Uniforms(std::uint64_t seed) : rng(seed) {}
  double next() { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
  std::mt19937_64 rng;
};

// Row `step` of a fixed sequence of logits [vocab]: k / 64 in [-8, 8) from a 64-bit LCG
// (portable, unlike the std:: distributions), every 17th entry -inf.
std::vector<float> golden_row(std::uint64_t step, int vocab) {
  std::vector<float> row(static_cast<std::size_t>(vocab));
  std::uint64_t s = 0x9E3779B97F4A7C15ull * (step + 1);
  for (int i = 0; i < vocab; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    row[i] = static_cast<float>(static_cast<std::int64_t>(s >> 54) - 512) / 64.0f;
    if ((i + static_cast<int>(step)) % 17 == 0) row[i] = -kInf;
  }
  return row;
}

std::vector<float> random_row(std::mt19937& g, int vocab, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> row(static_cast<std::size_t>(vocab));
  for (float& x : row) x = d(g);
  return row;
}

TEST(SampledIds, SeededRequestsDrawTheTokensTheyDrewBefore) {
  // Recorded with the Sampler before its plain draw became draw_row (seed 42, vocab 1000).
  const std::vector<std::pair<float, std::vector<std::int32_t>>> golden{
      {0.3f, {706, 737, 588, 61,  883, 175, 440, 415, 295, 353, 30,  539,
              620, 697, 908, 941, 731, 495, 113, 75,  819, 116, 298, 140}},
      {1.0f, {767, 697, 722, 100, 873, 111, 495, 406, 295, 374, 30,  539,
              665, 670, 867, 959, 746, 495, 68,  75,  707, 138, 389, 118}},
      {1.7f, {767, 684, 723, 104, 873, 110, 515, 393, 295, 380, 30,  525,
              665, 657, 847, 959, 746, 490, 57,  75,  717, 143, 405, 108}},
  };
  for (const auto& [t, want] : golden) {
    Sampler s({.temperature = t, .seed = 42}, 1000, 0, {});
    Uniforms u(42);
    std::vector<TokenLogprob> top;
    std::vector<std::int32_t> got, drawn;
    for (std::uint64_t step = 0; step < want.size(); ++step) {
      const std::vector<float> row = golden_row(step, 1000);
      got.push_back(s.sample(row, 0, top).token);
      drawn.push_back(draw_row(row, t, u.next()));
    }
    EXPECT_EQ(got, want) << "temperature " << t;
    EXPECT_EQ(drawn, want) << "temperature " << t;
  }
}

TEST(SampledIds, DrawRowIsTheDrawThatSampleMakes) {
  std::mt19937 g(17);
  for (float t : {0.3f, 1.0f, 1.7f}) {
    for (int vocab : {1, 2, 31, 1000}) {
      Sampler s({.temperature = t, .seed = 7}, vocab, 0, {});
      Uniforms u(7);
      std::vector<TokenLogprob> top;
      for (int step = 0; step < 50; ++step) {
        std::vector<float> row = random_row(g, vocab, step % 2 ? 1.0f : 8.0f);
        if (step % 3 == 0) row[g() % row.size()] = -kInf;
        const double uniform = u.next();
        const std::int32_t want = draw_as_before(row, t, uniform);
        EXPECT_EQ(draw_row(row, t, uniform), want)
            << "t " << t << " vocab " << vocab << " step " << step;
        EXPECT_EQ(s.sample(row, 0, top).token, want)
            << "t " << t << " vocab " << vocab << " step " << step;
      }
    }
  }
}

TEST(SampledIds, EdgeRowsDrawAsBefore) {
  const double almost_one = 1.0 - 0x1.0p-53;  // the largest uniform
  struct Case {
    std::vector<float> row;
    double u;
    std::int32_t want;
  };
  const std::vector<Case> cases{
      {{0, 0, 0, 0}, 0.0, 0},                  // u = 0: the first id of nonzero weight
      {{-kInf, -kInf, 1, 2}, 0.0, 2},          // ... skipping -inf
      {{0, 0, 0, 0}, 0.25, 1},                 // exactly on a boundary: the next id
      {{0, 0, 0, 0}, almost_one, 3},           // the last id
      {{0, 0, 0, -kInf}, almost_one, 2},       // ... of nonzero weight
      {{-kInf, 5, -kInf, -kInf}, 0.7, 1},      // one finite logit
      {{kNaN, 1, 2, 3}, 0.5, 3},               // NaN: total NaN, the last id
      {{1, 2, kNaN, 3}, 0.1, 3},               // NaN later: the same
      {{1, kInf, 2, 3}, 0.1, 3},               // +inf: inf - inf is NaN, the last id
      {{-kInf, -kInf, -kInf, -kInf}, 0.5, 3},  // all -inf: the same
      {{4}, 0.9, 0},                           // one id
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    EXPECT_EQ(draw_row(c.row, 1.0f, c.u), c.want) << "case " << i;
    EXPECT_EQ(draw_as_before(c.row, 1.0f, c.u), c.want) << "case " << i;
  }
  // Overflow at a tiny temperature: +inf x is the NaN case, -inf x weighs nothing.
  EXPECT_EQ(draw_row(std::vector<float>{1e30f, 0.0f, 1.0f}, 1e-20f, 0.5), 2);
  EXPECT_EQ(draw_row(std::vector<float>{-1e30f, 0.0f, -2.0f}, 1e-20f, 0.9), 1);
}

TEST(SampledIds, BackendsPickWhatDrawRowAndArgmaxRowPick) {
  std::mt19937 g(3);
  std::vector<std::vector<float>> rows;
  std::vector<float> temperature;
  std::vector<double> u;
  const float temperatures[] = {0.0f, 0.3f, 1.0f, 1.7f, -1.0f};
  for (int i = 0; i < 40; ++i) {
    rows.push_back(random_row(g, 777, 3.0f));
    if (i % 4 == 1) rows.back()[g() % 777] = -kInf;
    if (i == 7) rows.back()[5] = kNaN;
    temperature.push_back(temperatures[i % 5]);
    u.push_back(i == 2   ? 0.0
                : i == 3 ? 1.0 - 0x1.0p-53
                         : std::uniform_real_distribution<double>(0, 1)(g));
  }
  std::vector<std::int32_t> want;
  for (std::size_t i = 0; i < rows.size(); ++i)
    want.push_back(temperature[i] <= 0 ? argmax_row(rows[i])
                                       : draw_row(rows[i], temperature[i], u[i]));
  EXPECT_EQ(want[7], 776) << "a NaN row draws the last id";
  ReferenceBackend ref;
  FastBackend fast;
  EXPECT_EQ(sample_on(ref, rows, temperature, u, false), want);
  EXPECT_EQ(sample_on(ref, rows, temperature, u, true), want);
  EXPECT_EQ(sample_on(fast, rows, temperature, u, false), want);
}

TEST(SampledIds, OnlyPlainDrawsTakeADrawnId) {
  auto plain = [](SamplingParams p) { return Sampler(p, 8, 1, {}).draws_plain(); };
  EXPECT_TRUE(plain({.temperature = 1.0f}));
  EXPECT_TRUE(plain({.temperature = 0.7f, .top_k = 8}));  // top_k >= vocab filters nothing
  EXPECT_TRUE(plain({.temperature = 0.7f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f}));
  EXPECT_FALSE(plain({}));                                 // greedy: picks_raw_argmax
  EXPECT_FALSE(plain({.temperature = 0.7f, .top_k = 1}));  // greedy too
  EXPECT_FALSE(plain({.temperature = 0.7f, .top_k = 5}));
  EXPECT_FALSE(plain({.temperature = 0.7f, .top_p = 0.9f}));
  EXPECT_FALSE(plain({.temperature = 0.7f, .min_p = 0.05f}));
  EXPECT_FALSE(plain({.temperature = 0.7f, .repetition_penalty = 1.1f}));
  EXPECT_FALSE(plain({.temperature = 0.7f, .presence_penalty = 0.5f}));
  EXPECT_FALSE(plain({.temperature = 0.7f, .frequency_penalty = 0.5f}));
}

TEST(SampledIds, TakeDrawnRecordsTheTokenAsSampleDoes) {
  std::mt19937 g(9);
  const SamplingParams p{.temperature = 1.0f, .seed = 5};
  Sampler a(p, 100, 0, {}), b(p, 100, 0, {});
  std::vector<TokenLogprob> top;
  for (int step = 0; step < 30; ++step) {
    const std::vector<float> row = random_row(g, 100, 2.0f);
    const SampleResult sampled = a.sample(row, 0, top);
    const SampleResult taken = b.take_drawn(draw_row(row, b.temperature(), b.draw_uniform()));
    EXPECT_EQ(taken.token, sampled.token) << "step " << step;
    EXPECT_TRUE(std::isnan(taken.logprob));
  }
  // The RNGs are still in step: both samplers continue identically.
  const std::vector<float> row = random_row(g, 100, 2.0f);
  EXPECT_EQ(a.sample(row, 0, top).token, b.sample(row, 0, top).token);
}

}  // namespace
}  // namespace akv
