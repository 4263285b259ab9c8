// `agentkv generate`: load a model directory, run one prompt, stream the text to stdout and
// print prefill and decode speed to stderr (once a run; --repeat runs it again from an empty sequence).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace akv {

struct GenerateOptions {
  std::string model_dir;
  std::string prompt;                    // text, encoded with the model's tokenizer
  std::vector<std::int32_t> prompt_ids;  // used instead of `prompt` when non-empty
  bool has_prompt_ids = false;
  int max_tokens = 128;
  double temperature = 0.0;              // 0: greedy
  std::uint64_t seed = 0;
  std::string backend = "auto";
  std::string kv_dtype = "auto";         // auto: the backend's preferred KV dtype
  int threads = 0;
  bool print_ids = false;                // stream token ids instead of text
  std::string quantize;                  // "" | q8_0 | q6_k | q4_k: quantize the weights at load
  int repeat = 1;                        // run the prompt this many times, each from an empty sequence
};

// Returns the process exit code. Throws Error for bad input (caught by main).
int run_generate(const GenerateOptions& options);

// Parses "1,2,3" (spaces allowed). Throws Error{InvalidArgument} naming the bad item.
std::vector<std::int32_t> parse_id_list(const std::string& text);

}  // namespace akv
