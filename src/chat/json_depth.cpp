#include "chat/json_depth.h"

namespace akv {

int json_nesting_depth(std::string_view text, int stop_above) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped byte (\" or \\) cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > stop_above) return stop_above + 1;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

nlohmann::ordered_json parse_json_or_discarded(std::string_view text, int max_depth) {
  if (json_nesting_depth(text, max_depth) > max_depth)
    return nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded);
  return nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace akv
