// POST /v1/messages and /v1/messages/count_tokens.
#include <httplib.h>

#include <chrono>
#include <memory>

#include "base/phase_clock.h"
#include "server/anthropic_request.h"
#include "server/api_error.h"
#include "server/anthropic_response.h"
#include "server/chat_generation.h"
#include "server/connection_watch.h"
#include "server/json_fields.h"
#include "server/request_identity.h"
#include "server/retention_policy.h"
#include "server/routes.h"

namespace akv {

namespace {

using json = nlohmann::ordered_json;

// Output is discarded: max_tokens 0 only fills the prefix cache.
class DiscardSink final : public OutputSink {
 public:
  bool start(const ReplyUsage&) override { return true; }
  bool text(std::string_view) override { return true; }
  bool thinking(std::string_view) override { return true; }
  bool tool_start(const std::string&, const std::string&) override { return true; }
  bool tool_args(std::string_view) override { return true; }
  bool tool_end() override { return true; }
  bool finish(const ReplyFinish&) override { return true; }
};

std::string error_type_for(const ReplyFinish& f) {
  return f.error_message.find("memory") != std::string::npos ? "overloaded_error" : "api_error";
}

}  // namespace

void handle_anthropic_messages(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  PhaseClock clock;  // the request path's phases (PrepareTiming)
  const auto received = clock.last();
  const json body = fields::parse_body(req.body);
  ChatRequest chat = parse_anthropic_messages(body, ctx.options.sampling_defaults);
  const double parse_ms = clock.lap_ms();
  const RequestIdentity who = identify(ctx, req, body);
  auto slot = claim_admission_slot(ctx);
  double identify_ms = clock.lap_ms();
  auto prep = std::make_shared<PreparedChat>(prepare_chat(ctx, chat, who, Dialect::Anthropic));
  clock.lap_ms();  // prepare_chat times its own phases
  prep->job.received = received;
  prep->job.request.ns = who.tenant;
  prep->job.request.agent = who.agent;
  prep->job.omit_thinking = thinking_display_omitted(body);
  prep->job.request.retention = retention_for(chat, ctx.memory.agents, who.tenant, who.agent);
  identify_ms += clock.lap_ms();
  prep->job.prepare.parse_ms = parse_ms;
  prep->job.prepare.identify_ms = identify_ms;
  const std::string id = random_id("msg_");
  const std::string model = chat.model;

  if (prep->prewarm_only) {
    DiscardSink discard;
    ReplyFinish f = run_generation(ctx.engine, ctx.tokenizer, std::move(prep->job), discard);
    f.usage.output_tokens = 0;
    f.reason = StopReason::MaxTokens;
    log_request("messages", who.agent, f);
    CollectingSink empty;
    empty.finish(f);
    if (!chat.stream) {
      res.set_content(anthropic_message(id, model, empty).dump(), "application/json");
      return;
    }
    std::string sse;
    AnthropicSseWriter writer(id, model, [&sse](std::string_view s) {
      sse += s;
      return true;
    });
    writer.start(f.usage);
    writer.finish(f);
    res.set_content(sse, "text/event-stream");
    return;
  }

  if (!chat.stream) {
    CollectingSink sink;
    const ReplyFinish f =
        run_generation_collected(ctx.engine, ctx.tokenizer, std::move(prep->job), sink, client_gone_check(req));
    log_request("messages", who.agent, f);
    if (f.reason == StopReason::Cancelled)
      throw Error(ErrorKind::InvalidArgument, "the client closed the connection before the reply was ready");
    if (f.reason == StopReason::Error) throw Error(ErrorKind::Internal, "generation failed: " + f.error_message);
    res.set_content(anthropic_message(id, model, sink).dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
    return;
  }

  res.set_header("cache-control", "no-cache");
  // A client that leaves during a long prefill writes nothing to fail: poll its socket.
  prep->job.client_gone = client_gone_check(req);
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, prep, slot, id, model, agent = who.agent](std::size_t, httplib::DataSink& out) {
        AnthropicSseWriter writer(id, model, [&out](std::string_view s) { return out.write(s.data(), s.size()); });
        const ReplyFinish f = run_generation(ctx.engine, ctx.tokenizer, std::move(prep->job), writer);
        log_request("messages", agent, f);
        if (f.reason == StopReason::Error) {
          writer.start(f.usage);
          writer.error(error_type_for(f), f.error_message);
        }
        if (f.reason != StopReason::Cancelled) out.done();
        return f.reason != StopReason::Cancelled;
      });
}

void handle_anthropic_count_tokens(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const json body = fields::parse_body(req.body);
  const ChatRequest chat = parse_anthropic_count_tokens(body);
  const RequestIdentity who = identify(ctx, req, body);  // the conversation's remembered turns count
  res.set_content(json{{"input_tokens", count_prompt_tokens(ctx, chat, who)}}.dump(), "application/json");
}

}  // namespace akv
