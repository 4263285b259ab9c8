#include "server/openai_request.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace akv {
namespace {

using json = nlohmann::ordered_json;

TEST(OpenAiRequest, ToolCallsAndToolResults) {
  const OpenAiChatRequest r = parse_openai_chat(json::parse(R"({
    "model":"m","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":9,
    "tools":[{"type":"function","function":{"name":"get","parameters":{"type":"object"}}}],
    "tool_choice":"required",
    "messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]},
                {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get","arguments":"{\"b\":1,\"a\":2}"}}]},
                {"role":"tool","tool_call_id":"call_1","content":"42"}]})"));
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.chat.stream);
  EXPECT_EQ(r.chat.max_tokens, 9);
  EXPECT_EQ(r.chat.tool_choice.type, ToolChoiceType::Any);
  ASSERT_EQ(r.chat.messages.size(), 3u);  // the leading developer message is the system prompt
  ASSERT_EQ(r.chat.system.size(), 1u);
  EXPECT_EQ(r.chat.system[0].text, "be brief");
  const ContentBlock& call = r.chat.messages[1].blocks.at(0);
  EXPECT_EQ(call.type, BlockType::ToolUse);
  EXPECT_EQ(call.input.dump(), R"({"b":1,"a":2})");  // key order kept
  EXPECT_EQ(r.chat.messages[2].blocks.at(0).tool_use_id, "call_1");
}

// Leading system/developer messages are the system prompt (the template's system turn, shared with
// an Anthropic request's `system`); a later one stays a mid-conversation system message; system
// messages alone are the turn to answer.
// Left-out sampling fields take the server's defaults (the model's generation_config.json), in
// chat and completion requests alike; the request's own values win.
TEST(OpenAiRequest, LeftOutSamplingFieldsTakeTheServersDefaults) {
  SamplingOptions model;
  model.temperature = 0.7;
  model.top_p = 0.8;
  model.top_k = 20;
  model.min_p = 0.01;
  model.repetition_penalty = 1.05;
  const json chat = json::parse(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"top_p":0.5})");
  EXPECT_EQ(parse_openai_chat(chat).chat.sampling.temperature, 1.0);  // the API's defaults
  EXPECT_EQ(parse_openai_chat(chat).chat.sampling.repetition_penalty, 1.0);
  const SamplingOptions got = parse_openai_chat(chat, model).chat.sampling;
  EXPECT_EQ(got.temperature, 0.7);
  EXPECT_EQ(got.top_p, 0.5);
  EXPECT_EQ(got.top_k, 20);
  EXPECT_EQ(got.min_p, 0.01);
  EXPECT_EQ(got.repetition_penalty, 1.05);
  EXPECT_EQ(got.presence_penalty, 0.0);
  const json completion = json::parse(R"({"model":"m","prompt":"hi","temperature":0})");
  const SamplingOptions c = parse_openai_completion(completion, model).options.sampling;
  EXPECT_EQ(c.temperature, 0.0);
  EXPECT_EQ(c.top_k, 20);
}

TEST(OpenAiRequest, LeadingSystemMessagesAreTheSystemPrompt) {
  const OpenAiChatRequest r = parse_openai_chat(json::parse(R"({"model":"m","messages":[
    {"role":"system","content":"one"},{"role":"developer","content":[{"type":"text","text":"two"}]},
    {"role":"user","content":"hi"},{"role":"system","content":"later"}]})"));
  ASSERT_EQ(r.chat.system.size(), 2u);
  EXPECT_EQ(r.chat.system[0].text, "one");
  EXPECT_EQ(r.chat.system[1].text, "two");
  ASSERT_EQ(r.chat.messages.size(), 2u);
  EXPECT_EQ(r.chat.messages[0].role, ChatRole::User);
  EXPECT_EQ(r.chat.messages[1].role, ChatRole::System);
  const OpenAiChatRequest alone =
      parse_openai_chat(json::parse(R"({"model":"m","messages":[{"role":"system","content":"hello"}]})"));
  EXPECT_TRUE(alone.chat.system.empty());
  ASSERT_EQ(alone.chat.messages.size(), 1u);
  EXPECT_EQ(alone.chat.messages[0].blocks.at(0).text, "hello");
}

TEST(OpenAiRequest, BadArgumentsAndRolesAreNamed) {
  auto error_of = [](const char* body) -> std::string {
    try {
      parse_openai_chat(json::parse(body));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(R"({"model":"m"})").find("messages: Field required"), std::string::npos);
  EXPECT_NE(error_of(R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})").find("messages.0.role"), std::string::npos);
  EXPECT_NE(error_of(R"({"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"not json"}}]}]})")
                .find("arguments"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":3})").find("n:"), std::string::npos);
}

TEST(OpenAiRequest, CompletionPromptForms) {
  EXPECT_EQ(parse_openai_completion(json::parse(R"({"model":"m","prompt":"Once"})")).prompt_text, "Once");
  const auto ids = parse_openai_completion(json::parse(R"({"model":"m","prompt":[1,2,3],"max_tokens":4})"));
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(ids.options.max_tokens, 4);
}

}  // namespace
}  // namespace akv
