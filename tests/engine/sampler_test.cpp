// Sampler: greedy, seeded determinism, each filter's effect, penalties, logprobs.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

namespace akv {
namespace {

// Logits whose softmax is `probs` (the rest of a vocabulary of 8 gets tiny mass).
std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> x(8, -30.0f);
  for (std::size_t i = 0; i < probs.size(); ++i) x[i] = static_cast<float>(std::log(probs[i]));
  return x;
}

std::map<std::int32_t, int> histogram(const SamplingParams& p, const std::vector<float>& logits, int n,
                                      std::uint64_t seed = 7) {
  Sampler s(p, static_cast<std::int32_t>(logits.size()), seed, {});
  std::vector<TokenLogprob> top;
  std::map<std::int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(logits, 0, top).token];
  return h;
}

const std::vector<float> kLogits = logits_for({0.5, 0.3, 0.15, 0.05});

TEST(Sampler, GreedyTakesTheArgmaxLowestIdOnTies) {
  Sampler s({}, 4, 1, {});
  std::vector<TokenLogprob> top;
  EXPECT_EQ(s.sample(std::vector<float>{1, 3, 3, 2}, 0, top).token, 1);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  SamplingParams p{.temperature = 1.0f, .seed = 1234};
  auto run = [&](SamplingParams q) {
    Sampler s(q, 8, 99, {});
    std::vector<TokenLogprob> top;
    std::vector<std::int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(s.sample(kLogits, 0, top).token);
    return out;
  };
  EXPECT_EQ(run(p), run(p));
  SamplingParams other = p;
  other.seed = 4321;
  EXPECT_NE(run(p), run(other));
}

TEST(Sampler, TemperatureOneFollowsTheDistribution) {
  const auto h = histogram({.temperature = 1.0f}, kLogits, 20000);
  const double want[] = {0.5, 0.3, 0.15, 0.05};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(h.count(i) ? h.at(i) / 20000.0 : 0.0, want[i], 0.015) << i;
}

TEST(Sampler, LowTemperatureIsNearlyGreedyHighIsFlatter) {
  EXPECT_EQ(histogram({.temperature = 0.05f}, kLogits, 2000).at(0), 2000);
  const auto hot = histogram({.temperature = 5.0f}, kLogits, 20000);
  EXPECT_GT(hot.at(3), 20000 * 0.15);  // p=0.05 at T=1
}

TEST(Sampler, TopKKeepsOnlyTheKBest) {
  const auto h = histogram({.temperature = 1.0f, .top_k = 2}, kLogits, 5000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(0) && h.count(1));
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  const auto h = histogram({.temperature = 1.0f, .top_p = 0.6f}, kLogits, 5000);
  EXPECT_EQ(h.size(), 2u);  // 0.5 < 0.6 <= 0.8
  EXPECT_NEAR(h.at(0) / 5000.0, 0.5 / 0.8, 0.03);
  EXPECT_EQ(histogram({.temperature = 1.0f, .top_p = 0.4f}, kLogits, 1000).size(), 1u);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheBest) {
  const auto h = histogram({.temperature = 1.0f, .min_p = 0.35f}, kLogits, 5000);  // keeps p >= 0.175
  EXPECT_EQ(h.size(), 2u);
  EXPECT_EQ(histogram({.temperature = 1.0f, .min_p = 0.25f}, kLogits, 5000).size(), 3u);
}

TEST(Sampler, RepetitionPenaltyAppliesToPromptTokens) {
  const std::vector<std::int32_t> prompt{0};
  Sampler s({.repetition_penalty = 2.0f}, 4, 1, prompt);
  std::vector<TokenLogprob> top;
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 2.0f, 0.0f, -1.0f}, 0, top).token, 1);  // 3/2 < 2
}

TEST(Sampler, PresenceAndFrequencyPenaliseWhatWasGenerated) {
  std::vector<TokenLogprob> top;
  const std::vector<float> x{2.0f, 1.5f, 0.0f, 0.0f};
  Sampler presence({.presence_penalty = 1.0f}, 4, 1, {});
  EXPECT_EQ(presence.sample(x, 0, top).token, 0);
  EXPECT_EQ(presence.sample(x, 0, top).token, 1);  // 2 - 1 < 1.5
  Sampler freq({.frequency_penalty = 0.3f}, 4, 1, {});
  EXPECT_EQ(freq.sample(x, 0, top).token, 0);  // 2.0
  EXPECT_EQ(freq.sample(x, 0, top).token, 0);  // 1.7
  EXPECT_EQ(freq.sample(x, 0, top).token, 1);  // 1.4 < 1.5
  Sampler none({}, 4, 1, {});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(none.sample(x, 0, top).token, 0);
}

TEST(Sampler, LogprobsAreTheRawDistributionBestFirst) {
  Sampler s({.temperature = 1.0f, .top_k = 1, .seed = 3}, 8, 1, {});
  std::vector<TokenLogprob> top;
  const SampleResult r = s.sample(kLogits, 3, top);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 0);
  EXPECT_EQ(top[1].id, 1);
  EXPECT_EQ(top[2].id, 2);
  EXPECT_NEAR(top[0].logprob, std::log(0.5), 1e-4);
  EXPECT_NEAR(top[2].logprob, std::log(0.15), 1e-4);
  EXPECT_EQ(r.token, 0);
  EXPECT_FLOAT_EQ(r.logprob, top[0].logprob);
  std::vector<float> lp(8);
  log_softmax(kLogits, lp);
  double sum = 0;
  for (float v : lp) sum += std::exp(v);
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

// Allows only even ids, and records what it was told was sampled.
class EvenOnly final : public TokenConstraint {
 public:
  void mask(std::span<float> logits) override {
    for (std::size_t i = 1; i < logits.size(); i += 2) logits[i] = -INFINITY;
  }
  void accept(std::int32_t token) override { accepted.push_back(token); }
  bool done() const override { return false; }
  std::vector<std::int32_t> accepted;
};

TEST(Sampler, ConstraintMasksBeforeSamplingAndSeesEveryToken) {
  for (float temperature : {0.0f, 1.0f}) {
    EvenOnly constraint;
    Sampler s({.temperature = temperature, .seed = 11}, 8, 1, {});
    s.set_constraint(&constraint);
    const std::vector<float> logits = {0.1f, 5.0f, 0.2f, 4.0f, 0.3f, 3.0f, 0.4f, 2.0f};  // odd ids favoured
    std::vector<TokenLogprob> top;
    std::vector<std::int32_t> got;
    for (int i = 0; i < 50; ++i) got.push_back(s.sample(logits, 0, top).token);
    for (std::int32_t t : got) EXPECT_EQ(t % 2, 0) << "temperature " << temperature;
    EXPECT_EQ(constraint.accepted, got);
  }
}

}  // namespace
}  // namespace akv
