// Greedy ids picked by the backend (Backend::sample_rows at temperature 0) against the Sampler's greedy pick:
// ties, NaN and infinities, on the CPU backends and the Backend default; and when a request may
// take such an id (Sampler::picks_raw_argmax).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/fast_backend.h"
#include "backend/cpu/reference_backend.h"
#include "engine/sampler.h"
#include "sample_rows_util.h"

namespace akv {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Rows of 8 logits that probe the rule: ties, NaN, all NaN, infinities, signed zeros.
std::vector<std::vector<float>> edge_rows() {
  return {
      {1, 3, 3, 2, 0, 0, 0, 0},                                  // tie: lowest id
      {5, 5, 5, 5, 5, 5, 5, 5},                                  // all equal: 0
      {kNaN, 9, 1, 2, 3, 4, 5, 6},                               // NaN at 0 is never beaten: 0
      {1, kNaN, 9, kNaN, 9, 2, 3, 4},                            // NaN skipped, tie after it: 2
      {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN},          // all NaN: 0
      {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf},  // all -inf: 0
      {-kInf, -kInf, -3, -kInf, -3, -kInf, -kInf, -kInf},        // 2
      {1, kInf, 2, kInf, kNaN, 3, 4, 5},                         // +inf, tie: 1
      {-0.0f, 0.0f, -1, -2, -3, -4, -5, -6},                     // -0 == +0: 0
      {-1, -2, -3, -4, -5, -6, -7, -0.5f},                       // last id: 7
      {-kInf, kNaN, -kInf, -1e30f, kNaN, -1e30f, -kInf, kNaN},   // 3
  };
}

std::int32_t sampler_greedy(const std::vector<float>& row) {
  Sampler s({}, static_cast<std::int32_t>(row.size()), 1, {});
  std::vector<TokenLogprob> top;
  return s.sample(row, 0, top).token;
}

// Greedy ids of `rows` through Backend::sample_rows at temperature 0.
std::vector<std::int32_t> argmax_on(Backend& backend, const std::vector<std::vector<float>>& rows,
                                    bool base) {
  return test::sample_on(backend, rows, std::vector<float>(rows.size(), 0.0f),
                         std::vector<double>(rows.size(), 0.5), base);
}

void expect_sampler_rule(const std::vector<std::vector<float>>& rows) {
  ReferenceBackend ref;
  FastBackend fast;
  std::vector<std::int32_t> want;
  for (const auto& r : rows) want.push_back(sampler_greedy(r));
  EXPECT_EQ(argmax_on(ref, rows, false), want);
  EXPECT_EQ(argmax_on(ref, rows, true), want);
  EXPECT_EQ(argmax_on(fast, rows, false), want);
  for (std::size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(argmax_row(rows[i]), want[i]) << "row " << i;
}

TEST(GreedyIds, EdgeRowsPickWhatTheSamplerPicks) {
  const auto rows = edge_rows();
  expect_sampler_rule(rows);
  const std::vector<std::int32_t> expected{1, 0, 0, 2, 0, 0, 2, 1, 0, 7, 3};
  std::vector<std::int32_t> got;
  for (const auto& r : rows) got.push_back(sampler_greedy(r));
  EXPECT_EQ(got, expected);
}

TEST(GreedyIds, RandomRowsWithTiesPickWhatTheSamplerPicks) {
  std::mt19937 g(5);
  std::vector<std::vector<float>> rows(16, std::vector<float>(1000));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    // Few distinct values: many ties for the maximum, some NaN and -inf.
    for (float& x : rows[i]) x = static_cast<float>(std::uniform_int_distribution<int>(0, 20)(g));
    for (int k = 0; k < 30; ++k)
      rows[i][std::uniform_int_distribution<int>(0, 999)(g)] = i % 2 ? kNaN : -kInf;
  }
  rows[3][0] = kNaN;
  expect_sampler_rule(rows);
}

TEST(GreedyIds, OnlyPlainGreedyRequestsTakeAPickedId) {
  auto picks = [](SamplingParams p) { return Sampler(p, 8, 1, {}).picks_raw_argmax(); };
  EXPECT_TRUE(picks({}));
  EXPECT_TRUE(picks({.temperature = 0.7f, .top_k = 1}));
  EXPECT_FALSE(picks({.temperature = 0.7f}));
  EXPECT_FALSE(picks({.repetition_penalty = 1.1f}));
  EXPECT_FALSE(picks({.presence_penalty = 0.5f}));
  EXPECT_FALSE(picks({.frequency_penalty = 0.5f}));
}

TEST(GreedyIds, TakeArgmaxRecordsTheTokenAsSampleDoes) {
  const std::vector<float> row{1, 3, 3, 2, 0, 0, 0, 0};
  Sampler a({}, 8, 1, {}), b({}, 8, 1, {});
  std::vector<TokenLogprob> top;
  const SampleResult sampled = a.sample(row, 0, top);
  const SampleResult taken = b.take_argmax(argmax_row(row));
  EXPECT_EQ(taken.token, sampled.token);
  EXPECT_TRUE(std::isnan(taken.logprob));
  // Both continue identically (the recorded history is the same).
  EXPECT_EQ(a.sample(row, 0, top).token, b.sample(row, 0, top).token);
}

}  // namespace
}  // namespace akv
