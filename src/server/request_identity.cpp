#include "server/request_identity.h"

#include <httplib.h>
#include <xxhash.h>

#include <cstdio>

#include "base/error.h"
#include "chat/json_depth.h"
#include "server/json_fields.h"
#include "server/serving.h"

namespace akv {

std::string header_value(const httplib::Request& req, const char* name) {
  const auto it = req.headers.find(name);
  return it == req.headers.end() ? std::string() : it->second;
}

std::string api_key_of(const httplib::Request& req) {
  std::string key = header_value(req, "x-api-key");
  const std::string auth = header_value(req, "Authorization");
  if (key.empty() && auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
  return key;
}

namespace {

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Claude Code puts a JSON string in metadata.user_id ({"device_id":..., "session_id":...});
// its session id is the agent. Anything else is used as is.
std::string agent_from_user_id(const std::string& user_id) {
  const auto j = parse_json_or_discarded(user_id, fields::kMaxJsonDepth);
  if (j.is_object() && j.contains("session_id") && j["session_id"].is_string()) return j["session_id"].get<std::string>();
  return user_id;
}

}  // namespace

void validate_agent_id(const std::string& id, const std::string& source) {
  if (id.size() > 128) throw Error(ErrorKind::InvalidArgument, source + ": agent id longer than 128 bytes");
  if (id == "." || id == "..") throw Error(ErrorKind::InvalidArgument, source + ": invalid agent id '" + id + "'");
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.' || c == ':' || c == '@';
    if (!ok)
      throw Error(ErrorKind::InvalidArgument,
                  source + ": agent id may contain only letters, digits and . _ - : @");
  }
}

RequestIdentity identify(const ServingContext& ctx, const httplib::Request& req, const nlohmann::ordered_json& body) {
  return identify(ctx.options, req, body);
}

RequestIdentity identify(const ServerOptions& options, const httplib::Request& req,
                         const nlohmann::ordered_json& body) {
  RequestIdentity who;
  if (!options.api_keys.empty()) {
    const std::string key = api_key_of(req);
    who.tenant = std::string("t").append(hex64(XXH3_64bits(key.data(), key.size())));  // append: GCC 12 -O3 -Wrestrict
  }
  struct Source {
    std::string value, name;
    bool free_form = false;  // an API field of any content: hashed when it is not a valid id
  };
  std::vector<Source> sources;
  for (const char* h : {"x-agent-id", "x-claude-code-agent-id", "x-claude-code-session-id"})
    if (req.has_header(h)) sources.push_back({header_value(req, h), std::string("header ") + h});
  if (body.contains("metadata") && body["metadata"].is_object() && body["metadata"].contains("user_id") &&
      body["metadata"]["user_id"].is_string())
    sources.push_back({agent_from_user_id(body["metadata"]["user_id"].get<std::string>()), "metadata.user_id", true});
  for (const char* f : {"user", "session_id"})
    if (body.contains(f) && body[f].is_string()) sources.push_back({body[f].get<std::string>(), f, true});
  for (const Source& s : sources) {
    if (s.value.empty()) continue;
    if (s.free_form) {
      try {
        validate_agent_id(s.value, s.name);
        who.agent = s.value;
      } catch (const Error&) {
        who.agent = "h" + hex64(XXH3_64bits(s.value.data(), s.value.size()));
      }
    } else {
      validate_agent_id(s.value, s.name);
      who.agent = s.value;
    }
    break;
  }
  if (req.has_header("x-claude-code-parent-agent-id")) {
    who.parent_agent = header_value(req, "x-claude-code-parent-agent-id");
    validate_agent_id(who.parent_agent, "header x-claude-code-parent-agent-id");
  }
  return who;
}

}  // namespace akv
