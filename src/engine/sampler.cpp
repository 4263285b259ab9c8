#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backend/backend.h"
#include "base/check.h"

namespace akv {

void log_softmax(std::span<const float> logits, std::span<float> out) {
  AKV_CHECK(out.size() == logits.size() && !logits.empty(), "log_softmax sizes");
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double log_sum = std::log(sum) + max;
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(logits[i] - log_sum);
}

Sampler::Sampler(const SamplingParams& params, std::int32_t vocab_size, std::uint64_t seed,
                 std::span<const std::int32_t> prompt)
    : params_(params),
      rng_(params.seed.value_or(seed)),
      generated_count_(vocab_size, 0),
      seen_(vocab_size, false),
      work_(vocab_size),
      logprobs_(vocab_size),
      order_(vocab_size) {
  for (std::int32_t t : prompt)
    if (t >= 0 && t < vocab_size) seen_[t] = true;
}

SampleResult Sampler::sample(std::span<const float> logits, std::int32_t n_top, std::vector<TokenLogprob>& top) {
  const auto vocab = static_cast<std::int32_t>(work_.size());
  AKV_CHECK(static_cast<std::int32_t>(logits.size()) == vocab, "logits size is not the vocabulary size");
  log_softmax(logits, logprobs_);
  top.clear();
  if (n_top > 0) {
    const std::int32_t n = std::min(n_top, vocab);
    std::iota(order_.begin(), order_.end(), 0);
    std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), [&](std::int32_t a, std::int32_t b) {
      return logprobs_[a] > logprobs_[b] || (logprobs_[a] == logprobs_[b] && a < b);
    });
    for (std::int32_t i = 0; i < n; ++i) top.push_back({order_[i], logprobs_[order_[i]]});
  }

  std::copy(logits.begin(), logits.end(), work_.begin());
  apply_penalties(work_);
  if (constraint_ != nullptr) constraint_->mask(work_);
  std::int32_t token = 0;
  if (params_.temperature <= 0.0f || params_.top_k == 1) {
    token = argmax_row(work_);
  } else {
    token = draw(work_);
  }
  if (constraint_ != nullptr) constraint_->accept(token);
  ++generated_count_[token];
  seen_[token] = true;
  return {token, logprobs_[token]};
}

bool Sampler::raw_logits() const {
  const SamplingParams& p = params_;
  return p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f &&
         constraint_ == nullptr;
}

bool Sampler::picks_raw_argmax() const {
  return (params_.temperature <= 0.0f || params_.top_k == 1) && raw_logits();
}

SampleResult Sampler::take_argmax(std::int32_t token) {
  AKV_CHECK(picks_raw_argmax(), "take_argmax: the sampler does more than a raw argmax");
  return take(token);
}

bool Sampler::draws_plain() const {
  return params_.temperature > 0.0f && params_.top_k != 1 && !filters(static_cast<std::int32_t>(work_.size())) &&
         raw_logits();
}

double Sampler::draw_uniform() {
  AKV_CHECK(draws_plain(), "draw_uniform: the sampler does more than a plain draw");
  AKV_CHECK(!uniform_pending_, "draw_uniform twice for one token");
  uniform_pending_ = true;
  return uniform01();
}

SampleResult Sampler::take_drawn(std::int32_t token) {
  AKV_CHECK(uniform_pending_, "take_drawn without draw_uniform");
  uniform_pending_ = false;
  return take(token);
}

SampleResult Sampler::take(std::int32_t token) {
  AKV_CHECK(token >= 0 && token < static_cast<std::int32_t>(work_.size()), "picked token outside the vocabulary");
  ++generated_count_[token];
  seen_[token] = true;
  return {token, std::numeric_limits<float>::quiet_NaN()};
}

bool Sampler::filters(std::int32_t vocab) const {
  return (params_.top_k > 0 && params_.top_k < vocab) || params_.top_p < 1.0f || params_.min_p > 0.0f;
}

void Sampler::apply_penalties(std::vector<float>& x) const {
  const float rep = params_.repetition_penalty;
  const float pres = params_.presence_penalty, freq = params_.frequency_penalty;
  if (rep != 1.0f) {
    for (std::size_t i = 0; i < x.size(); ++i)
      if (seen_[i]) x[i] = x[i] > 0 ? x[i] / rep : x[i] * rep;
  }
  if (pres != 0.0f || freq != 0.0f) {
    for (std::size_t i = 0; i < x.size(); ++i)
      if (const std::int32_t c = generated_count_[i]; c > 0) x[i] -= freq * static_cast<float>(c) + pres;
  }
}

std::int32_t Sampler::draw(std::vector<float>& x) {
  const auto vocab = static_cast<std::int32_t>(x.size());
  if (!filters(vocab)) return draw_row(x, params_.temperature, uniform01());  // the one plain draw
  const float inv_t = 1.0f / params_.temperature;
  for (float& v : x) v *= inv_t;
  auto better = [&](std::int32_t a, std::int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };

  // Candidates in order_[0, n), sorted best first (the filters need ranks).
  std::iota(order_.begin(), order_.end(), 0);
  std::int32_t n = vocab;
  if (params_.top_k > 0 && params_.top_k < vocab) {
    n = params_.top_k;
    std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), better);
  } else {
    std::sort(order_.begin(), order_.end(), better);
  }
  const float max = x[order_[0]];
  // Unnormalised probabilities; the best candidate has weight 1.
  double total = 0.0;
  for (std::int32_t i = 0; i < n; ++i) total += std::exp(static_cast<double>(x[order_[i]]) - max);
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    std::int32_t keep = 0;
    while (keep < n) {
      cum += std::exp(static_cast<double>(x[order_[keep]]) - max);
      ++keep;
      if (cum >= params_.top_p * total) break;
    }
    n = keep;
    total = cum;
  }
  if (params_.min_p > 0.0f) {
    double kept = 0.0;
    std::int32_t keep = 0;
    for (; keep < n; ++keep) {
      const double w = std::exp(static_cast<double>(x[order_[keep]]) - max);
      if (keep > 0 && w < params_.min_p) break;  // p / p_max < min_p
      kept += w;
    }
    n = keep;
    total = kept;
  }
  double u = uniform01() * total;
  for (std::int32_t i = 0; i < n; ++i) {
    u -= std::exp(static_cast<double>(x[order_[i]]) - max);
    if (u < 0) return order_[i];
  }
  return order_[n - 1];  // rounding left a sliver of mass
}

double Sampler::uniform01() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

}  // namespace akv
