// The attention parity check the CUDA op tests share: random K/V stored for every position of a
// batch's sequences (block tables drawn from a shuffled pool), then attention on both backends.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "parity_util.h"

namespace akv::test {

// Sequences of a batch: where their chunk starts and how many tokens it holds.
struct SeqSpec {
  std::int32_t start_pos, n_tokens;
};

// Stores random K/V for every position of `seqs` (block tables drawn from a shuffled pool),
// then runs attention for each chunk on both backends and returns the relative error.
inline double attention_error(DType kv_dtype, std::int64_t n_heads, std::int64_t n_kv, std::int64_t head_dim,
                              std::int64_t window, double softcap, const std::vector<SeqSpec>& seqs,
                              bool sinks = false) {
  Backends& b = backends();
  const std::int64_t block = 16;
  std::vector<std::vector<std::int32_t>> tables;
  std::int64_t n_blocks = 0;
  for (const SeqSpec& s : seqs) n_blocks += (s.start_pos + s.n_tokens + block - 1) / block;
  std::vector<std::int32_t> pool(static_cast<std::size_t>(n_blocks + 3));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng());
  std::size_t next = 0;
  for (const SeqSpec& s : seqs) {
    tables.emplace_back();
    for (std::int64_t i = 0; i < (s.start_pos + s.n_tokens + block - 1) / block; ++i) tables.back().push_back(pool[next++]);
  }
  const KvLayout layout{.n_layers = 2, .n_blocks = n_blocks + 3, .block_size = block, .n_kv_heads = n_kv,
                        .head_dim = head_dim, .dtype = kv_dtype};
  KvStorage kv_cpu = b.ref.alloc_kv(layout), kv_gpu = b.gpu.alloc_kv(layout);

  // Whole history of every sequence, stored in one batch.
  std::vector<SequenceChunk> all, chunks;
  std::int32_t rows = 0, chunk_rows = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::int32_t len = seqs[i].start_pos + seqs[i].n_tokens;
    all.push_back({.first_row = rows, .n_tokens = len, .start_pos = 0, .block_table = tables[i]});
    chunks.push_back({.first_row = chunk_rows, .n_tokens = seqs[i].n_tokens, .start_pos = seqs[i].start_pos,
                      .block_table = tables[i]});
    rows += len;
    chunk_rows += seqs[i].n_tokens;
  }
  const std::vector<std::int32_t> all_pos = positions_for(all), pos = positions_for(chunks);
  const std::vector<std::int32_t> all_tokens(all_pos.size()), tokens(pos.size());
  const ForwardBatch all_batch{.tokens = all_tokens, .positions = all_pos, .sequences = all, .logit_rows = {}};
  const ForwardBatch batch{.tokens = tokens, .positions = pos, .sequences = chunks, .logit_rows = {}};
  const std::int64_t kv_dim = n_kv * head_dim;
  Pair kv_rows = Pair::random(rows, 2 * kv_dim, 8);
  b.ref.store_kv(kv_cpu, 1, kv_rows.cpu.cols_slice(0, kv_dim), kv_rows.cpu.cols_slice(kv_dim, kv_dim), all_batch);
  b.gpu.store_kv(kv_gpu, 1, kv_rows.gpu.cols_slice(0, kv_dim), kv_rows.gpu.cols_slice(kv_dim, kv_dim), all_batch);

  AttentionParams p{.n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = head_dim,
                    .scale = 1.0 / std::sqrt(double(head_dim)), .window = window, .logit_softcap = softcap};
  AttentionParams p_gpu = p;
  const std::unique_ptr<WeightPair> sink_logits =
      sinks ? WeightPair::random(DType::F32, 1, n_heads, 2.0f, /*vector=*/true) : nullptr;
  if (sinks) {
    p.sinks = sink_logits->cpu;
    p_gpu.sinks = sink_logits->gpu;
  }
  Pair qkv = Pair::random(chunk_rows, n_heads * head_dim + 2 * kv_dim, 0, 2.0f);
  Pair out = Pair::make(chunk_rows, n_heads * head_dim);
  out.poison_gpu();
  b.ref.attention(qkv.cpu.cols_slice(0, n_heads * head_dim), kv_cpu, 1, batch, p, out.cpu);
  b.gpu.attention(qkv.gpu.cols_slice(0, n_heads * head_dim), kv_gpu, 1, batch, p_gpu, out.gpu);
  return out.error();
}

}  // namespace akv::test
