// POST /v1/chat/completions and /v1/completions.
#include <httplib.h>

#include <chrono>
#include <memory>

#include "base/phase_clock.h"
#include "server/api_error.h"
#include "server/chat_generation.h"
#include "server/connection_watch.h"
#include "server/json_fields.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/request_identity.h"
#include "server/retention_policy.h"
#include "server/routes.h"

namespace akv {

namespace {

using json = nlohmann::ordered_json;

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Legacy completions stream text only: a sink that forwards text deltas as chunks.
class TextChunkSink final : public OutputSink {
 public:
  TextChunkSink(std::string id, std::string model, std::int64_t created, std::function<bool(std::string_view)> write)
      : id_(std::move(id)), model_(std::move(model)), created_(created), write_(std::move(write)) {}
  bool start(const ReplyUsage&) override { return true; }
  bool text(std::string_view delta) override {
    if (delta.empty()) return true;
    return write_("data: " + openai_text_chunk(id_, model_, created_, std::string(delta), nullptr).dump() + "\n\n");
  }
  bool thinking(std::string_view) override { return true; }
  bool tool_start(const std::string&, const std::string&) override { return true; }
  bool tool_args(std::string_view) override { return true; }
  bool tool_end() override { return true; }
  bool finish(const ReplyFinish& f) override {
    json last = openai_text_chunk(id_, model_, created_, "", f.reason == StopReason::MaxTokens ? "length" : "stop");
    if (include_usage) last["usage"] = openai_usage(f.usage);
    return write_("data: " + last.dump() + "\n\n") && write_("data: [DONE]\n\n");
  }
  bool include_usage = false;

 private:
  std::string id_, model_;
  std::int64_t created_;
  std::function<bool(std::string_view)> write_;
};

template <typename MakeWriter>
void stream_reply(ServingContext& ctx, const httplib::Request& req, httplib::Response& res,
                  std::shared_ptr<PreparedChat> prep, std::shared_ptr<AdmissionSlot> slot, std::string route,
                  std::string agent, MakeWriter make_writer) {
  res.set_header("cache-control", "no-cache");
  // A client that leaves during a long prefill writes nothing to fail: poll its socket.
  prep->job.client_gone = client_gone_check(req);
  res.set_chunked_content_provider(
      "text/event-stream", [&ctx, prep, slot, route, agent, make_writer](std::size_t, httplib::DataSink& out) {
        auto write = [&out](std::string_view s) { return out.write(s.data(), s.size()); };
        auto writer = make_writer(write);
        const ReplyFinish f = run_generation(ctx.engine, ctx.tokenizer, std::move(prep->job), *writer);
        log_request(route, agent, f);
        if (f.reason == StopReason::Error) {
          const json e = {{"error", {{"message", f.error_message}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}};
          write("data: " + e.dump() + "\n\n");
          write("data: [DONE]\n\n");
        }
        if (f.reason != StopReason::Cancelled) out.done();
        return f.reason != StopReason::Cancelled;
      });
}

}  // namespace

void handle_openai_chat(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  PhaseClock clock;  // the request path's phases (PrepareTiming)
  const auto received = clock.last();
  const json body = fields::parse_body(req.body);
  OpenAiChatRequest parsed = parse_openai_chat(body, ctx.options.sampling_defaults);
  const double parse_ms = clock.lap_ms();
  const RequestIdentity who = identify(ctx, req, body);
  auto slot = claim_admission_slot(ctx);
  double identify_ms = clock.lap_ms();
  auto prep = std::make_shared<PreparedChat>(prepare_chat(ctx, parsed.chat, who, Dialect::OpenAI));
  clock.lap_ms();  // prepare_chat times its own phases
  prep->job.received = received;
  prep->job.request.ns = who.tenant;
  prep->job.request.agent = who.agent;
  prep->job.request.retention = retention_for(parsed.chat, ctx.memory.agents, who.tenant, who.agent);
  identify_ms += clock.lap_ms();
  prep->job.prepare.parse_ms = parse_ms;
  prep->job.prepare.identify_ms = identify_ms;
  const std::string id = random_id("chatcmpl-");
  const std::string model = parsed.chat.model;
  const std::int64_t created = unix_now();

  if (!parsed.chat.stream) {
    CollectingSink sink;
    const ReplyFinish f =
        run_generation_collected(ctx.engine, ctx.tokenizer, std::move(prep->job), sink, client_gone_check(req));
    log_request("chat.completions", who.agent, f);
    if (f.reason == StopReason::Cancelled)
      throw Error(ErrorKind::InvalidArgument, "the client closed the connection before the reply was ready");
    if (f.reason == StopReason::Error) throw Error(ErrorKind::Internal, "generation failed: " + f.error_message);
    res.set_content(openai_chat_completion(id, model, created, sink).dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
    return;
  }
  const bool include_usage = parsed.include_usage;
  stream_reply(ctx, req, res, prep, slot, "chat.completions", who.agent, [=](auto write) {
    return std::make_unique<OpenAiChunkWriter>(id, model, created, include_usage, write);
  });
}

void handle_openai_completions(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const json body = fields::parse_body(req.body);
  OpenAiCompletionRequest parsed = parse_openai_completion(body, ctx.options.sampling_defaults);
  const RequestIdentity who = identify(ctx, req, body);
  auto slot = claim_admission_slot(ctx);
  const std::int64_t context = ctx.engine.max_context();
  if (parsed.prompt_is_ids) check_prompt_ids(parsed.prompt_ids, ctx.tokenizer.vocab_size());
  // Encoding stops past the context: a longer prompt is refused without encoding all of it.
  const auto bound = static_cast<std::size_t>(std::max<std::int64_t>(context, 0));
  std::vector<std::int32_t> ids =
      parsed.prompt_is_ids ? parsed.prompt_ids
                           : ctx.tokenizer.encode_up_to(parsed.prompt_text, /*add_special_tokens=*/true, bound);
  if (ids.empty()) throw Error(ErrorKind::InvalidArgument, "prompt: must not be empty");
  const std::int64_t room = context - static_cast<std::int64_t>(ids.size());
  if (room < 1)
    throw Error(ErrorKind::InvalidArgument, "prompt: " + std::to_string(ids.size()) + " tokens leave no room in the context of " +
                                                std::to_string(ctx.engine.max_context()) +
                                                ctx.engine.context_limit_note());
  auto prep = std::make_shared<PreparedChat>();
  GenerateRequest& r = prep->job.request;
  r.prompt = std::move(ids);
  r.ns = who.tenant;
  r.agent = who.agent;
  r.sampling = sampling_params(parsed.options.sampling);
  r.stop_token_ids = ctx.stop_token_ids;
  r.max_tokens = static_cast<std::int32_t>(std::min<std::int64_t>(std::max<std::int64_t>(parsed.options.max_tokens, 1), room));
  prep->job.stop_sequences = parsed.options.stop_sequences;
  prep->job.ping_interval = std::chrono::milliseconds(ctx.options.ping_interval_ms);
  prep->job.on_finish = record_turn_for(ctx, who);
  const std::string id = random_id("cmpl-");
  const std::int64_t created = unix_now();
  const std::string echo = parsed.echo ? (parsed.prompt_is_ids ? ctx.tokenizer.decode(r.prompt, false) : parsed.prompt_text) : "";

  if (!parsed.options.stream) {
    CollectingSink sink;
    const ReplyFinish f =
        run_generation_collected(ctx.engine, ctx.tokenizer, std::move(prep->job), sink, client_gone_check(req));
    log_request("completions", who.agent, f);
    if (f.reason == StopReason::Cancelled)
      throw Error(ErrorKind::InvalidArgument, "the client closed the connection before the reply was ready");
    if (f.reason == StopReason::Error) throw Error(ErrorKind::Internal, "generation failed: " + f.error_message);
    std::string text = echo;
    for (const OutputBlock& b : sink.blocks()) text += b.text;
    res.set_content(openai_text_completion(id, parsed.model, created, text, f).dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
    return;
  }
  const bool include_usage = parsed.include_usage;
  const std::string model = parsed.model;
  stream_reply(ctx, req, res, prep, slot, "completions", who.agent, [=](auto write) {
    auto sink = std::make_unique<TextChunkSink>(id, model, created, write);
    sink->include_usage = include_usage;
    if (!echo.empty()) sink->text(echo);
    return sink;
  });
}

}  // namespace akv
