// The families whose format is not JSON calls, through the server's output pipeline: GPT-OSS
// harmony (analysis -> Anthropic thinking blocks / OpenAI reasoning_content, commentary calls
// -> tool_use streamed as input_json_delta, final -> text) and Qwen3-Coder XML calls, fed token
// by token as the driver does, into the dialects' SSE writers. Also the request fields that set
// the reasoning effort and carry reasoning back.
#include <gtest/gtest.h>

#include "server/anthropic_request.h"
#include "server/anthropic_response.h"
#include "server/chat_generation.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace akv {
namespace {

using json = nlohmann::ordered_json;

struct Block {
  std::string type;
  std::string content;  // text, thinking, or the joined partial_json
  std::string name;
  int n_deltas = 0;
};

// Streams `output` in 3-byte pieces through the model's parser into an Anthropic SSE writer.
std::vector<Block> anthropic_stream(ToolCallFormat format, const ChatRequest& chat, std::string_view output,
                                    bool* saw_tool_call) {
  std::string wire;
  AnthropicSseWriter w("msg_1", "m", [&wire](std::string_view s) {
    wire += s;
    return true;
  });
  auto parser = make_model_output_parser(Dialect::Anthropic, format, chat, false, false);
  w.start({.prompt_tokens = 10});
  for (std::size_t i = 0; i < output.size(); i += 3) EXPECT_TRUE(parser->feed(output.substr(i, 3), w));
  EXPECT_TRUE(parser->finish(w));
  *saw_tool_call = parser->saw_tool_call();
  w.finish({.reason = *saw_tool_call ? StopReason::ToolUse : StopReason::EndTurn});

  std::vector<Block> blocks;
  for (std::size_t pos = 0; pos < wire.size();) {
    const std::size_t end = wire.find("\n\n", pos);
    const std::string ev = wire.substr(pos, end - pos);
    pos = end + 2;
    const json data = json::parse(ev.substr(ev.find("\ndata: ") + 7));
    if (data["type"] == "content_block_start") {
      EXPECT_EQ(data["index"], blocks.size());
      blocks.push_back({.type = data["content_block"]["type"], .content = "", .name = data["content_block"].value("name", ""), .n_deltas = 0});
    } else if (data["type"] == "content_block_delta") {
      const json& d = data["delta"];
      const std::string t = d["type"];
      if (t == "signature_delta") continue;
      ++blocks.back().n_deltas;
      if (t == "thinking_delta") blocks.back().content += d["thinking"].get<std::string>();
      if (t == "text_delta") blocks.back().content += d["text"].get<std::string>();
      if (t == "input_json_delta") blocks.back().content += d["partial_json"].get<std::string>();
      EXPECT_EQ(t, blocks.back().type == "tool_use" ? "input_json_delta" : blocks.back().type + "_delta");
    }
  }
  return blocks;
}

ChatRequest with_tool(const std::string& name, const std::string& schema) {
  ChatRequest r;
  r.tools.push_back({.name = name, .description = "", .input_schema = json::parse(schema)});
  return r;
}

TEST(HarmonyStream, ThinkingBlockThenToolUseStreamed) {
  const ChatRequest chat = with_tool("Bash", R"({"type": "object", "properties": {"command": {"type": "string"}}})");
  bool tool_use = false;
  const auto blocks = anthropic_stream(ToolCallFormat::Harmony, chat,
                                       "<|channel|>analysis<|message|>List the directory first.<|end|><|start|>assistant"
                                       "<|channel|>commentary to=functions.Bash <|constrain|>json<|message|>"
                                       "{\"command\":\"ls -la /tmp\"}",
                                       &tool_use);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].type, "thinking");
  EXPECT_EQ(blocks[0].content, "List the directory first.");
  EXPECT_GT(blocks[0].n_deltas, 3);
  EXPECT_EQ(blocks[1].type, "tool_use");
  EXPECT_EQ(blocks[1].name, "Bash");
  EXPECT_EQ(blocks[1].content, "{\"command\":\"ls -la /tmp\"}");
  EXPECT_GT(blocks[1].n_deltas, 3);
  EXPECT_TRUE(tool_use);
}

TEST(HarmonyStream, FinalAnswerIsTextAndReasoningGoesToReasoningContent) {
  bool tool_use = true;
  const auto blocks = anthropic_stream(ToolCallFormat::Harmony, ChatRequest{},
                                       "<|channel|>analysis<|message|>Greet.<|end|><|start|>assistant<|channel|>final"
                                       "<|message|>Hello!",
                                       &tool_use);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[1].type, "text");
  EXPECT_EQ(blocks[1].content, "Hello!");
  EXPECT_FALSE(tool_use);

  std::string wire;
  OpenAiChunkWriter w("chatcmpl-1", "m", 0, false, [&wire](std::string_view s) {
    wire += s;
    return true;
  });
  auto parser = make_model_output_parser(Dialect::OpenAI, ToolCallFormat::Harmony, ChatRequest{}, false, false);
  w.start({});
  parser->feed("<|channel|>analysis<|message|>Greet.<|end|><|start|>assistant<|channel|>final<|message|>Hi", w);
  parser->finish(w);
  w.finish({});
  EXPECT_NE(wire.find("\"reasoning_content\":\"Greet.\""), std::string::npos) << wire;
  EXPECT_NE(wire.find("\"content\":\"Hi\""), std::string::npos) << wire;
}

TEST(QwenXmlStream, TypedArgumentsStreamAsInputJson) {
  const ChatRequest chat =
      with_tool("get_weather", R"({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}})");
  bool tool_use = false;
  const auto blocks = anthropic_stream(ToolCallFormat::QwenXml, chat,
                                       "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n"
                                       "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
                                       &tool_use);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].content, "Checking.");
  EXPECT_EQ(blocks[1].type, "tool_use");
  EXPECT_EQ(json::parse(blocks[1].content), json::parse(R"({"city": "New York", "days": 3})"));
  EXPECT_TRUE(tool_use);
}

TEST(ReasoningEffort, FromEitherDialect) {
  auto anthropic = [](const json& extra) {
    json body = {{"model", "m"}, {"max_tokens", 10}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    return parse_anthropic_messages(body).reasoning_effort;
  };
  EXPECT_EQ(anthropic({{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}}), "low");
  EXPECT_EQ(anthropic({{"thinking", {{"type", "enabled"}, {"budget_tokens", 8000}}}}), "medium");
  EXPECT_EQ(anthropic({{"thinking", {{"type", "enabled"}, {"budget_tokens", 31999}}}}), "high");
  EXPECT_EQ(anthropic({{"thinking", {{"type", "adaptive"}, {"display", "omitted"}}}, {"output_config", {{"effort", "high"}}}}),
            "high");
  EXPECT_EQ(anthropic({{"thinking", {{"type", "disabled"}}}}), "low");
  EXPECT_EQ(anthropic({{"thinking", {{"type", "enabled"}, {"budget_tokens", "lots"}}}}), "");  // never a 400
  EXPECT_EQ(anthropic(json::object()), "");

  auto openai = [](const json& extra) {
    json body = {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    return parse_openai_chat(body).chat;
  };
  EXPECT_EQ(openai({{"reasoning_effort", "minimal"}}).reasoning_effort, "low");
  EXPECT_EQ(openai({{"reasoning_effort", "high"}}).reasoning_effort, "high");
  EXPECT_EQ(openai({{"reasoning_effort", "turbo"}}).reasoning_effort, "");
}

TEST(ReasoningContent, ComesBackAsThinking) {
  const json body = {{"model", "m"},
                     {"messages", json::array({{{"role", "user"}, {"content", "hi"}},
                                               {{"role", "assistant"}, {"content", "Hello"}, {"reasoning_content", "Greet."}},
                                               {{"role", "user"}, {"content", "again"}}})}};
  const ChatRequest r = parse_openai_chat(body).chat;
  ASSERT_EQ(r.messages[1].blocks.size(), 2u);
  EXPECT_EQ(r.messages[1].blocks[0].type, BlockType::Thinking);
  EXPECT_EQ(r.messages[1].blocks[0].text, "Greet.");
}

}  // namespace
}  // namespace akv
