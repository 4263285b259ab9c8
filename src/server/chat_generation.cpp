#include "server/chat_generation.h"

#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "base/log.h"
#include "base/phase_clock.h"
#include "chat/json_depth.h"
#include "server/json_fields.h"
#include "server/tool_output_parser.h"

namespace akv {

namespace {

// Renders and encodes the prompt, encoding at most a little past `max_tokens` ids. A template
// limit (render steps, output size, value depth) fails the same way for every retry of the
// request: a 400, not the retryable 529 that ResourceExhausted means for admission.
BuiltPrompt build_prompt(ServingContext& ctx, const ChatRequest& chat, const TurnOwner& owner,
                         std::size_t max_tokens) {
  try {
    return ctx.prompts.build(chat, owner, max_tokens);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::ResourceExhausted) throw;
    throw Error(ErrorKind::InvalidArgument, std::string("the request exceeds a prompt template limit: ") + e.what());
  }
}

// The assistant turn as the client will send it back next time.
ChatMessage assistant_turn(const std::vector<OutputBlock>& blocks) {
  ChatMessage m;
  m.role = ChatRole::Assistant;
  for (const OutputBlock& b : blocks) {
    ContentBlock c;
    switch (b.type) {
      case OutputBlock::Type::Text:
        c.type = BlockType::Text;
        c.text = b.text;
        break;
      case OutputBlock::Type::Thinking:
        c.type = BlockType::Thinking;
        c.text = b.text;
        break;
      case OutputBlock::Type::ToolUse: {
        c.type = BlockType::ToolUse;
        c.tool_use_id = b.id;
        c.tool_name = b.name;
        c.input = parse_json_or_discarded(b.args_json.empty() ? "{}" : b.args_json, fields::kMaxJsonDepth);
        if (c.input.is_discarded() || !c.input.is_object()) c.input = nlohmann::ordered_json::object();
        break;
      }
    }
    m.blocks.push_back(std::move(c));
  }
  return m;
}

// A forced call must fit max_tokens: the grammar guarantees a complete call only from a budget
// of shortest_completion_tokens() up.
void check_forced_call_budget(const ToolCallConstraint& constraint, const ChatRequest& chat, std::int32_t max_tokens) {
  const std::int32_t needed = constraint.shortest_completion_tokens();
  if (needed <= max_tokens) return;
  const std::string tool = chat.tool_choice.type == ToolChoiceType::Tool ? chat.tool_choice.name : "any tool";
  if (needed == ToolCallConstraint::kNoCompletion)
    throw Error(ErrorKind::InvalidArgument, "no call to " + tool + " can satisfy its input_schema");
  throw Error(ErrorKind::InvalidArgument, "max_tokens too small for a forced call to " + tool + ": the shortest call takes " +
                                              std::to_string(needed) + " tokens, max_tokens is " + std::to_string(max_tokens));
}

const char* reason_name(StopReason r) {
  switch (r) {
    case StopReason::EndTurn: return "end_turn";
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::StopSequence: return "stop_sequence";
    case StopReason::ToolUse: return "tool_use";
    case StopReason::Cancelled: return "cancelled";
    case StopReason::Error: return "error";
  }
  return "?";
}

}  // namespace

SamplingParams sampling_params(const SamplingOptions& s) {
  SamplingParams p;
  p.temperature = static_cast<float>(s.temperature);
  p.top_k = s.top_k;
  p.top_p = static_cast<float>(s.top_p);
  p.min_p = static_cast<float>(s.min_p);
  p.repetition_penalty = static_cast<float>(s.repetition_penalty);
  p.presence_penalty = static_cast<float>(s.presence_penalty);
  p.frequency_penalty = static_cast<float>(s.frequency_penalty);
  p.seed = s.seed;
  return p;
}

std::string new_tool_call_id(Dialect dialect) {
  return random_id(dialect == Dialect::Anthropic ? "toolu_" : "call_");
}

std::unique_ptr<OutputParser> make_chat_output_parser(Dialect dialect, ToolCallParserOptions options) {
  options.make_call_id = [dialect] { return new_tool_call_id(dialect); };
  return make_tool_output_parser(std::move(options));
}

std::unique_ptr<OutputParser> make_model_output_parser(Dialect dialect, ToolCallFormat model_format, const ChatRequest& chat,
                                                       bool parse_thinking, bool starts_in_thinking) {
  const bool calls = chat.tool_choice.type != ToolChoiceType::None && !chat.tools.empty();
  auto id = [dialect] { return new_tool_call_id(dialect); };
  if (model_format == ToolCallFormat::Harmony)
    return make_harmony_output_parser({.parse_calls = calls, .make_call_id = id});
  if (model_format == ToolCallFormat::QwenXml && calls)
    return make_qwen_xml_output_parser({.tools = chat.tools,
                                        .parse_thinking = parse_thinking,
                                        .starts_in_thinking = starts_in_thinking,
                                        .make_call_id = id});
  const ToolCallFormat format = calls && model_format != ToolCallFormat::QwenXml ? model_format : ToolCallFormat::None;
  return make_chat_output_parser(dialect, {.format = format, .parse_thinking = parse_thinking, .starts_in_thinking = starts_in_thinking});
}

TurnOwner turn_owner(const RequestIdentity& who) {
  return {.tenant = who.tenant, .agent = who.agent};
}

std::int64_t count_prompt_tokens(ServingContext& ctx, const ChatRequest& chat, const RequestIdentity& who) {
  return static_cast<std::int64_t>(build_prompt(ctx, chat, turn_owner(who), SIZE_MAX).tokens.size());
}

PreparedChat prepare_chat(ServingContext& ctx, const ChatRequest& chat, const RequestIdentity& who,
                          Dialect dialect) {
  PreparedChat p;
  const std::int64_t context = ctx.engine.max_context();
  // A prompt of `context` tokens already leaves no room: encoding stops past it.
  BuiltPrompt prompt =
      build_prompt(ctx, chat, turn_owner(who), static_cast<std::size_t>(std::max<std::int64_t>(context, 0)));
  PhaseClock clock;  // the rest of prepare: setup_ms
  p.job.prepare.build = prompt.timing;
  p.prompt_tokens = static_cast<std::int64_t>(prompt.tokens.size());
  const std::int64_t room = context - p.prompt_tokens;
  std::int64_t max_tokens = chat.max_tokens;
  if (max_tokens == 0 && dialect == Dialect::Anthropic) {
    p.prewarm_only = true;
    max_tokens = 1;
  } else if (max_tokens == 0) {
    max_tokens = room;
  }
  if (room < 1)
    throw Error(ErrorKind::InvalidArgument,
                "input length and `max_tokens` exceed context limit: " + std::to_string(p.prompt_tokens) + " + " +
                    std::to_string(std::max<std::int64_t>(chat.max_tokens, 1)) + " > " + std::to_string(context) +
                    ", decrease input length or `max_tokens` and try again" +
                    ctx.engine.context_limit_note());
  max_tokens = std::min(max_tokens, room);  // clamp to the remaining context (api-notes §1.2)

  GenerateRequest& r = p.job.request;
  r.prompt = std::move(prompt.tokens);
  r.sampling = sampling_params(chat.sampling);
  r.stop_token_ids = ctx.stop_token_ids;
  r.max_tokens = static_cast<std::int32_t>(max_tokens);
  r.n_logprobs = chat.top_logprobs;
  p.job.stop_sequences = chat.stop_sequences;
  const ToolCallFormat model_format = ctx.prompts.tool_call_format();
  const ToolCallFormat format =
      chat.tool_choice.type == ToolChoiceType::None || chat.tools.empty() ? ToolCallFormat::None : model_format;
  p.job.parser = make_model_output_parser(dialect, model_format, chat, ctx.prompts.template_uses_think_tags(),
                                          prompt.starts_in_thinking);
  // Markers that are special tokens must reach the parser (harmony's channels: every reply).
  p.job.keep_special_tokens = format == ToolCallFormat::Llama3Json || format == ToolCallFormat::Mistral ||
                              model_format == ToolCallFormat::Harmony;
  if (ctx.constraint_vocab && format != ToolCallFormat::None) {
    auto constraint = make_forced_call_constraint(chat, format, ctx.constraint_vocab, r.max_tokens);
    if (constraint && !p.prewarm_only) check_forced_call_budget(*constraint, chat, r.max_tokens);
    r.constraint = std::move(constraint);
  }
  const PromptBuilder* prompts = &ctx.prompts;
  p.job.on_complete = [prompts, owner = turn_owner(who), prompt_text = std::move(prompt.text)](
                          const std::vector<OutputBlock>& blocks, const std::string& raw,
                          std::span<const std::int32_t> prompt_ids, std::span<const std::int32_t> generated_ids) {
    prompts->remember_assistant_output(owner, assistant_turn(blocks), raw, prompt_text, prompt_ids, generated_ids);
  };
  p.job.ping_interval = std::chrono::milliseconds(ctx.options.ping_interval_ms);
  p.job.on_finish = record_turn_for(ctx, who);
  p.job.prepare_stats = &ctx.prepare;
  p.job.prepare.setup_ms = clock.lap_ms();
  return p;
}

std::function<void(const ReplyFinish&)> record_turn_for(ServingContext& ctx, const RequestIdentity& who) {
  return [history = &ctx.history, ttft = &ctx.ttft, tenant = who.tenant, agent = who.agent](const ReplyFinish& f) {
    if (f.reason == StopReason::Cancelled || f.reason == StopReason::Error) return;
    if (f.usage.output_tokens > 0) ttft->observe(f.timing.ttft_ms);
    if (agent.empty()) return;
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    history->record(tenant, agent,
                    {.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now).count(),
                     .ttft_ms = f.timing.ttft_ms,
                     .prompt_tokens = f.usage.prompt_tokens,
                     .cached_tokens = f.usage.cached_tokens,
                     .output_tokens = f.usage.output_tokens});
  };
}

void log_request(const std::string& route, const std::string& agent, const ReplyFinish& f) {
  const double prefill_tps = f.timing.ttft_ms > 0 ? 1000.0 * static_cast<double>(f.usage.uncached_tokens()) / f.timing.ttft_ms : 0.0;
  const double decode_tps =
      f.timing.decode_ms > 0 ? 1000.0 * static_cast<double>(std::max<std::int64_t>(f.usage.output_tokens - 1, 0)) / f.timing.decode_ms : 0.0;
  log_info("{} agent={} prompt_tokens={} cached_tokens={} prepare_ms={:.1f} ({}) prefill_tok_s={:.1f} ttft_ms={:.1f} "
           "output_tokens={} decode_tok_s={:.1f} finish={}",
           route, agent.empty() ? "-" : agent, f.usage.prompt_tokens, f.usage.cached_tokens, f.timing.prepare_ms,
           format_prepare_phases(f.timing.prepare), prefill_tps, f.timing.ttft_ms, f.usage.output_tokens, decode_tps, reason_name(f.reason));
}

}  // namespace akv
