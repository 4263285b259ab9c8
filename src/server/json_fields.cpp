#include "server/json_fields.h"

#include <cmath>
#include <cstdint>
#include <optional>

#include "base/error.h"
#include "chat/json_depth.h"

namespace akv::fields {

void fail(const std::string& path, const std::string& problem) {
  throw Error(ErrorKind::InvalidArgument, path + ": " + problem);
}

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}
std::string join(const std::string& path, std::size_t index) { return path + "." + std::to_string(index); }

bool has(const json& obj, const char* key) { return obj.is_object() && obj.contains(key) && !obj[key].is_null(); }

const json& require(const json& obj, const char* key, const std::string& path) {
  if (!has(obj, key)) fail(join(path, key), "Field required");
  return obj[key];
}

std::string require_string(const json& obj, const char* key, const std::string& path) {
  const json& v = require(obj, key, path);
  if (!v.is_string()) fail(join(path, key), "Input should be a valid string");
  return v.get<std::string>();
}

const json& require_array(const json& obj, const char* key, const std::string& path) {
  const json& v = require(obj, key, path);
  if (!v.is_array()) fail(join(path, key), "Input should be a valid list");
  return v;
}

namespace {

// The value of an integer field as int64: a JSON integer, or a float with no fraction (clients
// write 1024.0), nullopt for anything else. Out-of-range values come back clamped to the int64
// ends so the caller's range check names them; converting them would be undefined.
std::optional<std::int64_t> integral_value(const json& v) {
  constexpr double kTwo63 = 9223372036854775808.0;
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    return u > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::trunc(d) != d) return std::nullopt;
  if (d >= kTwo63) return INT64_MAX;
  if (d < -kTwo63) return INT64_MIN;
  return static_cast<std::int64_t>(d);
}

}  // namespace

std::int64_t require_int(const json& obj, const char* key, const std::string& path, std::int64_t min,
                         std::int64_t max) {
  const std::optional<std::int64_t> n = integral_value(require(obj, key, path));
  if (!n) fail(join(path, key), "Input should be a valid integer");
  if (*n < min || *n > max)
    fail(join(path, key), "Input should be between " + std::to_string(min) + " and " + std::to_string(max));
  return *n;
}

std::optional<std::string> opt_string(const json& obj, const char* key, const std::string& path) {
  if (!has(obj, key)) return std::nullopt;
  if (!obj[key].is_string()) fail(join(path, key), "Input should be a valid string");
  return obj[key].get<std::string>();
}

std::optional<bool> opt_bool(const json& obj, const char* key, const std::string& path) {
  if (!has(obj, key)) return std::nullopt;
  if (!obj[key].is_boolean()) fail(join(path, key), "Input should be a valid boolean");
  return obj[key].get<bool>();
}

std::optional<double> opt_number(const json& obj, const char* key, const std::string& path, double min, double max) {
  if (!has(obj, key)) return std::nullopt;
  if (!obj[key].is_number()) fail(join(path, key), "Input should be a valid number");
  const double d = obj[key].get<double>();
  if (!(d >= min && d <= max))
    fail(join(path, key), "Input should be between " + json(min).dump() + " and " + json(max).dump());
  return d;
}

std::optional<std::int64_t> opt_int(const json& obj, const char* key, const std::string& path, std::int64_t min,
                                    std::int64_t max) {
  if (!has(obj, key)) return std::nullopt;
  return require_int(obj, key, path, min, max);
}

std::vector<std::string> opt_string_list(const json& obj, const char* key, const std::string& path, bool bare_string_ok,
                                         std::size_t max_count, std::size_t max_bytes) {
  std::vector<std::string> out;
  if (!has(obj, key)) return out;
  const std::string field = join(path, key);
  const json& v = obj[key];
  if (v.is_string() && bare_string_ok) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > max_count) fail(field, "at most " + std::to_string(max_count) + " strings are allowed");
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) fail(join(field, i), "Input should be a valid string");
      out.push_back(v[i].get<std::string>());
    }
  } else {
    fail(field, bare_string_ok ? "Input should be a string or a list of strings" : "Input should be a valid list");
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].size() > max_bytes)
      fail(v.is_array() ? join(field, i) : field, "at most " + std::to_string(max_bytes) + " bytes are allowed");
  return out;
}

namespace {

void check_depth(std::string_view text, const std::string& what) {
  if (json_nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
    throw Error(ErrorKind::InvalidArgument,
                what + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (the limit)");
}

}  // namespace

json parse_body(std::string_view body) {
  // nlohmann reads a NUL byte as the end of the input; JSON allows none outside strings (and
  // none unescaped inside them), so anything from a NUL on would be silently ignored.
  if (const std::size_t nul = body.find('\0'); nul != std::string_view::npos)
    throw Error(ErrorKind::InvalidArgument,
                "request body is not valid JSON: a NUL byte at offset " + std::to_string(nul));
  check_depth(body, "request body");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double
    throw Error(ErrorKind::InvalidArgument, std::string("request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw Error(ErrorKind::InvalidArgument, "request body must be a JSON object");
  return j;
}

json parse_json_field(std::string_view text, const std::string& path) {
  if (text.find('\0') != std::string_view::npos) return json(json::value_t::discarded);
  check_depth(text, path);
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace akv::fields
