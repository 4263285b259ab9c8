// Errors as the two API dialects report them: an HTTP status plus the dialect's error type.
// Everything thrown while handling a request ends here: akv::Error from the edge maps to a
// 4xx, anything else to a 500 (a bug; logged).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace akv {

enum class Dialect { Anthropic, OpenAI };

struct ApiError {
  int status = 500;
  std::string anthropic_type;  // invalid_request_error, authentication_error, ...
  std::string openai_type;     // invalid_request_error, authentication_error, ...
  std::string message;
  std::string openai_code;     // e.g. model_not_found; empty for null
  nlohmann::ordered_json details;  // Anthropic `error.details` (machine-readable); null: none
};

// A rejected request whose Anthropic error carries `error.details` that clients act on, e.g.
// {"error_code": "thread_unsupported_request", "unsupported": ["thread"]}: the Anthropic SDK then
// sends the turn again with the whole conversation. A 400 (invalid_request_error).
class DetailedRequestError : public Error {
 public:
  DetailedRequestError(const std::string& message, nlohmann::ordered_json details)
      : Error(ErrorKind::Unsupported, message), details_(std::move(details)) {}
  const nlohmann::ordered_json& details() const { return details_; }

 private:
  nlohmann::ordered_json details_;
};

// The HTTP status and types (and a DetailedRequestError's details) for an akv::Error raised while
// handling a request.
ApiError api_error_from(const Error& e);
// `message` may hold any bytes: invalid UTF-8 becomes U+FFFD, so error_body() always dumps.
ApiError api_error(int status, std::string message);

// The error body in a dialect: Anthropic {"type":"error","error":{type,message[,details]},"request_id"},
// OpenAI {"error":{message,type,param,code}}.
nlohmann::ordered_json error_body(const ApiError& e, Dialect dialect, const std::string& request_id);

// A random id with a prefix, e.g. "msg_01..." (24 base62 characters after the prefix).
std::string random_id(const std::string& prefix);

}  // namespace akv
