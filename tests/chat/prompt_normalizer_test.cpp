// Prompt normalisation: billing header, system-role folding, merging, thinking, and the
// cache-stability promises of architecture §6 checked through real tokens.
#include <gtest/gtest.h>

#include "chat/prompt_builder.h"
#include "chat/prompt_normalizer.h"
#include "chat_testdata.h"
#include "tokenizer/tokenizer.h"

namespace akv {
namespace {

ContentBlock text(std::string t) {
  return {.type = BlockType::Text, .text = std::move(t)};
}

ChatMessage msg(ChatRole role, std::vector<ContentBlock> blocks) {
  ChatMessage m;
  m.role = role;
  m.blocks = std::move(blocks);
  return m;
}

ChatMessage user_string(std::string t) {
  ChatMessage m = msg(ChatRole::User, {text(std::move(t))});
  m.content_was_string = true;
  return m;
}

const Tokenizer& qwen3_tokenizer() {
  static const Tokenizer tok =
      Tokenizer::load_files_or_throw(test::testdata_file("tokenizers/qwen3/tokenizer.json"),
                                     test::testdata_file("tokenizers/qwen3/tokenizer_config.json"));
  return tok;
}

TEST(PromptNormalizer, DropsLeadingBillingHeaderBlock) {
  ChatRequest r;
  r.system = {text("x-anthropic-billing-header: cc_version=2.1.332; cch=abc123;"),
              text("You are Claude Code."), text("x-anthropic-billing-header: not leading")};
  r.messages = {user_string("hi")};
  const ChatRequest n = normalize_prompt(r);
  ASSERT_EQ(n.system.size(), 2u);
  EXPECT_EQ(n.system[0].text, "You are Claude Code.");
  EXPECT_EQ(n.system[1].text, "x-anthropic-billing-header: not leading");  // only leading blocks go

  // Two requests differing only in the nonce tokenize identically.
  ChatRequest r2 = r;
  r2.system[0].text = "x-anthropic-billing-header: cc_version=2.1.332; cch=zzz999;";
  PromptBuilder builder(qwen3_tokenizer());
  EXPECT_EQ(builder.build(r).tokens, builder.build(r2).tokens);
}

TEST(PromptNormalizer, FoldsSystemMessageIntoPrecedingUserTurn) {
  ChatRequest r;
  r.messages = {msg(ChatRole::User, {text("note"), text("prompt")}),
                msg(ChatRole::System, {text("# Environment")})};
  const ChatRequest n = normalize_prompt(r);
  ASSERT_EQ(n.messages.size(), 1u);
  EXPECT_EQ(n.messages[0].role, ChatRole::User);
  ASSERT_EQ(n.messages[0].blocks.size(), 3u);
  EXPECT_EQ(n.messages[0].blocks[2].text, "<system-reminder>\n# Environment\n</system-reminder>");
  EXPECT_EQ(join_text_blocks(n.messages[0].blocks),
            "note\n\nprompt\n\n<system-reminder>\n# Environment\n</system-reminder>");
}

TEST(PromptNormalizer, SystemMessageWithoutUserTurnBecomesOne) {
  ChatRequest r;
  r.messages = {msg(ChatRole::System, {text("first")}), user_string("hi"),
                msg(ChatRole::Assistant, {text("hello")}), msg(ChatRole::System, {text("later")}),
                user_string("next")};
  const ChatRequest n = normalize_prompt(r);
  ASSERT_EQ(n.messages.size(), 3u);
  EXPECT_EQ(join_text_blocks(n.messages[0].blocks),
            "<system-reminder>\nfirst\n</system-reminder>\n\nhi");
  EXPECT_EQ(n.messages[1].role, ChatRole::Assistant);
  EXPECT_EQ(join_text_blocks(n.messages[2].blocks),
            "<system-reminder>\nlater\n</system-reminder>\n\nnext");
  // Deterministic: normalising again (or the already normalised form) changes nothing.
  const ChatRequest again = normalize_prompt(n);
  ASSERT_EQ(again.messages.size(), n.messages.size());
  for (std::size_t i = 0; i < n.messages.size(); ++i)
    EXPECT_EQ(join_text_blocks(again.messages[i].blocks), join_text_blocks(n.messages[i].blocks));
}

TEST(PromptNormalizer, MergesConsecutiveSameRoleTurnsAndDropsThinking) {
  ChatRequest r;
  r.messages = {user_string("a"),
                user_string("b"),
                msg(ChatRole::Assistant, {{.type = BlockType::Thinking, .text = "hmm"}, text("x")}),
                msg(ChatRole::Assistant, {{.type = BlockType::Thinking, .text = "only thinking"}}),
                msg(ChatRole::Assistant, {text("y")}),
                user_string("c")};
  const ChatRequest n = normalize_prompt(r);
  ASSERT_EQ(n.messages.size(), 3u);
  EXPECT_EQ(join_text_blocks(n.messages[0].blocks), "a\n\nb");
  ASSERT_EQ(n.messages[1].blocks.size(), 2u);
  EXPECT_EQ(join_text_blocks(n.messages[1].blocks), "x\n\ny");
  EXPECT_EQ(n.messages[2].role, ChatRole::User);
}

TEST(PromptNormalizer, ToolRoleBecomesUserToolResults) {
  ChatRequest r;
  ContentBlock call{.type = BlockType::ToolUse, .tool_use_id = "c1", .tool_name = "Bash"};
  call.input = {{"command", "ls"}};
  r.messages = {
      user_string("list"), msg(ChatRole::Assistant, {call}),
      msg(ChatRole::Tool, {{.type = BlockType::ToolResult, .text = "a.txt", .tool_use_id = "c1"}}),
      user_string("thanks")};
  const ChatRequest n = normalize_prompt(r);
  ASSERT_EQ(n.messages.size(), 3u);
  EXPECT_EQ(n.messages[2].role, ChatRole::User);
  ASSERT_EQ(n.messages[2].blocks.size(), 2u);
  EXPECT_EQ(n.messages[2].blocks[0].type, BlockType::ToolResult);
}

TEST(PromptNormalizer, StringAndOneTextBlockGiveIdenticalTokens) {
  PromptBuilder builder(qwen3_tokenizer());
  ChatRequest as_string, as_block;
  as_string.messages = {user_string("hi"), msg(ChatRole::System, {text("env")})};
  ChatMessage sys_string = msg(ChatRole::System, {text("env")});
  sys_string.content_was_string = true;
  as_block.messages = {msg(ChatRole::User, {text("hi")}), sys_string};
  as_string.system = {text("sys")};
  as_block.system = {text("sys")};
  const auto a = builder.build(as_string);
  const auto b = builder.build(as_block);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_FALSE(a.tokens.empty());
}

TEST(PromptNormalizer, SystemFoldingKeepsTurnOnePrefixOnTurnTwo) {
  // Claude Code: turn 1 = [user, system]; turn 2 = [user, system, assistant(tool_use),
  // user(tool_result)].
  PromptBuilder builder(qwen3_tokenizer());
  ChatRequest turn1;
  turn1.system = {text("You are Claude Code.")};
  turn1.thinking_enabled = true;
  turn1.messages = {msg(ChatRole::User,
                        {text("<system-reminder>\nnote\n</system-reminder>"), text("list files")}),
                    msg(ChatRole::System, {text("# Environment\ncwd: /tmp")})};
  const TurnOwner owner{.tenant = "t", .agent = "session-1"};
  const BuiltPrompt p1 = builder.build(turn1, owner);

  ContentBlock call{.type = BlockType::ToolUse, .tool_use_id = "toolu_1", .tool_name = "Bash"};
  call.input = {{"command", "ls"}};
  ChatMessage assistant = msg(ChatRole::Assistant, {call});
  const std::string raw =
      "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>";
  builder.remember_assistant_output(owner, assistant, raw);

  ChatRequest turn2 = turn1;
  turn2.messages.push_back(assistant);
  turn2.messages.push_back(
      msg(ChatRole::User,
          {{.type = BlockType::ToolResult, .text = "a.txt", .tool_use_id = "toolu_1"}}));
  const BuiltPrompt p2 = builder.build(turn2, owner);
  ASSERT_TRUE(p2.text.starts_with(p1.text + raw)) << p1.text << "\n----\n" << p2.text;
  ASSERT_GE(p2.tokens.size(), p1.tokens.size());
  EXPECT_TRUE(std::equal(p1.tokens.begin(), p1.tokens.end(), p2.tokens.begin()));
}

}  // namespace
}  // namespace akv
