// agentkv: flags -> objects -> wiring. Nothing else lives here.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "app/generate_command.h"
#include "base/error.h"

int main(int argc, char** argv) {
  CLI::App app{"agentkv: an inference server for agentic LLM clients that keeps each agent's KV cache"};
  app.require_subcommand(1);

  akv::GenerateOptions gen;
  std::string prompt_ids;
  CLI::App* generate = app.add_subcommand("generate", "Run one prompt and stream the output");
  generate->add_option("--model", gen.model_dir, "Hugging Face model directory")->required();
  auto* prompt_opt = generate->add_option("--prompt", gen.prompt, "Prompt text (empty: start from BOS)");
  auto* ids_opt = generate->add_option("--prompt-ids", prompt_ids, "Prompt as token ids, e.g. 1,2,3");
  prompt_opt->excludes(ids_opt);
  generate->add_option("--max-tokens", gen.max_tokens, "Tokens to generate")->capture_default_str();
  generate->add_option("--temperature", gen.temperature, "0 is greedy")->capture_default_str();
  generate->add_option("--seed", gen.seed, "Sampling seed")->capture_default_str();
  generate->add_option("--backend", gen.backend, "reference | cpu | cuda")->capture_default_str();
  generate->add_option("--threads", gen.threads, "CPU threads (0: all cores)")->capture_default_str();
  generate->add_flag("--print-ids", gen.print_ids, "Stream token ids instead of text");

  CLI11_PARSE(app, argc, argv);
  try {
    if (generate->parsed()) {
      if (!prompt_ids.empty()) {
        gen.prompt_ids = akv::parse_id_list(prompt_ids);
        gen.has_prompt_ids = true;
      }
      return akv::run_generate(gen);
    }
  } catch (const akv::Error& e) {
    std::fprintf(stderr, "agentkv: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agentkv: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
