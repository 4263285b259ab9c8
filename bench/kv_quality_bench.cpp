// Quality of the KV spill codecs on a real model (docs/perf/kv_quality.md). For each passage of
// a fixed TinyStories-style text and each split point: run the model over the prefix, round-trip
// the prefix's KV blocks through a codec as a restore does (Backend::read_kv_block -> encode ->
// decode -> write_kv_block), teacher-force the rest of the passage and compare its next-token
// distributions with the native (bit-exact) run: KL divergence, perplexity, top-1 agreement.
//   kv_quality_bench [MODEL_DIR] [--block-size 16] [--splits 32,64,96,128]
// MODEL_DIR defaults to stories260K; it needs tokenizer.json. Scalar reference backend, F32 KV.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/reference_backend.h"
#include "codec_eval.h"
#include "kv/block_codec.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace akv {
namespace {

// The evaluation text, written for this benchmark: four passages in the style of TinyStories
// (simple English, the stories260K training distribution). Each is encoded with BOS.
constexpr const char* kPassages[] = {
    "Once upon a time, there was a little girl named Lily. She loved to play in the park with "
    "her red ball. One day, the sun was hot and the sky was blue. Lily threw the ball high into "
    "the air, and it landed in a big tree. Lily was sad. She could not reach the ball. Then a "
    "kind boy named Tom came by. He said, \"Do not worry, I can help you.\" Tom climbed the tree "
    "and got the ball. Lily smiled and said, \"Thank you, Tom!\" They played together all day, "
    "and they became best friends.",
    "Tim had a small dog named Max. Max liked to run and jump in the grass. One morning, Tim "
    "and Max went to the lake. They saw a duck swimming in the water. Max wanted to play with "
    "the duck, so he jumped into the lake. The water was cold, and Max did not know how to swim "
    "well. Tim was scared. He ran to get his mom. Mom came fast and pulled Max out of the water. "
    "Max was wet and shaking. Tim gave him a big hug. Mom said, \"Max, you must be careful near "
    "the water.\" Max wagged his tail, and they all went home to get warm.",
    "There was a big bear who lived in the forest. The bear was very hungry. He looked for food "
    "under the rocks and in the bushes, but he found nothing. Then he saw a bee flying to a "
    "tree. The bear followed the bee and found a pot of honey. He was so happy! But the bees "
    "did not want to share. They buzzed around the bear and made him run away. The bear sat "
    "down and thought. He picked some berries and gave them to the bees. The bees liked the "
    "berries, and they gave the bear some honey. From that day on, the bear and the bees were "
    "friends.",
    "Sue wanted to bake a cake for her mom. She got a bowl, some flour, two eggs and milk. She "
    "mixed everything with a big spoon. The kitchen was a mess, but Sue did not mind. She put "
    "the cake in the oven and waited. Soon the house smelled sweet and good. When the cake was "
    "ready, Sue put pink frosting on top. Her mom came home and saw the cake. She was very "
    "surprised. \"Did you make this for me?\" she asked. Sue nodded and smiled. Mom gave Sue a "
    "big kiss, and they ate the cake together. It was the best cake ever.",
};

constexpr SpillCodec kCodecs[] = {SpillCodec::Native, SpillCodec::F32, SpillCodec::BF16,
                                  SpillCodec::Int8, SpillCodec::Int4};

// Next-token statistics of a codec's run against the native run, over all scored positions.
struct Quality {
  double sum_kl = 0, max_kl = 0;
  double sum_nll = 0, sum_nll_native = 0;
  std::int64_t n = 0, top1_agree = 0;

  // One position: logprobs of the native (p) and codec (q) runs, the true next token.
  void add(std::span<const double> p, std::span<const double> q, std::int32_t next) {
    const double kl = kl_divergence(p, q);
    sum_kl += kl;
    max_kl = std::max(max_kl, kl);
    sum_nll -= q[next];
    sum_nll_native -= p[next];
    top1_agree += std::max_element(p.begin(), p.end()) - p.begin() ==
                  std::max_element(q.begin(), q.end()) - q.begin();
    ++n;
  }
  double mean_kl() const { return sum_kl / n; }
  double ppl() const { return std::exp(sum_nll / n); }
  double ppl_change_pct() const { return 100.0 * (ppl() / std::exp(sum_nll_native / n) - 1.0); }
};

// The entry of `codec` in a per-codec vector (ordered as kCodecs).
const Quality& of(const std::vector<Quality>& per_codec, SpillCodec codec) {
  return per_codec[std::find(std::begin(kCodecs), std::end(kCodecs), codec) - std::begin(kCodecs)];
}

// Scores rows [0, n - split - 1) of the continuation (row r predicts ids[split + r + 1]).
void score(std::span<const float> native, std::span<const float> got,
           std::span<const std::int32_t> ids, std::int32_t split, std::int64_t vocab, Quality& q) {
  const std::int64_t n_scored = static_cast<std::int64_t>(ids.size()) - split - 1;
  for (std::int64_t r = 0; r < n_scored; ++r) {
    const auto p = log_probs(native.subspan(r * vocab, vocab));
    const auto g = log_probs(got.subspan(r * vocab, vocab));
    q.add(p, g, ids[split + r + 1]);
  }
}

void print_table(const KvLayout& layout, std::span<const Quality> total) {
  const BlockShape shape = block_shape_of(layout);
  std::printf(
      "\n| codec | bytes/block | vs native | mean KL | max KL | PPL | PPL change | top-1 agree "
      "|\n|---|---|---|---|---|---|---|---|\n");
  for (std::size_t c = 0; c < std::size(kCodecs); ++c) {
    const Quality& q = total[c];
    const std::size_t bytes = encoded_bytes(kCodecs[c], shape);
    std::printf("| %s | %zu | %.3f | %.2e | %.2e | %.4f | %+.3f%% | %.2f%% |\n",
                std::string(spill_codec_name(kCodecs[c])).c_str(), bytes,
                static_cast<double>(bytes) / static_cast<double>(shape.raw_bytes()), q.mean_kl(),
                q.max_kl, q.ppl(), q.ppl_change_pct(),
                100.0 * static_cast<double>(q.top1_agree) / static_cast<double>(q.n));
  }
}

int run(const std::string& model_dir, std::int32_t block_size, std::vector<std::int32_t> splits) {
  ReferenceBackend backend;
  auto model = load_model(model_dir, backend);
  const Tokenizer tok = Tokenizer::load_or_throw(model_dir);
  const std::int64_t vocab = model->config().vocab_size;
  std::vector<Quality> total(std::size(kCodecs));
  std::printf("model %s, block size %d\n", model_dir.c_str(), block_size);
  std::printf(
      "| passage | tokens | split | mean KL int8 | mean KL int4 | PPL change int8 | PPL change "
      "int4 |\n|---|---|---|---|---|---|---|\n");
  for (std::size_t p = 0; p < std::size(kPassages); ++p) {
    const std::vector<std::int32_t> ids = tok.encode(kPassages[p], true);
    for (std::int32_t split : splits) {
      if (split % block_size != 0 || split + 2 > static_cast<std::int32_t>(ids.size())) continue;
      const auto native =
          continuation_logits(*model, backend, ids, split, block_size, SpillCodec::Native);
      std::vector<Quality> here(std::size(kCodecs));
      for (std::size_t c = 0; c < std::size(kCodecs); ++c) {
        const auto got = continuation_logits(*model, backend, ids, split, block_size, kCodecs[c]);
        score(native, got, ids, split, vocab, here[c]);
        score(native, got, ids, split, vocab, total[c]);
      }
      const Quality& i8 = of(here, SpillCodec::Int8);
      const Quality& i4 = of(here, SpillCodec::Int4);
      std::printf("| %zu | %zu | %d | %.2e | %.2e | %+.3f%% | %+.3f%% |\n", p + 1, ids.size(),
                  split, i8.mean_kl(), i4.mean_kl(), i8.ppl_change_pct(), i4.ppl_change_pct());
    }
  }
  print_table(kv_layout_for(model->config(), 1, block_size, backend.preferred_kv_dtype()), total);
  return 0;
}

}  // namespace
}  // namespace akv

int main(int argc, char** argv) {
  CLI::App app{"KV spill codec quality: KL, perplexity and top-1 agreement after a restore"};
  std::string model_dir = AGENTKV_TESTDATA "/models/stories260K/hf";
  std::int32_t block_size = 16;
  std::vector<std::int32_t> splits{32, 64, 96, 128};
  app.add_option("model_dir", model_dir, "Model directory (with tokenizer.json)");
  app.add_option("--block-size", block_size, "Token positions per KV block")->capture_default_str();
  app.add_option("--splits", splits, "Prefix lengths (multiples of the block size)")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  return akv::run(model_dir, block_size, splits);
}
