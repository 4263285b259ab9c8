// Agent ids from headers are validated whole: a NUL inside a header value must not cut the id
// short (httplib's get_header_value() stops at it) and let it pass as a shorter valid id.
#include "server/request_identity.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include "base/error.h"
#include "server/api_error.h"
#include "server/serving.h"

namespace akv {
namespace {

using json = nlohmann::ordered_json;

std::string error_of(const httplib::Request& req, const json& body = json::object()) {
  try {
    identify(ServerOptions{}, req, body);
  } catch (const Error& e) {
    EXPECT_EQ(api_error_from(e).status, 400);
    return e.what();
  }
  return "";
}

TEST(RequestIdentity, NulInAnAgentHeaderIsA400) {
  for (const char* h : {"x-agent-id", "x-claude-code-agent-id", "x-claude-code-session-id",
                        "x-claude-code-parent-agent-id"}) {
    httplib::Request req;
    req.headers.emplace(h, std::string("agent1\0../other", 15));
    EXPECT_NE(error_of(req).find(std::string("header ") + h + ": agent id may contain only"),
              std::string::npos)
        << h;
  }
  httplib::Request req;
  req.headers.emplace("x-agent-id", std::string("agent1\x01", 7));
  EXPECT_NE(error_of(req).find("header x-agent-id"), std::string::npos);
}

TEST(RequestIdentity, ValidHeaderIsTheAgent) {
  httplib::Request req;
  req.headers.emplace("X-Agent-Id", "agent-1");  // header names are case-insensitive
  EXPECT_EQ(identify(ServerOptions{}, req, json::object()).agent, "agent-1");
}

TEST(RequestIdentity, ApiKeyIsReadWhole) {
  httplib::Request a, b;
  a.headers.emplace("x-api-key", std::string("key\0one", 7));
  b.headers.emplace("x-api-key", "key");
  EXPECT_EQ(api_key_of(a), std::string("key\0one", 7));
  ServerOptions auth;
  auth.api_keys = {"key"};
  EXPECT_NE(identify(auth, a, json::object()).tenant, identify(auth, b, json::object()).tenant);
}

}  // namespace
}  // namespace akv
