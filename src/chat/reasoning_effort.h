// The request's reasoning budget as the three levels chat templates take (GPT-OSS's
// `reasoning_effort` variable: "Reasoning: low|medium|high" in its system message). Both API
// dialects map into it; the prompt builder passes it to the template.
#pragma once

#include <cstdint>
#include <string_view>

namespace akv {

// Anthropic thinking.budget_tokens: below 4096 -> "low", below 16384 -> "medium", else "high"
// (Claude Code's 31999 is high; the API's minimum, 1024, is low).
inline constexpr std::int64_t kLowEffortBelowTokens = 4096;
inline constexpr std::int64_t kMediumEffortBelowTokens = 16384;
std::string_view effort_for_budget(std::int64_t budget_tokens);

// A named effort (OpenAI reasoning_effort, Anthropic output_config.effort): "none", "minimal"
// and "low" -> "low"; "medium"; "high", "xhigh" and "max" -> "high". "" for any other value
// (accepted and ignored: the template's default applies).
std::string_view effort_for_name(std::string_view name);

}  // namespace akv
