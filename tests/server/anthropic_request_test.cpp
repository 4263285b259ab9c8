#include "server/anthropic_request.h"

#include <gtest/gtest.h>

#include <fstream>

#include "base/error.h"
#include "server/api_error.h"

namespace akv {
namespace {

using json = nlohmann::ordered_json;

std::string error_of(const json& body) {
  try {
    parse_anthropic_messages(body);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    return e.what();
  }
  return "";
}

TEST(AnthropicRequest, ParsesTheRealClaudeCodeRequest) {
  std::ifstream in(std::string(AGENTKV_TESTDATA) + "/../docs/claude-code-request-sample.json");
  ASSERT_TRUE(in) << "claude-code-request-sample.json";
  const json body = json::parse(in);
  const ChatRequest r = parse_anthropic_messages(body);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.max_tokens, body["max_tokens"].get<std::int64_t>());
  EXPECT_EQ(r.system.size(), body["system"].size());
  EXPECT_EQ(r.messages.size(), body["messages"].size());
  // The deferred-loading placeholder tool is never shown to the model.
  for (const ToolSpec& t : r.tools) EXPECT_NE(t.name, "DeferredToolPlaceholder");
  std::size_t deferred = 0;
  for (const auto& t : body["tools"]) deferred += t.value("defer_loading", false) ? 1 : 0;
  EXPECT_EQ(r.tools.size() + deferred, body["tools"].size());
  EXPECT_TRUE(r.system.back().cache_breakpoint);
}

// Left-out sampling fields take the server's defaults (the model's generation_config.json);
// the request's own values win; min_p and the penalties, which the Messages API lacks, always
// come from the defaults.
TEST(AnthropicRequest, LeftOutSamplingFieldsTakeTheServersDefaults) {
  const json bare = json::parse(R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]})");
  const SamplingOptions api = parse_anthropic_messages(bare).sampling;
  EXPECT_EQ(api.temperature, 1.0);
  EXPECT_EQ(api.top_p, 1.0);
  EXPECT_EQ(api.top_k, 0);
  SamplingOptions model;
  model.temperature = 0.6;
  model.top_p = 0.95;
  model.top_k = 20;
  model.min_p = 0.05;
  model.repetition_penalty = 1.05;
  const SamplingOptions got = parse_anthropic_messages(bare, model).sampling;
  EXPECT_EQ(got.temperature, 0.6);
  EXPECT_EQ(got.top_p, 0.95);
  EXPECT_EQ(got.top_k, 20);
  EXPECT_EQ(got.min_p, 0.05);
  EXPECT_EQ(got.repetition_penalty, 1.05);
  json set = bare;
  set["temperature"] = 0.0;
  set["top_k"] = 5;
  const SamplingOptions mixed = parse_anthropic_messages(set, model).sampling;
  EXPECT_EQ(mixed.temperature, 0.0);
  EXPECT_EQ(mixed.top_k, 5);
  EXPECT_EQ(mixed.top_p, 0.95);
}

TEST(AnthropicRequest, StringAndOneBlockContentAreTheSame) {
  const ChatRequest a = parse_anthropic_messages(
      json::parse(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})"));
  const ChatRequest b = parse_anthropic_messages(json::parse(
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]})"));
  ASSERT_EQ(a.messages[0].blocks.size(), 1u);
  ASSERT_EQ(b.messages[0].blocks.size(), 1u);
  EXPECT_EQ(a.messages[0].blocks[0].text, b.messages[0].blocks[0].text);
}

TEST(AnthropicRequest, AcceptsAndIgnoresUnknownFieldsBlocksAndThinking) {
  const ChatRequest r = parse_anthropic_messages(json::parse(R"({
    "model":"claude-opus-5-5","max_tokens":0,"future_field":{"x":1},
    "thinking":{"type":"adaptive","display":"omitted"},"output_config":{"effort":"high"},
    "context_management":{"edits":[]},"metadata":{"user_id":"{\"session_id\":\"abc\"}"},
    "messages":[
      {"role":"user","content":[{"type":"text","text":"q"},{"type":"search_result","x":1}]},
      {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"not-checked"},
                                     {"type":"redacted_thinking","data":"zzz"},
                                     {"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"a.txt"}],"is_error":false,"cache_control":{"type":"ephemeral"}}]},
      {"role":"system","content":"reminder"}]})"));
  EXPECT_EQ(r.max_tokens, 0);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].blocks.size(), 1u);
  ASSERT_EQ(r.messages[1].blocks.size(), 2u);
  EXPECT_EQ(r.messages[1].blocks[1].input["command"], "ls");
  EXPECT_EQ(r.messages[2].blocks[0].text, "a.txt");
  EXPECT_TRUE(r.messages[2].blocks[0].cache_breakpoint);
  EXPECT_EQ(r.messages[3].role, ChatRole::System);
}

TEST(AnthropicRequest, MissingOrMistypedFieldsNameTheirPath) {
  EXPECT_NE(error_of(json::parse(R"({"model":"m","messages":[{"role":"user","content":"x"}]})")).find("max_tokens: Field required"), std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"max_tokens":1,"messages":[{"role":"user","content":"x"}]})")).find("model: Field required"), std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"x"}]})")).find("max_tokens"), std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"model":"m","max_tokens":1,"messages":[{"role":"robot","content":"x"}]})"))
                .find("messages.0.role"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text"}]}]})"))
                .find("messages.0.content.0.text: Field required"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"tool","name":"X"}})"))
                .find("tool_choice"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"temperature":"hot"})")).find("temperature"),
            std::string::npos);
}

// The Anthropic SDK's tool runner threads by default: a turn carries only the new messages and
// `thread: {type: "continue", previous_message_id}`. Answering that from the new turn alone was a
// made-up reply; the refusal carries the details on which the SDK resends the whole conversation.
TEST(AnthropicRequest, AThreadIsRefusedWithTheDetailsTheSdkResendsOn) {
  json body = json::parse(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})");
  body["thread"] = json::parse(R"({"type":"continue","previous_message_id":"msg_01"})");
  try {
    parse_anthropic_messages(body);
    FAIL() << "a thread was accepted";
  } catch (const DetailedRequestError& e) {
    const ApiError err = api_error_from(e);
    EXPECT_EQ(err.status, 400);
    const json out = error_body(err, Dialect::Anthropic, "req_1");
    EXPECT_EQ(out["error"]["type"], "invalid_request_error");
    EXPECT_EQ(out["error"]["details"]["error_code"], "thread_unsupported_request");
    EXPECT_EQ(out["error"]["details"]["unsupported"], json::array({"thread"}));
    EXPECT_FALSE(error_body(api_error(400, "x"), Dialect::Anthropic, "r")["error"].contains("details"));
  }
  body["thread"] = nullptr;
  EXPECT_EQ(parse_anthropic_messages(body).max_tokens, 5);
}

}  // namespace
}  // namespace akv
