// Nesting depth of a JSON text, measured by a scan of its brackets before any parser builds a
// tree: nlohmann::json copies, compares and dumps values recursively, so a tree thousands of
// levels deep overflows the stack. Text from clients (request bodies, JSON in a string) and
// from the model (tool-call arguments) is checked here first.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace akv {

// Arrays and objects nest at most this deep in JSON the server reads from a client or from the
// model's tool calls; deeper text is refused before it is parsed.
inline constexpr int kMaxJsonDepth = 128;

// The largest nesting of arrays and objects in `text`, counting brackets outside strings,
// but stopping as soon as it passes `stop_above` (then returns stop_above + 1). Exact for valid
// JSON; for invalid text some number (the parser rejects that text anyway). Linear, no
// allocation.
int json_nesting_depth(std::string_view text, int stop_above);

// nlohmann::ordered_json::parse(text) without exceptions, for text that may be hostile:
// discarded when the text is not JSON or nests deeper than `max_depth`.
nlohmann::ordered_json parse_json_or_discarded(std::string_view text, int max_depth);

}  // namespace akv
