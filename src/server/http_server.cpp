#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include "base/check.h"
#include "base/log.h"
#include "server/api_error.h"
#include "server/http_connections.h"
#include "server/request_identity.h"
#include "server/routes.h"

namespace akv {

namespace {

constexpr int kListenBacklog = 1024;

// Anthropic paths answer errors in Anthropic's envelope; everything else in OpenAI's.
Dialect dialect_of(const httplib::Request& req) {
  const std::string& p = req.path;
  const bool anthropic = p.rfind("/v1/messages", 0) == 0 || req.has_header("anthropic-version") ||
                         (p.rfind("/v1/models", 0) == 0 && req.has_header("x-api-key"));
  return anthropic ? Dialect::Anthropic : Dialect::OpenAI;
}

void send_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  const std::string request_id = random_id("req_");
  res.status = e.status;
  res.set_header("request-id", request_id);
  if (e.status == 529 || e.status == 429 || e.status >= 500) res.set_header("x-should-retry", "true");
  if (e.status == 529 || e.status == 429) res.set_header("retry-after", "1");
  res.set_content(error_body(e, dialect_of(req), request_id).dump(), "application/json");
}

bool authorized(const ServingContext& ctx, const httplib::Request& req) {
  if (ctx.options.api_keys.empty()) return true;
  const std::string key = api_key_of(req);
  for (const std::string& k : ctx.options.api_keys)
    if (!key.empty() && key == k) return true;
  return false;
}

// Routes that generate: they take an admission slot when their headers arrive.
bool is_generation_route(const httplib::Request& req) {
  return req.method == "POST" &&
         (req.path == "/v1/messages" || req.path == "/v1/chat/completions" || req.path == "/v1/completions");
}

// Each worker thread serves one request at a time (cpp-httplib), so the slot taken for a
// request's headers waits here for its handler; it is dropped once the reply is written.
thread_local std::shared_ptr<AdmissionSlot> t_admission;

using Handler = void (*)(ServingContext&, const httplib::Request&, httplib::Response&);

// The one place request-handling exceptions are caught (style: the HTTP handler wrapper).
httplib::Server::Handler wrap(ServingContext& ctx, Handler handler) {
  return [&ctx, handler](const httplib::Request& req, httplib::Response& res) {
    try {
      handler(ctx, req, res);
    } catch (const Error& e) {
      ApiError err = api_error_from(e);
      // "Overloaded" is 529 in Anthropic's API; OpenAI clients expect 429 (both are retried).
      if (err.status == 529 && dialect_of(req) == Dialect::OpenAI) err = api_error(429, err.message);
      send_error(req, res, err);
    } catch (const std::exception& e) {
      log_error("{} {}: internal error: {}", req.method, req.path, e.what());
      send_error(req, res, api_error(500, std::string("internal error: ") + e.what()));
    }
  };
}

}  // namespace

std::shared_ptr<AdmissionSlot> claim_admission_slot(ServingContext& ctx) {
  std::shared_ptr<AdmissionSlot> slot = std::move(t_admission);
  if (slot == nullptr) slot = std::make_shared<AdmissionSlot>(ctx);
  if (!slot->ok()) throw Error(ErrorKind::ResourceExhausted, "Overloaded: too many requests in flight; retry shortly");
  return slot;
}

namespace {

// Generation holds at most max_queue workers (admission slots); the reserve answers everything
// else. Idle keep-alive connections are closed after 5 s (as Node and many proxies do).
ConnectionLimits connection_limits(const ServerOptions& o) {
  AKV_CHECK(o.max_queue >= 1 && o.reserved_http_workers >= 1, "max_queue and reserved_http_workers must be positive");
  ConnectionLimits l;
  l.workers = o.max_queue + o.reserved_http_workers;
  l.header_timeout = std::chrono::seconds(o.header_timeout_s);
  l.body_timeout = std::chrono::seconds(o.body_timeout_s);
  l.keep_alive = std::chrono::seconds(5);
  l.write_idle = std::chrono::seconds(600);
  return l;
}

}  // namespace

HttpServer::HttpServer(ServingContext& ctx)
    : ctx_(ctx),
      http_(std::make_unique<DeadlineHttpServer>(connection_limits(ctx.options), ctx.connections,
                                                 [] { t_admission.reset(); })) {
  http_->set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd_ = sock;
  });
  http_->set_payload_max_length(ctx.options.max_body_bytes);
  http_->set_keep_alive_max_count(100000);
  http_->set_tcp_nodelay(true);
  register_routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::register_routes() {
  ServingContext& ctx = ctx_;
  http_->set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health" || req.path == "/metrics") return httplib::Server::HandlerResponse::Unhandled;
    // The dashboard's page holds no data (it asks for the key, then reads the API with it).
    if (req.method == "GET" && (req.path == "/" || req.path.starts_with("/dashboard/")))
      return httplib::Server::HandlerResponse::Unhandled;
    if (authorized(ctx, req)) {
      if (is_generation_route(req)) t_admission = std::make_shared<AdmissionSlot>(ctx);
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(req, res, api_error(401, "invalid x-api-key or Authorization bearer token"));
    return httplib::Server::HandlerResponse::Handled;
  });
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler already wrote its error reply
    if (res.status == 413) {
      send_error(req, res, api_error(413, "request body exceeds the size limit"));
    } else if (res.status == 404) {
      std::string message = "no route for " + req.method + " " + req.path;
      if (req.path.starts_with("/v1/v1/"))  // a client whose base URL already ends in /v1
        message += "; the base URL should not end in /v1 (e.g. ANTHROPIC_BASE_URL=http://host:port)";
      send_error(req, res, api_error(404, message));
    } else if (res.status == 405) {
      send_error(req, res, api_error(404, "method " + req.method + " not allowed on " + req.path));
    } else if (res.status >= 400) {
      send_error(req, res, api_error(res.status, "request failed"));
    }
  });
  http_->Post("/v1/messages", wrap(ctx, handle_anthropic_messages));
  http_->Post("/v1/messages/count_tokens", wrap(ctx, handle_anthropic_count_tokens));
  http_->Post("/v1/chat/completions", wrap(ctx, handle_openai_chat));
  http_->Post("/v1/completions", wrap(ctx, handle_openai_completions));
  http_->Get("/v1/models", wrap(ctx, [](ServingContext& c, const httplib::Request& q, httplib::Response& r) {
    if (dialect_of(q) == Dialect::Anthropic) handle_anthropic_models(c, q, r);
    else handle_openai_models(c, q, r);
  }));
  http_->Get(R"(/v1/models/(.+))", wrap(ctx, handle_anthropic_model));
  http_->Get("/v1/agents", wrap(ctx, handle_agents_list));
  http_->Get(R"(/v1/agents/([^/]+))", wrap(ctx, handle_agent_get));
  http_->Post(R"(/v1/agents/([^/]+)/(pin|unpin|evict))", wrap(ctx, handle_agent_action));
  http_->Delete(R"(/v1/agents/([^/]+))", wrap(ctx, handle_agent_delete));
  http_->Get("/", wrap(ctx, handle_dashboard_asset));
  http_->Get(R"(/dashboard/[a-z]+\.[a-z]+)", wrap(ctx, handle_dashboard_asset));
  http_->Get("/v1/dashboard", wrap(ctx, handle_dashboard_state));
  http_->Get("/health", wrap(ctx, handle_health));
  http_->Get("/metrics", wrap(ctx, handle_metrics));
  http_->Post("/admin/drain", wrap(ctx, handle_admin_drain));
}

void HttpServer::bind() {
  if (ctx_.options.port == 0) {
    port_ = http_->bind_to_any_port(ctx_.options.host);
    if (port_ <= 0) throw Error(ErrorKind::Io, "cannot bind " + ctx_.options.host + " on any port");
  } else {
    if (!http_->bind_to_port(ctx_.options.host, ctx_.options.port))
      throw Error(ErrorKind::Io, "cannot bind " + ctx_.options.host + ":" + std::to_string(ctx_.options.port) +
                                     " (in use, or not an address of this machine)");
    port_ = ctx_.options.port;
  }
  // Debian's cpp-httplib is a shared library built with a listen queue of 5, which resets
  // connections when agents connect in a burst (20 subagents at once); listen() again on the
  // bound socket raises it (the kernel caps it at net.core.somaxconn).
  if (listen_fd_ < 0 || ::listen(listen_fd_, kListenBacklog) != 0)
    throw Error(ErrorKind::Io, "cannot raise the listen queue of " + ctx_.options.host + ":" + std::to_string(port_));
}

void HttpServer::run() { http_->listen_after_bind(); }

void HttpServer::stop() { http_->stop(); }

}  // namespace akv
