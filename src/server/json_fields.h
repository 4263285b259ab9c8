// Typed reads of request JSON with errors that name the field by its path
// ("messages.2.content.0.text: expected a string"). Every failure throws
// Error{InvalidArgument}, which the HTTP layer turns into a 400 of the request's dialect.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

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
// A string or a list of strings (OpenAI "stop").
std::vector<std::string> opt_string_list(const json& obj, const char* key, const std::string& path);

// Parses a request body; a syntax error or a non-object names the position.
json parse_body(const std::string& body);

}  // namespace akv::fields
