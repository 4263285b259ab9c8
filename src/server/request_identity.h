// Who a request is for: the tenant (from the API key; the prefix-cache namespace, so one
// tenant's cache is never matched by another) and the agent id (architecture §5: first match
// wins among x-agent-id, x-claude-code-agent-id, x-claude-code-session-id, Anthropic
// metadata.user_id, OpenAI user / session_id). Agent ids are validated here, at the edge.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace httplib {
struct Request;
}

namespace akv {

struct ServingContext;
struct ServerOptions;

struct RequestIdentity {
  std::string tenant;        // a hash of the API key; "" without auth
  std::string agent;         // "" when anonymous
  std::string parent_agent;  // x-claude-code-parent-agent-id
};

// Throws Error{InvalidArgument} naming the header or field for an invalid agent id
// (longer than 128 bytes, or characters outside [A-Za-z0-9._:@-], or "." / "..").
RequestIdentity identify(const ServingContext& ctx, const httplib::Request& req, const nlohmann::ordered_json& body);
RequestIdentity identify(const ServerOptions& options, const httplib::Request& req,
                         const nlohmann::ordered_json& body);

// The first value of header `name`, whole: httplib's get_header_value() stops at a NUL byte,
// which would let "a\0../b" pass validation as "a". "" when absent.
std::string header_value(const httplib::Request& req, const char* name);

// The caller's API key: x-api-key, else an `Authorization: Bearer` token; "" when neither.
std::string api_key_of(const httplib::Request& req);

// Validates one agent id; `source` names the header or field in the error.
void validate_agent_id(const std::string& id, const std::string& source);

}  // namespace akv
