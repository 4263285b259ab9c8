// The agents API (architecture.md §7): GET /v1/agents, GET /v1/agents/{id},
// POST /v1/agents/{id}/pin|unpin|evict, DELETE /v1/agents/{id}. A caller sees and changes only
// its own tenant's agents (the tenant comes from its API key, as for generation).
#include <httplib.h>

#include <ctime>

#include "base/error.h"
#include "kv/agent_index.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "server/request_identity.h"
#include "server/routes.h"
#include "server/serving.h"

namespace akv {

namespace {

using json = nlohmann::ordered_json;

std::string rfc3339_ms(std::int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return std::string(buf) + "." + std::to_string(1000 + unix_ms % 1000).substr(1) + "Z";
}

AgentIndex& agents_of(ServingContext& ctx) {
  if (ctx.memory.agents == nullptr)
    throw Error(ErrorKind::NotFound, "agent memory is not enabled on this server");
  return *ctx.memory.agents;
}

std::string tenant_of(ServingContext& ctx, const httplib::Request& req) {
  return identify(ctx, req, json::object()).tenant;
}

// The {id} path segment, validated like an agent id from a header.
std::string agent_id_of(const httplib::Request& req) {
  const std::string id = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
  if (id.empty()) throw Error(ErrorKind::InvalidArgument, "missing agent id");
  validate_agent_id(id, "path");
  return id;
}

json agent_json(const ServingContext& ctx, const AgentRecord& r) {
  const std::int64_t device =
      ctx.memory.agents->n_resident(r.chain) * ctx.memory.device_block_bytes;
  const std::int64_t host = ctx.memory.host != nullptr ? ctx.memory.host->stored_bytes(r.chain) : 0;
  const std::int64_t disk = ctx.memory.disk != nullptr ? ctx.memory.disk->stored_bytes(r.chain) : 0;
  return {{"id", r.agent},
          {"object", "agent"},
          {"tokens", r.n_tokens},
          {"blocks", r.chain.size()},
          {"bytes", {{"device", device}, {"host", host}, {"disk", disk}}},
          {"requests", r.n_requests},
          {"hits", r.hits},
          {"restores", r.restores},
          {"last_used_at", rfc3339_ms(r.last_use_ms)},
          {"pinned", r.pinned}};
}

AgentRecord find_or_404(ServingContext& ctx, const std::string& tenant, const std::string& id) {
  std::optional<AgentRecord> r = agents_of(ctx).find(tenant, id);
  if (!r) throw Error(ErrorKind::NotFound, "agent '" + id + "' not found");
  return *r;
}

}  // namespace

void handle_agents_list(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string tenant = tenant_of(ctx, req);
  json data = json::array();
  for (const AgentRecord& r : agents_of(ctx).list(tenant)) data.push_back(agent_json(ctx, r));
  res.set_content(json{{"object", "list"}, {"data", std::move(data)}}.dump(), "application/json");
}

void handle_agent_get(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string id = agent_id_of(req);
  res.set_content(agent_json(ctx, find_or_404(ctx, tenant_of(ctx, req), id)).dump(),
                  "application/json");
}

void handle_agent_action(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string id = agent_id_of(req);
  const std::string action = req.matches.size() > 2 ? std::string(req.matches[2]) : "";
  const std::string tenant = tenant_of(ctx, req);
  agents_of(ctx);  // 404 without agent memory
  AgentAction a;
  if (action == "pin")
    a = AgentAction::Pin;
  else if (action == "unpin")
    a = AgentAction::Unpin;
  else if (action == "evict")  // device memory and the host tier; disk copies stay
    a = AgentAction::Evict;
  else
    throw Error(ErrorKind::NotFound, "no agent action '" + action + "'");
  // Applied by the engine thread, the one writer of agent state (Engine::change_agent).
  const std::optional<AgentRecord> r = ctx.engine.change_agent(tenant, id, a).get();
  if (!r) throw Error(ErrorKind::NotFound, "agent '" + id + "' not found");
  res.set_content(agent_json(ctx, *r).dump(), "application/json");
}

void handle_agent_delete(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string id = agent_id_of(req);
  const std::string tenant = tenant_of(ctx, req);
  agents_of(ctx);  // 404 without agent memory
  // The manifest and the blocks no other agent's chain names go; the agent's requests still in
  // flight record nothing (Engine::change_agent).
  if (!ctx.engine.change_agent(tenant, id, AgentAction::Delete).get())
    throw Error(ErrorKind::NotFound, "agent '" + id + "' not found");
  res.set_content(json{{"id", id}, {"object", "agent"}, {"deleted", true}}.dump(),
                  "application/json");
}

}  // namespace akv
