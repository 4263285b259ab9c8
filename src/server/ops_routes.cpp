// GET /v1/models (one body both SDKs accept), /v1/models/{id}, /health, /metrics.
#include <httplib.h>

#include <ctime>
#include <optional>

#include "base/error.h"
#include "server/metrics.h"
#include "server/routes.h"
#include "server/serving.h"

namespace akv {

namespace {

using json = nlohmann::ordered_json;

std::string rfc3339(std::int64_t unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Fields of both dialects' model objects (each SDK ignores the other's).
json model_info(const ServingContext& ctx) {
  const std::string& id = ctx.options.served_model_name;
  return {{"type", "model"},
          {"id", id},
          {"display_name", id},
          {"created_at", rfc3339(ctx.options.created_unix)},
          {"object", "model"},
          {"created", ctx.options.created_unix},
          {"owned_by", "agentkv"},
          {"max_input_tokens", ctx.engine.max_context()},
          {"max_tokens", ctx.engine.max_context()}};
}

}  // namespace

void handle_anthropic_models(ServingContext& ctx, const httplib::Request&, httplib::Response& res) {
  const json m = model_info(ctx);
  res.set_content(json{{"object", "list"},
                       {"data", json::array({m})},
                       {"has_more", false},
                       {"first_id", m["id"]},
                       {"last_id", m["id"]}}
                      .dump(),
                  "application/json");
}

void handle_openai_models(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  handle_anthropic_models(ctx, req, res);
}

void handle_anthropic_model(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
  if (ctx.options.strict_model && id != ctx.options.served_model_name)
    throw Error(ErrorKind::NotFound, "model '" + id + "' not found (serving '" + ctx.options.served_model_name + "')");
  json m = model_info(ctx);
  m["id"] = id;  // any id is accepted and echoed (api-notes §3.5)
  res.set_content(m.dump(), "application/json");
}

namespace {
const char* state_name(ServeState s) {
  switch (s) {
    case ServeState::Ready:
      return "ok";
    case ServeState::Draining:
      return "draining";
    case ServeState::Drained:
      return "drained";
  }
  return "ok";
}
}  // namespace

void handle_health(ServingContext& ctx, const httplib::Request&, httplib::Response& res) {
  // 503 unless Ready: a load balancer's health check takes a draining replica out. Serving works
  // without the disk or remote tier; say that it is off (the reason, with the path, is in the
  // log: /health answers without a key).
  const ServeState state = ctx.state.load();
  json body{{"status", state_name(state)}};
  if (!ctx.memory.disk_unavailable.empty()) body["kv_disk"] = "unavailable";
  if (ctx.memory.remote != nullptr && !ctx.memory.remote->stats().available) body["kv_remote"] = "unavailable";
  res.status = state == ServeState::Ready ? 200 : 503;
  res.set_content(body.dump(), "application/json");
}

void handle_admin_drain(ServingContext& ctx, const httplib::Request&, httplib::Response& res) {
  if (!ctx.start_drain) throw Error(ErrorKind::NotFound, "draining is not offered by this server");
  ctx.start_drain();
  res.status = 202;
  res.set_content(json{{"status", state_name(ctx.state.load())}}.dump(), "application/json");
}

void handle_metrics(ServingContext& ctx, const httplib::Request&, httplib::Response& res) {
  const EngineMetrics m = ctx.engine.metrics();
  std::string out;
  auto gauge = [&out](const char* name, const char* help, double v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " + std::to_string(v) + "\n";
  };
  gauge("agentkv_requests_in_flight", "HTTP requests holding an admission slot", ctx.in_flight.load());
  gauge("agentkv_http_workers_busy", "HTTP workers serving a connection", ctx.connections.busy_workers.load());
  gauge("agentkv_http_connections_waiting", "Accepted connections waiting for an HTTP worker",
        ctx.connections.waiting_connections.load());
  out += "# HELP agentkv_http_requests_cut_total Requests dropped: headers or body past their deadline or size\n"
         "# TYPE agentkv_http_requests_cut_total counter\nagentkv_http_requests_cut_total " +
         std::to_string(ctx.connections.cut_requests.load()) + "\n";
  gauge("agentkv_kv_disk_unavailable", "1 when --kv-dir could not be used and serving runs without the disk tier",
        ctx.memory.disk_unavailable.empty() ? 0 : 1);
  append_engine_metrics(m, out);
  append_histogram("agentkv_ttft_seconds", "request submit to first token (queueing, restore, prefill)",
                   ctx.ttft.snapshot(), out);
  append_prepare_metrics(ctx.prepare, out);
  if (ctx.memory.disk != nullptr)
    append_histogram("agentkv_kv_restore_seconds", "background loads of a request's prefix from the disk tier",
                     ctx.memory.disk->restore_time().snapshot(), out);
  const std::optional<HostStoreStats> host =
      ctx.memory.host != nullptr ? std::optional(ctx.memory.host->stats()) : std::nullopt;
  const std::optional<DiskStoreStats> disk =
      ctx.memory.disk != nullptr ? std::optional(ctx.memory.disk->stats()) : std::nullopt;
  append_tier_metrics(host ? &*host : nullptr, disk ? &*disk : nullptr, out);
  if (ctx.memory.remote != nullptr) append_remote_metrics(ctx.memory.remote->stats(), disk ? &*disk : nullptr, out);
  gauge("agentkv_ready", "1 while /health says ready (0 draining or drained)", ctx.state.load() == ServeState::Ready);
  res.set_content(out, "text/plain; version=0.0.4");
}

}  // namespace akv
