#include "app/render_command.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"
#include "chat/prompt_builder.h"
#include "server/anthropic_request.h"
#include "tokenizer/tokenizer.h"

namespace akv {

namespace {

// One line of `in` without its newline; false at end of input. Sets `too_long` (and skips the
// rest of the line) when it passes kMaxRenderLineBytes.
bool read_line(std::FILE* in, std::string& line, bool& too_long) {
  line.clear();
  too_long = false;
  int c = 0;
  bool any = false;
  while ((c = std::fgetc(in)) != EOF) {
    any = true;
    if (c == '\n') return true;
    if (line.size() < kMaxRenderLineBytes) line.push_back(static_cast<char>(c));
    else too_long = true;
  }
  return any;
}

nlohmann::ordered_json render_one(const PromptBuilder& prompts, const std::string& line, bool print_text) {
  const auto body = nlohmann::ordered_json::parse(line);  // throws parse_error on bad JSON
  const ChatRequest request = parse_anthropic_count_tokens(body);
  const BuiltPrompt built = prompts.build(request);
  nlohmann::ordered_json result;
  result["tokens"] = built.tokens;
  if (print_text) result["text"] = built.text;
  return result;
}

}  // namespace

int run_render(const RenderOptions& o, std::FILE* in, std::FILE* out) {
  const Tokenizer tokenizer = Tokenizer::load_or_throw(o.model_dir);
  PromptBuilderOptions prompt_options;
  if (!o.chat_template_file.empty()) prompt_options.template_override = read_file_or_throw(o.chat_template_file);
  const PromptBuilder prompts(tokenizer, prompt_options);

  int rc = 0;
  std::string line;
  bool too_long = false;
  while (read_line(in, line, too_long)) {
    if (line.empty() && !too_long) continue;
    nlohmann::ordered_json result;
    try {
      if (too_long) throw Error(ErrorKind::InvalidArgument, "request line longer than kMaxRenderLineBytes");
      result = render_one(prompts, line, o.print_text);
    } catch (const std::exception& e) {  // Error from the parser/template, or nlohmann's parse_error
      result = nlohmann::ordered_json{{"error", e.what()}};
      rc = 1;
    }
    const std::string text = result.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
  }
  return rc;
}

}  // namespace akv
