// Picks the next token of one request from its logits: penalties, temperature, top-k, top-p,
// min-p, then a draw from the request's own RNG (so a seed gives the same tokens whatever else
// is in the batch). Also reports the token's logprob and the top-N alternatives under the raw
// model distribution. One Sampler per request; scratch is allocated once, at construction.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "base/token_constraint.h"
#include "engine/request.h"

namespace akv {

struct SampleResult {
  std::int32_t token = -1;
  float logprob = 0.0f;
};

class Sampler {
 public:
  // `seed` is used when params.seed is unset (the engine passes a fresh random one).
  Sampler(const SamplingParams& params, std::int32_t vocab_size, std::uint64_t seed,
          std::span<const std::int32_t> prompt);

  // Samples from logits [vocab_size]; fills `top` with n_top best (id, logprob), best first.
  // Records the chosen token for the penalties of later steps.
  SampleResult sample(std::span<const float> logits, std::int32_t n_top, std::vector<TokenLogprob>& top);

  // True when sample() picks argmax_row (backend.h) of the raw logits: greedy (temperature 0 or
  // top_k 1), no penalties, no constraint. The caller may then pick the id where the logits are
  // (Backend::sample_rows at temperature 0) and hand it to take_argmax() instead of copying the row out.
  bool picks_raw_argmax() const;
  // Records `token`, the argmax_row of this step's logits, as sample() would have (the penalty
  // history). Requires picks_raw_argmax(). The logprob is not computed: it is NaN.
  SampleResult take_argmax(std::int32_t token);

  // True when sample() is draw_row (backend.h) of the raw logits at temperature(): temperature
  // > 0, top_k 0 or at least the vocabulary (not 1), top_p >= 1, min_p <= 0, no penalties, no
  // constraint. The caller may then draw where the logits are (Backend::sample_rows) with the
  // uniform draw_uniform() gives and hand the id to take_drawn() instead of copying the row out.
  bool draws_plain() const;
  float temperature() const { return params_.temperature; }
  // The uniform in [0, 1) that sample() would draw with now: one step of the request's RNG, so
  // the tokens are those of sample() for the same seed. Requires draws_plain(); once per token,
  // then take_drawn().
  double draw_uniform();
  // Records `token`, draw_row of this step's logits with draw_uniform()'s value, as sample()
  // would have. The logprob is not computed: it is NaN.
  SampleResult take_drawn(std::int32_t token);

  // Restricts every later sample to the tokens `constraint` allows (applied after penalties,
  // before temperature and the filters). Not owned; must outlive the sampler. nullptr: none.
  void set_constraint(TokenConstraint* constraint) { constraint_ = constraint; }

 private:
  void apply_penalties(std::vector<float>& x) const;
  std::int32_t draw(std::vector<float>& x);
  double uniform01();
  bool filters(std::int32_t vocab) const;  // top-k, top-p or min-p narrows the candidates
  bool raw_logits() const;  // no penalties, no constraint: sample() sees the logits as they are
  SampleResult take(std::int32_t token);  // records a token picked elsewhere (logprob NaN)

  SamplingParams params_;
  TokenConstraint* constraint_ = nullptr;
  std::mt19937_64 rng_;
  std::vector<std::int32_t> generated_count_;  // [vocab] times generated
  std::vector<bool> seen_;                     // [vocab] in prompt or generated
  std::vector<float> work_;                    // [vocab] adjusted logits
  std::vector<float> logprobs_;                // [vocab] raw log-softmax
  std::vector<std::int32_t> order_;            // [vocab] candidate ids
  bool uniform_pending_ = false;               // draw_uniform() given, take_drawn() not yet
};

// log_softmax of `logits` into `out` (same size), accumulated in double.
void log_softmax(std::span<const float> logits, std::span<float> out);

}  // namespace akv
