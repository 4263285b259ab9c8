// Typed reads of request JSON with errors that name the field by its path
// ("messages.2.content.0.text: expected a string"). Every failure throws
// Error{InvalidArgument}, which the HTTP layer turns into a 400 of the request's dialect.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/json_depth.h"

namespace akv::fields {

using json = nlohmann::ordered_json;

[[noreturn]] void fail(const std::string& path, const std::string& problem);

std::string join(const std::string& path, const std::string& key);
std::string join(const std::string& path, std::size_t index);

// Present and not null.
bool has(const json& obj, const char* key);

const json& require(const json& obj, const char* key, const std::string& path);
std::string require_string(const json& obj, const char* key, const std::string& path);
const json& require_array(const json& obj, const char* key, const std::string& path);
std::int64_t require_int(const json& obj, const char* key, const std::string& path, std::int64_t min,
                         std::int64_t max);

std::optional<std::string> opt_string(const json& obj, const char* key, const std::string& path);
std::optional<bool> opt_bool(const json& obj, const char* key, const std::string& path);
std::optional<double> opt_number(const json& obj, const char* key, const std::string& path, double min,
                                 double max);
std::optional<std::int64_t> opt_int(const json& obj, const char* key, const std::string& path,
                                    std::int64_t min, std::int64_t max);
// A list of strings, or also a bare string when `bare_string_ok` (OpenAI "stop"). At most
// `max_count` strings of at most `max_bytes` each; the error names the limit.
std::vector<std::string> opt_string_list(const json& obj, const char* key, const std::string& path, bool bare_string_ok,
                                         std::size_t max_count, std::size_t max_bytes);

// The longest stop sequence (both dialects): the stop matcher holds back that much text.
inline constexpr std::size_t kMaxStopSequenceBytes = 512;

// Arrays and objects in a client's JSON nest at most this deep (the body, and JSON sent inside a
// string such as OpenAI's function.arguments). Checked before any tree is built; deeper is a 400.
inline constexpr int kMaxJsonDepth = akv::kMaxJsonDepth;

// Parses a request body: a syntax error (invalid UTF-8 included), a NUL byte or other text after
// the value, nesting deeper than kMaxJsonDepth, or a non-object throws Error{InvalidArgument}.
json parse_body(std::string_view body);

// Parses JSON a client sent inside a string field at `path` (e.g. function.arguments):
// discarded when it is not JSON; nesting deeper than kMaxJsonDepth throws naming `path`.
json parse_json_field(std::string_view text, const std::string& path);

}  // namespace akv::fields
