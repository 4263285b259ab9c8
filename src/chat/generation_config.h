// A model's generation_config.json (Hugging Face): the end-of-turn ids and the sampling its
// authors recommend. The server reads it once at start; requests that leave a sampling field out
// get the file's value for it (what transformers' generate() and vLLM do), else the API's default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_request.h"

namespace akv {

struct GenerationConfig {
  std::vector<std::int32_t> eos_token_ids;  // eos_token_id: one id or a list
  // The API's defaults (SamplingOptions{}) with the file's temperature, top_p, top_k, min_p and
  // repetition_penalty in place; "do_sample": false makes the temperature 0 (greedy).
  SamplingOptions sampling;
  // The fields the file set with their values ("top_k 20"), in the order above; only
  // "do_sample false (greedy)" when it is false.
  std::vector<std::string> sampling_fields;
};

// Parses a generation_config.json document; the sampling fields only when `sampling` (else
// g.sampling keeps the API's defaults whatever the file says). Absent and null fields keep their
// defaults; a field read of the wrong type or out of range (temperature [0, 2], top_p (0, 1],
// top_k >= 0, min_p [0, 1], repetition_penalty [0.01, 10], ids >= 0) throws Error{BadFormat}
// naming `file` and the field.
GenerationConfig parse_generation_config(const nlohmann::json& j, const std::string& file,
                                         bool sampling = true);

// model_dir/generation_config.json, or the defaults when the file does not exist. Throws
// Error{BadFormat} for a file that is not JSON, larger than 1 MiB, nested deeper than
// kMaxJsonDepth or invalid as above.
GenerationConfig read_generation_config(const std::string& model_dir, bool sampling = true);

// "temperature 0.6, top_p 0.95, top_k 20" (sampling_fields joined), for the start-up log.
std::string describe_sampling(const GenerationConfig& g);

}  // namespace akv
