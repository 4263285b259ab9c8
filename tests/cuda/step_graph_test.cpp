// Recorded decode steps (CUDA graphs) against eager CUDA and the CPU reference: several sequences
// decode together on the paged KV while their block tables grow, a block moves (copy-on-write
// style) and the batch shrinks; every step's logits must match. Skips itself without a GPU.
#include <algorithm>
#include <numeric>

#include "models/model.h"
#include "parity_util.h"

namespace akv::test {
namespace {

constexpr std::int64_t kBlock = 16;
constexpr std::int64_t kBlocks = 64;

// One model on one backend, driven through a fixed schedule of prefills and batched decodes.
struct ModelRun {
  ModelRun(const std::string& dir, Backend& b)
      : backend(b),
        model(load_model(dir, b)),
        kv(b.alloc_kv(kv_layout_for(model->config(), kBlocks, kBlock, DType::F32))) {
    free_blocks.resize(kBlocks);
    std::iota(free_blocks.begin(), free_blocks.end(), 0);
    std::shuffle(free_blocks.begin(), free_blocks.end(),
                 std::mt19937(7));  // same order on every backend
  }

  // Makes sure sequence i has blocks for `len` positions.
  void grow(std::size_t i, std::int64_t len) {
    while (static_cast<std::int64_t>(tables[i].size()) * kBlock < len) {
      tables[i].push_back(free_blocks.back());
      free_blocks.pop_back();
    }
  }
  // Moves sequence i's first block to a fresh one (the table changes, the KV does not).
  void move_first_block(std::size_t i) {
    const std::int32_t fresh = free_blocks.back();
    free_blocks.pop_back();
    backend.copy_kv_block(kv, tables[i][0], fresh);
    free_blocks.insert(free_blocks.begin(), tables[i][0]);
    tables[i][0] = fresh;
  }

  // Appends `ids[i]` to sequence seqs[i] for each i in one forward; returns each chunk's last
  // logits.
  std::vector<float> step(const std::vector<std::size_t>& seqs,
                          const std::vector<std::vector<std::int32_t>>& ids) {
    std::vector<std::int32_t> tokens, rows;
    std::vector<SequenceChunk> chunks;
    for (std::size_t k = 0; k < seqs.size(); ++k) {
      const std::size_t i = seqs[k];
      grow(i, lens[i] + static_cast<std::int64_t>(ids[k].size()));
      chunks.push_back({.first_row = static_cast<std::int32_t>(tokens.size()),
                        .n_tokens = static_cast<std::int32_t>(ids[k].size()),
                        .start_pos = static_cast<std::int32_t>(lens[i]),
                        .block_table = tables[i]});
      tokens.insert(tokens.end(), ids[k].begin(), ids[k].end());
      rows.push_back(static_cast<std::int32_t>(tokens.size() - 1));
    }
    const std::vector<std::int32_t> pos = positions_for(chunks);
    const ForwardBatch batch{
        .tokens = tokens, .positions = pos, .sequences = chunks, .logit_rows = rows};
    std::vector<float> logits(rows.size() * model->config().vocab_size);
    model->forward(batch, kv, logits);
    for (std::size_t k = 0; k < seqs.size(); ++k)
      lens[seqs[k]] += static_cast<std::int64_t>(ids[k].size());
    return logits;
  }

  Backend& backend;
  std::unique_ptr<Model> model;
  KvStorage kv;
  std::vector<std::int32_t> free_blocks;
  std::vector<std::vector<std::int32_t>> tables{3};
  std::vector<std::int64_t> lens = std::vector<std::int64_t>(3, 0);
};

class StepGraphOnCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(StepGraphOnCuda, BatchedDecodeMatchesEagerAndReference) {
  AKV_SKIP_WITHOUT_CUDA();
  const std::string dir = testdata_dir() + "/models/tiny-random/" + GetParam();
  CudaBackend& gpu = backends().gpu;
  ModelRun graph(dir, gpu), eager(dir, gpu), ref(dir, backends().ref);
  const bool bf16 = graph.model->config().dtype == DType::BF16;
  const std::int32_t vocab = static_cast<std::int32_t>(graph.model->config().vocab_size);
  std::mt19937 g(11);
  std::uniform_int_distribution<std::int32_t> id(0, vocab - 1);

  // Prompts of 5, 17 and 37 tokens (eager everywhere: not decode steps), in chunks of at most 8
  // so that bf16 weights meet f32 activations (GEMV) as in decode, not bf16-rounded ones (cuBLAS).
  for (std::size_t i = 0; i < 3; ++i) {
    const std::size_t len = 5 + 12 * i + 8 * (i / 2);
    for (std::size_t done = 0; done < len; done += 8) {
      std::vector<std::int32_t> chunk(std::min<std::size_t>(8, len - done));
      for (std::int32_t& t : chunk) t = id(g);
      for (ModelRun* r : {&graph, &eager, &ref}) r->step({i}, {chunk});
    }
  }
  double worst_eager = 0, worst_ref = 0;
  const CudaBackend::StepStats before = gpu.step_stats();
  for (int s = 0; s < 48; ++s) {
    // Three sequences decode together, then two (the batch shrinks), then three again.
    const std::vector<std::size_t> seqs =
        s >= 20 && s < 32 ? std::vector<std::size_t>{0, 2} : std::vector<std::size_t>{0, 1, 2};
    std::vector<std::vector<std::int32_t>> ids;
    for (std::size_t k = 0; k < seqs.size(); ++k) ids.push_back({id(g)});
    if (s % 7 == 3)
      for (ModelRun* r : {&graph, &eager, &ref}) r->move_first_block(0);
    gpu.set_step_graphs(true);
    const std::vector<float> got = graph.step(seqs, ids);
    gpu.set_step_graphs(false);
    const std::vector<float> want_eager = eager.step(seqs, ids);
    const std::vector<float> want_ref = ref.step(seqs, ids);
    worst_eager = std::max(worst_eager, rel_error(got, want_eager));
    worst_ref = std::max(worst_ref, rel_error(got, want_ref));
  }
  gpu.set_step_graphs(true);
  const CudaBackend::StepStats after = gpu.step_stats();
  note_error(worst_ref);
  // The same kernels with the same split counts: eager and graph agree to the bit.
  EXPECT_EQ(worst_eager, 0.0) << GetParam();
  EXPECT_LE(worst_ref, bf16 ? 1e-4 : 1e-5) << GetParam();
  // Every decode step of the graph run was captured or replayed; most were replayed.
  EXPECT_GE(after.replayed - before.replayed, 36) << GetParam();
  EXPECT_EQ((after.captured - before.captured) + (after.replayed - before.replayed), 48)
      << GetParam();
  std::printf("%-28s graph vs eager %.3g, vs reference %.3g; captured %lld, replayed %lld\n",
              GetParam().c_str(), worst_eager, worst_ref,
              static_cast<long long>(after.captured - before.captured),
              static_cast<long long>(after.replayed - before.replayed));
}

INSTANTIATE_TEST_SUITE_P(Models, StepGraphOnCuda,
                         ::testing::Values("llama3-rope-scaled", "llama3-rope-scaled-bf16",
                                           "qwen2-bias-tied", "qwen3-qknorm-tied", "mistral-swa8",
                                           "phi3-fused", "gemma3-text-swa8"));
// The mixture-of-experts models: routing decided on the device, so their decode steps record too.
INSTANTIATE_TEST_SUITE_P(MoeModels, StepGraphOnCuda,
                         ::testing::Values("../tiny-random-w2/qwen3-moe", "../tiny-random-w2/gpt-oss"));

// Records a step with one add, then replays it with the add on another tensor.
void replay_with_changed_ops() {
  CudaBackend& gpu = backends().gpu;
  gpu.set_step_graphs(true);
  ModelRun r(testdata_dir() + "/models/tiny-random/llama3-rope-scaled", gpu);
  r.step({0}, {{1, 2, 3}});
  const std::int32_t token = 4, position = 3, row = 0;
  const SequenceChunk chunk{
      .first_row = 0, .n_tokens = 1, .start_pos = 3, .block_table = r.tables[0]};
  const ForwardBatch batch{.tokens = {&token, 1},
                           .positions = {&position, 1},
                           .sequences = {&chunk, 1},
                           .logit_rows = {&row, 1}};
  const std::int64_t hidden = r.model->config().hidden_size;
  auto x = gpu.alloc(DType::F32, 1, hidden);
  auto other = gpu.alloc(DType::F32, 1, hidden);
  for (TensorRef acc : {x->tensor(), other->tensor()}) {
    gpu.begin_step(batch, r.kv, &r);
    gpu.add(acc, x->tensor());
    gpu.end_step();
  }
}

// A step that does not repeat its recording's ops breaks begin_step's contract: the backend aborts.
TEST(StepGraphOnCudaDeathTest, ChangedOpsAbort) {
  AKV_SKIP_WITHOUT_CUDA();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(replay_with_changed_ops(), "ops differ from the recording");
}

}  // namespace
}  // namespace akv::test
