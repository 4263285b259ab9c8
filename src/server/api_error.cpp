#include "server/api_error.h"

#include <random>

#include "tokenizer/unicode.h"

namespace akv {

namespace {

struct StatusTypes {
  int status;
  const char* anthropic;
  const char* openai;
};

constexpr StatusTypes kTypes[] = {
    {400, "invalid_request_error", "invalid_request_error"},
    {401, "authentication_error", "authentication_error"},
    {403, "permission_error", "permission_error"},
    {404, "not_found_error", "not_found_error"},
    {413, "request_too_large", "invalid_request_error"},
    {429, "rate_limit_error", "rate_limit_exceeded"},
    {500, "api_error", "server_error"},
    {503, "overloaded_error", "server_error"},
    {504, "timeout_error", "timeout"},
    {529, "overloaded_error", "server_error"},
};

}  // namespace

ApiError api_error(int status, std::string message) {
  ApiError e;
  e.status = status;
  // A message may quote the client's bytes (a JSON parse error's "last read"); the error body
  // must still dump as JSON.
  e.message = tok::utf8_is_valid(message) ? std::move(message) : tok::utf8_lossy(message);
  e.anthropic_type = "api_error";
  e.openai_type = "server_error";
  for (const StatusTypes& t : kTypes) {
    if (t.status == status) {
      e.anthropic_type = t.anthropic;
      e.openai_type = t.openai;
    }
  }
  if (status == 404) e.openai_code = "not_found";
  return e;
}

ApiError api_error_from(const Error& e) {
  if (const auto* detailed = dynamic_cast<const DetailedRequestError*>(&e)) {
    ApiError err = api_error(400, e.what());
    err.details = detailed->details();
    return err;
  }
  switch (e.kind()) {
    case ErrorKind::InvalidArgument:
    case ErrorKind::BadFormat:
    case ErrorKind::Unsupported:
      return api_error(400, e.what());
    case ErrorKind::NotFound:
      return api_error(404, e.what());
    case ErrorKind::ResourceExhausted:
      return api_error(529, e.what());
    case ErrorKind::Io:
    case ErrorKind::Internal:
      return api_error(500, e.what());
  }
  return api_error(500, e.what());
}

nlohmann::ordered_json error_body(const ApiError& e, Dialect dialect, const std::string& request_id) {
  if (dialect == Dialect::Anthropic) {
    nlohmann::ordered_json error = {{"type", e.anthropic_type}, {"message", e.message}};
    if (!e.details.is_null()) error["details"] = e.details;
    return {{"type", "error"}, {"error", std::move(error)}, {"request_id", request_id}};
  }
  return nlohmann::ordered_json{{"error",
           {{"message", e.message},
            {"type", e.openai_type},
            {"param", nullptr},
            {"code", e.openai_code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.openai_code)}}}};
}

std::string random_id(const std::string& prefix) {
  static constexpr char kAlphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = prefix + "01";
  for (int i = 0; i < 22; ++i) id += kAlphabet[rng() % 62];
  return id;
}

}  // namespace akv
