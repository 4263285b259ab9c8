#include "chat/reasoning_effort.h"

namespace akv {

std::string_view effort_for_budget(std::int64_t budget_tokens) {
  if (budget_tokens < kLowEffortBelowTokens) return "low";
  if (budget_tokens < kMediumEffortBelowTokens) return "medium";
  return "high";
}

std::string_view effort_for_name(std::string_view name) {
  if (name == "none" || name == "minimal" || name == "low") return "low";
  if (name == "medium") return "medium";
  if (name == "high" || name == "xhigh" || name == "max") return "high";
  return "";
}

}  // namespace akv
