// A spill codec's effect on a model's predictions, as block_codec_test and kv_quality_bench
// measure it: a prefix's KV blocks round-trip through the codec as a restore does, then the rest
// of the text is teacher-forced. Header only; evaluation code, not the engine's restore path.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/batch.h"
#include "kv/block_codec.h"
#include "models/model.h"

namespace akv {

// Round-trips KV blocks [0, n_blocks) of `kv` through `codec`, as a restore from the host tier or
// disk would: read_kv_block -> encode -> decode -> write_kv_block.
inline void round_trip_kv_blocks(Backend& backend, KvStorage& kv, std::int32_t n_blocks,
                                 SpillCodec codec) {
  const BlockShape shape = block_shape_of(kv.layout);
  std::vector<std::byte> raw(shape.raw_bytes()), enc(encoded_bytes(codec, shape));
  for (std::int32_t b = 0; b < n_blocks; ++b) {
    backend.read_kv_block(kv, b, raw);
    encode_block(codec, shape, raw, enc);
    decode_block(codec, shape, enc, raw);
    backend.write_kv_block(kv, b, raw);
  }
}

// Runs ids[0, split) in a KV of its own (split a multiple of block_size, 0 < split < n),
// round-trips those blocks through `codec`, then runs ids[split, n). Returns the logits of the
// continuation's rows [n - split, vocab]: row r predicts ids[split + r + 1]. Native gives the
// exact run.
inline std::vector<float> continuation_logits(Model& model, Backend& backend,
                                              std::span<const std::int32_t> ids,
                                              std::int32_t split, std::int32_t block_size,
                                              SpillCodec codec) {
  const auto n = static_cast<std::int32_t>(ids.size());
  const std::int32_t n_blocks = (n + block_size - 1) / block_size;
  KvStorage kv = backend.alloc_kv(kv_layout_for(model.config(), n_blocks, block_size, backend.preferred_kv_dtype()));
  std::vector<std::int32_t> table(n_blocks);
  for (std::int32_t i = 0; i < n_blocks; ++i) table[i] = i;
  const std::int64_t vocab = model.config().vocab_size;
  std::vector<float> logits;
  for (const auto& [from, to] : {std::pair{0, split}, std::pair{split, n}}) {
    const SequenceChunk chunk{
        .first_row = 0, .n_tokens = to - from, .start_pos = from, .block_table = table};
    const std::vector<std::int32_t> positions = positions_for({&chunk, 1});
    // The prefix's logits are not wanted: one row keeps forward() cheap.
    std::vector<std::int32_t> rows(from == 0 ? 1 : chunk.n_tokens);
    for (std::size_t r = 0; r < rows.size(); ++r)
      rows[r] = from == 0 ? chunk.n_tokens - 1 : static_cast<std::int32_t>(r);
    logits.assign(rows.size() * vocab, 0.0f);
    const ForwardBatch batch{.tokens = ids.subspan(from, to - from),
                             .positions = positions,
                             .sequences = {&chunk, 1},
                             .logit_rows = rows};
    model.forward(batch, kv, logits);
    if (from == 0) round_trip_kv_blocks(backend, kv, split / block_size, codec);
  }
  return logits;
}

// Log-probabilities of one row of logits, in double: x - max - log(sum exp(x - max)).
inline std::vector<double> log_probs(std::span<const float> x) {
  const double m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float v : x) sum += std::exp(v - m);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] - m - std::log(sum);
  return out;
}

// KL(p || q) of two log-probability rows of one size.
inline double kl_divergence(std::span<const double> p, std::span<const double> q) {
  double d = 0;
  for (std::size_t i = 0; i < p.size(); ++i) d += std::exp(p[i]) * (p[i] - q[i]);
  return d;
}

}  // namespace akv
