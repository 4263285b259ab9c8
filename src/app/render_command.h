// `agentkv render`: Anthropic Messages request bodies -> the prompt text and token ids the server
// would build for them (same parser, template engine and tokenizer as `serve`; no weights loaded).
// For training data and template checks: the ids a model is trained on are the ids it is served.
#pragma once

#include <cstdio>
#include <string>

namespace akv {

struct RenderOptions {
  std::string model_dir;           // the tokenizer and chat template come from here
  std::string chat_template_file;  // overrides the model's template, as serve --chat-template
  bool print_text = false;         // also print the rendered text
};

// Reads JSON Lines from `in`: one Anthropic Messages body per line (max_tokens optional). Writes
// one JSON line per request to `out`: {"tokens": [ids...]} (+ "text" with print_text), or
// {"error": message} for a request the server would refuse with 400. A line longer than
// kMaxRenderLineBytes or that is not JSON is an error line too. Returns the exit code: 0, or 1
// when any request failed. Throws Error when the tokenizer or template does not load.
inline constexpr std::size_t kMaxRenderLineBytes = std::size_t{64} << 20;
int run_render(const RenderOptions& options, std::FILE* in, std::FILE* out);

}  // namespace akv
