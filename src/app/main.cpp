// agentkv: flags -> objects -> wiring. Nothing else lives here.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "app/generate_command.h"
#include "app/pull_command.h"
#include "app/render_command.h"
#include "app/serve_command.h"
#include "base/error.h"
#include "hub/pull.h"

int main(int argc, char** argv) {
  CLI::App app{"agentkv: an inference server for agentic LLM clients that keeps each agent's KV cache"};
  app.require_subcommand(1);

  akv::GenerateOptions gen;
  std::string prompt_ids;
  CLI::App* generate = app.add_subcommand("generate", "Run one prompt and stream the output");
  constexpr const char* kModelHelp =
      "Hugging Face model directory, a .gguf file (the first of a split set), or a hub id "
      "ORG/REPO[:QUANT][@REVISION] (downloaded into the hub cache)";
  generate->add_option("--model", gen.model_dir, kModelHelp)->required();
  auto* prompt_opt = generate->add_option("--prompt", gen.prompt, "Prompt text (empty: start from BOS)");
  auto* ids_opt = generate->add_option("--prompt-ids", prompt_ids, "Prompt as token ids, e.g. 1,2,3");
  prompt_opt->excludes(ids_opt);
  generate->add_option("--max-tokens", gen.max_tokens, "Tokens to generate")->capture_default_str();
  generate->add_option("--temperature", gen.temperature, "0 is greedy")->capture_default_str();
  generate->add_option("--seed", gen.seed, "Sampling seed")->capture_default_str();
  generate->add_option("--backend", gen.backend, "auto | reference | cpu | cuda")->capture_default_str();
  generate->add_option("--kv-dtype", gen.kv_dtype, "KV cache dtype: auto | bf16 | f16 | f32")->capture_default_str();
  generate->add_option("--quantize", gen.quantize, "quantize a safetensors checkpoint's matrices at load: q8_0 | q6_k | q4_k");
  generate->add_option("--threads", gen.threads, "CPU threads (0: all cores)")->capture_default_str();
  generate->add_flag("--print-ids", gen.print_ids, "Stream token ids instead of text");
  generate->add_option("--repeat", gen.repeat, "Run the prompt this many times (each from an empty sequence; "
                       "the later runs time the steady state)")->capture_default_str();

  akv::ServeOptions srv;
  CLI::App* serve = app.add_subcommand("serve", "Serve the Anthropic Messages and OpenAI APIs over HTTP");
  serve->add_option("--model", srv.model_dir, kModelHelp)->required();
  serve->add_option("--host", srv.server.host, "Address to bind")->capture_default_str();
  serve->add_option("--port", srv.server.port, "Port (0: any free port)")->capture_default_str();
  serve->add_option("--api-key", srv.server.api_keys, "Accepted API key (repeatable); none: no auth");
  serve->add_option("--served-model-name", srv.server.served_model_name, "Model id in /v1/models")->capture_default_str();
  serve->add_flag("--strict-model", srv.server.strict_model, "404 for model ids other than the served name");
  serve->add_option("--chat-template", srv.chat_template_file, "Jinja chat template file (overrides the model's)");
  serve->add_option("--sampling-defaults", srv.sampling_defaults,
                    "What a request's left-out temperature, top_p, top_k, min_p and repetition_penalty take: "
                    "model (the model's generation_config.json, else the API's defaults) | api")
      ->check(CLI::IsMember({"model", "api"}))
      ->capture_default_str();
  serve->add_option("--prompt-memo-mb", srv.prompt_memo_mb,
                    "Memory for each agent's encoded conversation, so a next turn encodes only its new text (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--max-queue", srv.server.max_queue,
                    "Generation requests in flight (from their headers to their last byte) before 529/429; "
                    "the HTTP pool has this many workers plus 16 for everything else")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  serve->add_option("--header-timeout-s", srv.server.header_timeout_s,
                    "Most seconds from a request's first byte to the end of its headers")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  serve->add_option("--body-timeout-s", srv.server.body_timeout_s,
                    "Most seconds from the end of a request's headers to the end of its body")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  serve->add_option("--backend", srv.backend, "auto (cuda if built and a GPU is present, else cpu) | reference | cpu | cuda")
      ->capture_default_str();
  serve->add_option("--threads", srv.threads, "CPU threads (0: all cores)")->capture_default_str();
  serve->add_option("--kv-dtype", srv.kv_dtype, "KV cache dtype: auto (bf16 on CUDA, f32 on CPU) | bf16 | f16 | f32")
      ->capture_default_str();
  serve->add_option("--quantize", srv.quantize, "quantize a safetensors checkpoint's matrices at load: q8_0 | q6_k | q4_k");
  serve->add_option("--kv-cache-mb", srv.kv_cache_mb,
                    "KV cache memory on the compute device in MiB; 0: what --gpu-memory-fraction leaves (GPU) or 1024 (CPU)")
      ->capture_default_str();
  serve->add_option("--gpu-memory-fraction", srv.gpu_memory_fraction,
                    "Share of the GPU's memory for weights, KV cache and activations")
      ->capture_default_str();
  serve->add_option("--block-size", srv.block_size, "Token positions per KV block")->capture_default_str();
  serve->add_option("--max-batch-tokens", srv.max_batch_tokens, "Token budget per engine step (0: 8192 on a GPU, 512 on the CPU)")->capture_default_str();
  serve->add_option("--prefill-chunk", srv.prefill_chunk, "Most prompt tokens per sequence per step (0: 8192 on a GPU, 256 on the CPU)")->capture_default_str();
  serve->add_option("--kv-dir", srv.kv_dir, "Directory of the KV disk tier (agents survive restarts); none: off");
  serve->add_option("--kv-spill-codec", srv.kv_spill_codec, "KV blocks on disk: auto (int8 on a GPU, native on the CPU) | native | f32 | bf16 | int8 | int4")
      ->capture_default_str();
  serve->add_option("--kv-disk-bytes", srv.kv_disk_bytes, "Disk tier budget: bytes or K/M/G/T (e.g. 40G); 0: unlimited")
      ->capture_default_str();
  serve->add_option("--kv-flush-timeout-s", srv.kv_flush_timeout_s,
                    "On SIGTERM/SIGINT, most seconds spent writing the agents' KV still queued for the disk tier")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--kv-host-bytes", srv.kv_host_bytes,
                    "Host-RAM tier budget for KV blocks evicted from the device: bytes or K/M/G/T; 0: none")
      ->capture_default_str();
  serve->add_option("--kv-host-codec", srv.kv_host_codec, "KV blocks in the host tier: auto (int8 on a GPU, native on the CPU) | native | f32 | bf16 | int8 | int4")
      ->capture_default_str();
  serve->add_option("--kv-restore-bytes", srv.kv_restore_bytes,
                    "Disk blocks held by background restores at most, across requests (their buffers are kept "
                    "for later restores within it): bytes or K/M/G/T")
      ->capture_default_str();
  serve->add_option("--state-snapshot-bytes", srv.state_snapshot_bytes,
                    "Hybrid models: host memory for recurrent-state snapshots (0: no prefix reuse)")
      ->capture_default_str();
  serve->add_option("--kv-state-codec", srv.kv_state_codec,
                    "Hybrid models: state snapshots in memory, on disk and in Redis: exact | bf16 (any is read)")
      ->capture_default_str();
  serve->add_option("--state-snapshot-interval", srv.state_snapshot_interval,
                    "Hybrid models: a state snapshot every this many prompt tokens (and at each request's end)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  serve->add_option("--kv-remote", srv.kv_remote,
                    "Remote KV tier under the disk tier, shared by a fleet: redis://[[USER]:PASSWORD@]HOST:PORT[/DB] "
                    "(password also from REDISCLI_AUTH); needs --kv-dir");
  serve->add_option("--kv-remote-password-file", srv.kv_remote_password_file,
                    "File whose first line is the Redis password of --kv-remote (instead of one in the URL)");
  serve->add_option("--kv-remote-bytes", srv.kv_remote_bytes,
                    "Remote tier budget for this model's blocks: bytes or K/M/G/T; 0: unlimited")
      ->capture_default_str();
  serve->add_option("--ping-interval-ms", srv.server.ping_interval_ms, "SSE keep-alive interval")->capture_default_str();

  akv::RenderOptions render_opts;
  CLI::App* render = app.add_subcommand(
      "render", "Read Anthropic Messages bodies (JSON Lines on stdin) and print the prompt token ids serve would "
                "build for each (JSON Lines on stdout)");
  render->add_option("--model", render_opts.model_dir, "Model directory (tokenizer and chat template)")->required();
  render->add_option("--chat-template", render_opts.chat_template_file, "Jinja chat template file (overrides the model's)");
  render->add_flag("--print-text", render_opts.print_text, "Also print the rendered prompt text");

  std::string pull_model;
  CLI::App* pull = app.add_subcommand(
      "pull", "Download a model from the Hugging Face hub into its cache (HF_HOME, HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE) "
              "and print its directory");
  pull->add_option("model", pull_model, "ORG/REPO[:QUANT][@REVISION], e.g. Qwen/Qwen3-0.6B or unsloth/Qwen3-8B-GGUF:Q4_K_M")
      ->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (pull->parsed()) return akv::run_pull(pull_model);
    if (generate->parsed()) {
      gen.model_dir = akv::resolve_model_dir(gen.model_dir);
      if (!prompt_ids.empty()) {
        gen.prompt_ids = akv::parse_id_list(prompt_ids);
        gen.has_prompt_ids = true;
      }
      return akv::run_generate(gen);
    }
    if (render->parsed()) return akv::run_render(render_opts, stdin, stdout);
    if (serve->parsed()) {
      srv.model_dir = akv::resolve_model_dir(srv.model_dir);
      return akv::run_serve(srv);
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
