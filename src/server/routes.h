// Route handlers, one function per endpoint, grouped by dialect. Each may throw akv::Error
// (bad input) which the HTTP wrapper turns into the dialect's error reply.
#pragma once

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace akv {

struct ServingContext;

void handle_anthropic_messages(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_anthropic_count_tokens(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_anthropic_models(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_anthropic_model(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);

void handle_openai_chat(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_openai_completions(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_openai_models(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);

void handle_agents_list(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_agent_get(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_agent_action(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_agent_delete(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);

void handle_dashboard_asset(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_dashboard_state(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);

void handle_health(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_metrics(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
// POST /admin/drain: starts a drain (ServeState); 202 with the state, again while it runs.
void handle_admin_drain(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace akv
