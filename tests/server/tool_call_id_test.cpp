// Tool-call ids in each dialect's form: Anthropic clients expect "toolu_...", OpenAI clients
// "call_...". The parser is the one prepare_chat gives a chat reply.
#include <gtest/gtest.h>

#include <string>

#include "server/anthropic_response.h"
#include "server/chat_generation.h"
#include "server/openai_response.h"

namespace akv {
namespace {

CollectingSink reply_with_a_call(Dialect dialect) {
  auto parser = make_chat_output_parser(dialect, {.format = ToolCallFormat::Hermes});
  CollectingSink sink;
  EXPECT_TRUE(parser->feed(
      "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>",
      sink));
  EXPECT_TRUE(parser->finish(sink));
  sink.finish({.reason = StopReason::ToolUse});
  return sink;
}

bool has_id_form(const std::string& id, const std::string& prefix) {
  if (!id.starts_with(prefix) || id.size() < prefix.size() + 20) return false;
  for (char c : id.substr(prefix.size()))
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  return true;
}

TEST(ToolCallId, AnthropicRepliesUseToolu) {
  const CollectingSink sink = reply_with_a_call(Dialect::Anthropic);
  ASSERT_EQ(sink.blocks().size(), 1u);
  EXPECT_TRUE(has_id_form(sink.blocks()[0].id, "toolu_01")) << sink.blocks()[0].id;
  const auto message = anthropic_message("msg_1", "m", sink);
  EXPECT_EQ(message["content"][0]["type"], "tool_use");
  EXPECT_TRUE(has_id_form(message["content"][0]["id"].get<std::string>(), "toolu_"))
      << message.dump();
}

TEST(ToolCallId, OpenAiRepliesUseCall) {
  const CollectingSink sink = reply_with_a_call(Dialect::OpenAI);
  ASSERT_EQ(sink.blocks().size(), 1u);
  EXPECT_TRUE(has_id_form(sink.blocks()[0].id, "call_")) << sink.blocks()[0].id;
  const auto completion = openai_chat_completion("chatcmpl-1", "m", 0, sink);
  const auto& call = completion["choices"][0]["message"]["tool_calls"][0];
  EXPECT_TRUE(has_id_form(call["id"].get<std::string>(), "call_")) << completion.dump();
}

TEST(ToolCallId, IdsAreFresh) {
  EXPECT_NE(new_tool_call_id(Dialect::Anthropic), new_tool_call_id(Dialect::Anthropic));
}

}  // namespace
}  // namespace akv
