// The agents dashboard: GET / and /dashboard/* (the embedded page, public: it holds no data)
// and GET /v1/dashboard (engine load, tier fill and budgets, the caller's tenant's agents'
// recent turns; behind --api-key like the agents API, which the page reads for the agents).
#include <httplib.h>

#include "base/error.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "server/dashboard_assets.h"
#include "server/request_identity.h"
#include "server/routes.h"
#include "server/serving.h"

namespace akv {

namespace {

using json = nlohmann::ordered_json;

json engine_json(const EngineMetrics& m) {
  const EngineTotals& t = m.totals;
  json e = {{"steps", t.steps},
            {"requests_finished", t.requests_finished},
            {"prompt_tokens", t.prompt_tokens},
            {"cached_prompt_tokens", t.cached_prompt_tokens},
            {"generated_tokens", t.generated_tokens},
            {"preemptions", t.preemptions},
            {"running", 0},
            {"waiting", 0},
            {"restoring", 0},
            {"batch_size", 0},
            {"step_ms", 0.0},
            {"tokens_per_s", 0.0}};
  if (m.recent.empty()) return e;
  const StepStats& s = m.recent.back();
  e["running"] = s.running;
  e["waiting"] = s.waiting;
  e["restoring"] = s.restoring;
  e["batch_size"] = s.batch_size;
  e["step_ms"] = s.step_ms;
  double ms = 0, tokens = 0;  // over the recent steps: the rate while stepping
  for (const StepStats& r : m.recent) {
    ms += r.step_ms;
    tokens += r.prefill_tokens + r.decode_tokens;
  }
  e["tokens_per_s"] = ms > 0 ? 1000.0 * tokens / ms : 0.0;
  return e;
}

json tiers_json(const ServingContext& ctx, const EngineMetrics& m) {
  const KvUsage kv = m.recent.empty() ? KvUsage{} : m.recent.back().kv;
  json tiers = {{"device",
                 {{"blocks", kv.n_blocks},  // 0 before the first step
                  {"capacity_tokens", ctx.engine.kv_capacity_tokens()},
                  {"used_blocks", kv.n_used},
                  {"cached_blocks", kv.n_cached},
                  {"block_bytes", ctx.memory.device_block_bytes}}},
                {"host", nullptr},
                {"disk", nullptr}};
  if (ctx.memory.host != nullptr) {
    const HostStoreStats h = ctx.memory.host->stats();
    tiers["host"] = {{"blocks", h.n_blocks}, {"bytes", h.bytes}, {"max_bytes", h.max_bytes}};
  }
  if (ctx.memory.disk != nullptr) {
    const DiskStoreStats d = ctx.memory.disk->stats();
    tiers["disk"] = {{"blocks", d.n_blocks}, {"bytes", d.bytes}, {"max_bytes", d.max_bytes}, {"queued_blocks", d.queued_blocks}};
  } else if (!ctx.memory.disk_unavailable.empty()) {
    tiers["disk"] = {{"unavailable", true}};
  }
  return tiers;
}

}  // namespace

void handle_dashboard_asset(ServingContext&, const httplib::Request& req, httplib::Response& res) {
  for (const DashboardAsset& a : dashboard_assets())
    if (a.path == req.path) {
      res.set_header("cache-control", "no-cache");
      res.set_content(std::string(a.body), std::string(a.content_type));
      return;
    }
  throw Error(ErrorKind::NotFound, "no dashboard file " + req.path);
}

void handle_dashboard_state(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string tenant = identify(ctx, req, json::object()).tenant;
  const EngineMetrics m = ctx.engine.metrics();
  json agents = json::object();
  for (const auto& [agent, turns] : ctx.history.of_tenant(tenant)) {
    json t = json::array();
    for (const TurnSample& s : turns)
      t.push_back({{"at_ms", s.unix_ms},
                   {"ttft_ms", s.ttft_ms},
                   {"prompt_tokens", s.prompt_tokens},
                   {"cached_tokens", s.cached_tokens},
                   {"output_tokens", s.output_tokens}});
    agents[agent] = std::move(t);
  }
  const json body = {{"model", ctx.options.served_model_name},
                     {"agent_memory", ctx.memory.agents != nullptr},
                     {"engine", engine_json(m)},
                     {"tiers", tiers_json(ctx, m)},
                     {"turns", std::move(agents)}};
  res.set_header("cache-control", "no-cache");
  res.set_content(body.dump(), "application/json");
}

}  // namespace akv
