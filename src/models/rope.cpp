#include "models/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/check.h"

namespace akv {

namespace {

std::vector<double> default_inv_freq(double base, std::int64_t dim) {
  std::vector<double> f(dim / 2);
  for (std::int64_t i = 0; i < dim / 2; ++i)
    f[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
  return f;
}

void apply_llama3(const RopeConfig& r, std::int64_t max_pos, std::vector<double>& inv) {
  const double old_ctx = static_cast<double>(r.original_max_position > 0 ? r.original_max_position : max_pos);
  const double low_wavelen = old_ctx / r.low_freq_factor;
  const double high_wavelen = old_ctx / r.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_wavelen) {
      f = f / r.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      f = (1.0 - smooth) * f / r.factor + smooth * f;
    }
  }
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

void apply_yarn(const RopeConfig& r, std::int64_t max_pos, std::int64_t dim, RopeFrequencies& out) {
  const double base = r.theta;
  const double orig = static_cast<double>(r.original_max_position > 0 ? r.original_max_position : max_pos);
  const double factor = r.factor;
  double attention = r.attention_factor;
  if (attention <= 0) {
    attention = (r.mscale > 0 && r.mscale_all_dim > 0)
                    ? yarn_mscale(factor, r.mscale) / yarn_mscale(factor, r.mscale_all_dim)
                    : yarn_mscale(factor, 1.0);
  }
  auto correction_dim = [&](double n_rot) {
    return (static_cast<double>(dim) * std::log(orig / (n_rot * 2.0 * std::numbers::pi))) /
           (2.0 * std::log(base));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (std::int64_t i = 0; i < dim / 2; ++i) {
    const double pos_freq = std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
    const double extrapolation = 1.0 / pos_freq;
    const double interpolation = 1.0 / (factor * pos_freq);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    out.inv_freq[i] = interpolation * (1.0 - extrapolation_weight) + extrapolation * extrapolation_weight;
  }
  out.attention_scaling = attention;
}

void apply_longrope(const RopeConfig& r, std::int64_t max_pos, std::int64_t dim, std::int64_t seq_len,
                    RopeFrequencies& out) {
  const std::int64_t orig = r.original_max_position > 0 ? r.original_max_position : max_pos;
  const std::vector<double>& ext = seq_len > orig ? r.long_factor : r.short_factor;
  AKV_CHECK(static_cast<std::int64_t>(ext.size()) == dim / 2, "longrope factor length checked at load");
  for (std::int64_t i = 0; i < dim / 2; ++i) {
    const double pos_freq = std::pow(r.theta, static_cast<double>(2 * i) / static_cast<double>(dim));
    out.inv_freq[i] = 1.0 / (ext[i] * pos_freq);
  }
  double attention = r.attention_factor;
  if (attention <= 0) {
    const double factor = static_cast<double>(max_pos) / static_cast<double>(orig);
    attention = factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(orig)));
  }
  out.attention_scaling = attention;
}

}  // namespace

bool rope_depends_on_length(const RopeConfig& rope) {
  return rope.type == RopeType::Dynamic || rope.type == RopeType::LongRope;
}

RopeFrequencies rope_frequencies(const RopeConfig& r, std::int64_t head_dim,
                                 std::int64_t max_position_embeddings, std::int64_t seq_len) {
  RopeFrequencies out;
  std::int64_t dim = static_cast<std::int64_t>(static_cast<double>(head_dim) * r.partial_rotary_factor);
  dim -= dim % 2;
  out.rotary_dim = dim;
  out.inv_freq = default_inv_freq(r.theta, dim);
  switch (r.type) {
    case RopeType::Default:
      break;
    case RopeType::Linear:
      for (double& f : out.inv_freq) f /= r.factor;
      break;
    case RopeType::Dynamic: {
      const std::int64_t orig = r.original_max_position > 0 ? r.original_max_position : max_position_embeddings;
      if (seq_len > orig) {
        const double d = static_cast<double>(dim);
        const double base = r.theta * std::pow(r.factor * static_cast<double>(seq_len) / static_cast<double>(orig) -
                                                   (r.factor - 1.0),
                                               d / (d - 2.0));
        out.inv_freq = default_inv_freq(base, dim);
      }
      break;
    }
    case RopeType::Yarn:
      apply_yarn(r, max_position_embeddings, dim, out);
      break;
    case RopeType::Llama3:
      apply_llama3(r, max_position_embeddings, out.inv_freq);
      break;
    case RopeType::LongRope:
      apply_longrope(r, max_position_embeddings, dim, seq_len, out);
      break;
  }
  if (!r.freq_factors.empty()) {
    AKV_CHECK(r.freq_factors.size() == out.inv_freq.size(), "rope freq_factors length checked at load");
    for (std::size_t i = 0; i < out.inv_freq.size(); ++i) out.inv_freq[i] /= r.freq_factors[i];
  }
  return out;
}

}  // namespace akv
