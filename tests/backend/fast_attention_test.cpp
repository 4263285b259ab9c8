// FastBackend::attention against the reference: multi-sequence batches (prefill chunks, decode
// tokens, chunks continuing a cache, lone decode tokens whose keys are split across threads)
// with shuffled block tables, GQA, sliding windows, logit softcap, contexts longer than one key
// chunk, strided q/out views, F32/BF16/F16 KV.
//
// Tolerance: |fast - ref| <= 2e-5 * max|v| per element (v ~ U(-1, 1)). Scores and softmax are
// f32 in the fast path; a score error e moves the weights by a relative ~e, so the output error
// is bounded by the f32 score error (~1e-6 here) times max|v|, with headroom.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <tuple>

#include "parity_util.h"

namespace akv::test {
namespace {

struct AttnCase {
  std::int64_t n_heads, n_kv_heads, head_dim, window;
  double softcap;
};

struct SeqSpec {
  std::int32_t start_pos, n_tokens;
};

void check_attention(Isa isa, DType kv_dtype, AttnCase c, std::int64_t block_size,
                     const std::vector<SeqSpec>& specs, std::uint32_t seed) {
  std::mt19937 rng(seed);
  // Shuffled block ids, handed out to the sequences in order.
  std::vector<std::vector<std::int32_t>> tables;
  std::int32_t n_blocks = 0;
  for (const SeqSpec& s : specs) {
    const std::int32_t nb = static_cast<std::int32_t>((s.start_pos + s.n_tokens + block_size - 1) / block_size);
    tables.emplace_back(nb);
    n_blocks += nb;
  }
  std::vector<std::int32_t> ids(n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::size_t next = 0;
  for (auto& t : tables)
    for (auto& b : t) b = ids[next++];

  std::vector<SequenceChunk> chunks;
  std::int32_t rows = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    chunks.push_back({rows, specs[i].n_tokens, specs[i].start_pos, tables[i]});
    rows += specs[i].n_tokens;
  }
  const std::vector<std::int32_t> tokens(rows, 0);
  const std::vector<std::int32_t> positions = positions_for(chunks);
  const ForwardBatch batch{tokens, positions, chunks, {}};

  ReferenceBackend ref;
  FastBackend fast(3, isa);
  const KvLayout layout{.n_layers = 2, .n_blocks = n_blocks, .block_size = block_size,
                        .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .dtype = kv_dtype};
  KvStorage kv = ref.alloc_kv(layout);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const TensorRef* side : {&kv.k[1], &kv.v[1]})
    for (std::int64_t r = 0; r < side->rows; ++r)
      for (std::int64_t col = 0; col < side->cols; ++col) store_f32(side->row<void>(r), kv_dtype, col, u(rng));

  const std::int64_t width = c.n_heads * c.head_dim;
  const OwnedTensor q = random_tensor(rng, rows, width, /*pad=*/5);
  OwnedTensor out_fast = random_tensor(rng, rows, width, /*pad=*/2);
  OwnedTensor out_ref = copy_of(out_fast);
  const AttentionParams p{.n_heads = c.n_heads, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim,
                          .scale = 2.0 / std::sqrt(double(c.head_dim)), .window = c.window,
                          .logit_softcap = c.softcap};
  ref.attention(q.ref, kv, 1, batch, p, out_ref.ref);
  fast.attention(q.ref, kv, 1, batch, p, out_fast.ref);
  // The work split (key parts included) does not depend on the thread count: bit-identical.
  FastBackend one(1, isa);
  OwnedTensor out_one = copy_of(out_ref);
  one.attention(q.ref, kv, 1, batch, p, out_one.ref);

  const std::vector<float> got = out_fast.host(), want = out_ref.host(), got_one = out_one.host();
  EXPECT_EQ(std::memcmp(got.data(), got_one.data(), got.size() * sizeof(float)), 0)
      << "1 and 3 threads differ";
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 2e-5) && bad++ < 5)
      ADD_FAILURE() << "heads " << c.n_heads << "/" << c.n_kv_heads << " d " << c.head_dim << " window "
                    << c.window << " cap " << c.softcap << " elem " << i << " fast " << got[i]
                    << " ref " << want[i];
  }
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(padding_intact(out_fast)) << "wrote outside the output view";
}

class FastAttention : public ::testing::TestWithParam<std::tuple<Isa, DType>> {};

TEST_P(FastAttention, MatchesReference) {
  const auto [isa, kv_dtype] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  const AttnCase cases[] = {
      {4, 4, 32, 0, 0.0},    // MHA
      {6, 2, 16, 0, 0.0},    // GQA 3:1
      {8, 1, 64, 0, 0.0},    // MQA
      {6, 3, 24, 7, 0.0},    // sliding window shorter than a chunk
      {4, 2, 32, 150, 0.0},  // window spanning key chunks
      {4, 2, 16, 0, 5.0},    // softcap
      {4, 1, 16, 9, 3.0},    // window + softcap
  };
  // A prefill chunk past the query tile, a decode token, a long decode (several key chunks),
  // a chunk continuing a cache, a short chunk.
  const std::vector<SeqSpec> specs = {{0, 45}, {37, 1}, {300, 1}, {100, 20}, {5, 3}};
  std::uint32_t seed = 7;
  for (const AttnCase& c : cases) {
    check_attention(isa, kv_dtype, c, 16, specs, seed++);
    check_attention(isa, kv_dtype, c, 5, {{0, 70}, {140, 1}}, seed++);
    // Lone decode tokens: fewer items than kAttentionSplitItems, so their keys are split into
    // parts whose partial softmax states are merged (parts of uneven length, one too short to
    // split).
    check_attention(isa, kv_dtype, c, 16, {{299, 1}}, seed++);
    check_attention(isa, kv_dtype, c, 7, {{50, 1}, {9, 1}}, seed++);
    // A lone prefill chunk with few kv heads: split tiles of 32 queries, where some query rows
    // see no key of a part (causal mask).
    check_attention(isa, kv_dtype, c, 16, {{0, 40}}, seed++);
  }
}

INSTANTIATE_TEST_SUITE_P(IsaKvDtype, FastAttention,
                         ::testing::Combine(::testing::ValuesIn(all_isas()),
                                            ::testing::Values(DType::F32, DType::BF16, DType::F16)),
                         [](const auto& info) {
                           return std::string(isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace akv::test
