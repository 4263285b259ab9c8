#include "app/generate_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string_view>

#include "app/backend_factory.h"
#include "app/serve_defaults.h"
#include "base/error.h"
#include "models/model.h"
#include "models/sequence_runner.h"
#include "tokenizer/tokenizer.h"

namespace akv {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Greedy at temperature 0, else a draw from softmax(logits / temperature).
std::int32_t pick_token(std::span<const float> logits, double temperature, std::mt19937_64& rng) {
  const auto best = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (temperature <= 0) return best;
  std::vector<double> p(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) p[i] = std::exp((logits[i] - logits[best]) / temperature);
  std::discrete_distribution<std::int32_t> dist(p.begin(), p.end());
  return dist(rng);
}

bool is_eos(const ModelConfig& c, std::int32_t id) {
  return std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) != c.eos_token_ids.end();
}

// One prompt from an empty sequence: prefill, decode, and the timing line on stderr.
void generate_once(const GenerateOptions& o, Model& model, Backend& backend, const std::optional<Tokenizer>& tokenizer,
                   const std::vector<std::int32_t>& prompt) {
  const ModelConfig& config = model.config();
  const std::int64_t context =
      std::min<std::int64_t>(config.max_position_embeddings, static_cast<std::int64_t>(prompt.size()) + o.max_tokens);
  SequenceRunner runner(model, backend, std::max<std::int64_t>(context, static_cast<std::int64_t>(prompt.size())),
                        resolve_kv_dtype(o.kv_dtype, backend));
  std::mt19937_64 rng(o.seed);
  std::optional<IncrementalDetokenizer> detok;
  if (tokenizer && !o.print_ids) detok.emplace(*tokenizer, /*skip_special_tokens=*/true);

  if (detok && !o.has_prompt_ids) {
    std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);  // echo the prompt, as llama2.c does
    std::fflush(stdout);
  }
  // Greedy picks on the backend (only the id comes back, as in the served path); draws on the host.
  auto step = [&](std::span<const std::int32_t> tokens) {
    if (o.temperature <= 0) return runner.append_greedy(tokens);
    return pick_token(runner.append(tokens), o.temperature, rng);
  };
  const auto t_prefill = Clock::now();
  std::int32_t next = step(prompt);
  const double prefill_s = seconds_since(t_prefill);

  const auto t_decode = Clock::now();
  int n_generated = 0;
  while (n_generated < o.max_tokens) {
    ++n_generated;
    if (is_eos(config, next)) break;
    if (detok) {
      const std::string text = detok->feed(next);
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      std::printf("%s%d", n_generated > 1 ? "," : "", next);
    }
    std::fflush(stdout);
    if (n_generated == o.max_tokens || runner.n_tokens() >= runner.max_tokens()) break;
    next = step({&next, 1});
  }
  if (detok) {
    const std::string rest = detok->flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  std::printf("\n");
  const double decode_s = seconds_since(t_decode);
  std::fprintf(stderr, "agentkv: prefill %zu tokens in %.3f s (%.1f tok/s); decode %d tokens in %.3f s (%.1f tok/s)\n",
               prompt.size(), prefill_s, static_cast<double>(prompt.size()) / std::max(prefill_s, 1e-9), n_generated,
               decode_s, n_generated / std::max(decode_s, 1e-9));
}

}  // namespace

std::vector<std::int32_t> parse_id_list(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::size_t i = 0;
  while (i <= text.size()) {
    const std::size_t comma = std::min(text.find(',', i), text.size());
    std::string item = text.substr(i, comma - i);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
      throw Error(ErrorKind::InvalidArgument, "--prompt-ids: '" + item + "' is not a token id");
    ids.push_back(static_cast<std::int32_t>(v));
    i = comma + 1;
  }
  return ids;
}

int run_generate(const GenerateOptions& o) {
  if (o.max_tokens <= 0) throw Error(ErrorKind::InvalidArgument, "--max-tokens must be positive");
  if (o.repeat <= 0) throw Error(ErrorKind::InvalidArgument, "--repeat must be positive");
  if (o.temperature < 0 || !std::isfinite(o.temperature))
    throw Error(ErrorKind::InvalidArgument, "--temperature must be a finite number >= 0");

  std::unique_ptr<Backend> backend = make_backend(o.backend, o.threads);
  const auto t_load = Clock::now();
  std::unique_ptr<Model> model = load_model(o.model_dir, *backend, resolve_quantize(o.quantize));
  const ModelConfig& config = model->config();

  std::optional<Tokenizer> tokenizer;
  if (!o.print_ids || !o.has_prompt_ids) tokenizer = Tokenizer::load_or_throw(o.model_dir);
  std::vector<std::int32_t> prompt = o.has_prompt_ids ? o.prompt_ids : tokenizer->encode(o.prompt, true);
  if (prompt.empty()) {
    if (config.bos_token_id < 0)
      throw Error(ErrorKind::InvalidArgument, "empty prompt and the model has no bos_token_id to start from");
    prompt.push_back(config.bos_token_id);
  }
  backend->warm_up(static_cast<std::int64_t>(prompt.size()));
  std::fprintf(stderr, "agentkv: loaded %s (%s, %lld layers) on %s in %.2f s; prompt %zu tokens\n",
               o.model_dir.c_str(), config.architecture.c_str(), static_cast<long long>(config.n_layers),
               std::string(backend->name()).c_str(), seconds_since(t_load), prompt.size());

  // Later runs time the steady state (the first pays one-time set-up, e.g. cuBLAS handles).
  for (int run = 0; run < o.repeat; ++run) generate_once(o, *model, *backend, tokenizer, prompt);
  return 0;
}

}  // namespace akv
