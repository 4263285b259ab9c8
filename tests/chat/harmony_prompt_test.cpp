// GPT-OSS end to end on the prompt side, with its tokenizer (o200k_harmony) and template: the
// reasoning effort reaches the system message; an earlier turn re-renders so that the next
// prompt's ids start with the ids the KV cache holds (prompt + generated) across tool calls,
// while the template drops the analysis of a turn that a final answer follows; a forced call
// is generated in the harmony form the output parser reads.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/mapped_file.h"
#include "chat/harmony_history.h"
#include "chat/harmony_parser.h"
#include "chat/prompt_builder.h"
#include "chat/tool_call_constraint.h"
#include "chat_testdata.h"
#include "parser_test_util.h"
#include "tokenizer/tokenizer.h"

namespace akv {
namespace {

using ojson = nlohmann::ordered_json;

const Tokenizer& gpt_oss_tokenizer() {
  static const Tokenizer tok = Tokenizer::load_files_or_throw(test::testdata_file("tokenizers/gpt-oss/tokenizer.json"),
                                                              test::testdata_file("tokenizers/gpt-oss/tokenizer_config.json"));
  return tok;
}

PromptBuilderOptions gpt_oss_options() {
  PromptBuilderOptions o;
  o.template_override =
      read_file_or_throw(test::testdata_file("chat-templates/templates/llama.cpp-2026/openai-gpt-oss-120b.jinja"));
  o.render.clock = test::pinned_clock;
  return o;
}

bool starts_with(const std::vector<std::int32_t>& ids, const std::vector<std::int32_t>& prefix) {
  return ids.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

class HarmonyPrompt : public ::testing::Test {
 protected:
  const Tokenizer& tok = gpt_oss_tokenizer();
  PromptBuilder builder{tok, gpt_oss_options()};
  const TurnOwner owner{.tenant = "t", .agent = "a"};

  static ChatRequest first_request() {
    ChatRequest r;
    r.tools.push_back({.name = "get_weather",
                       .description = "Weather of a city.",
                       .input_schema = ojson::parse(R"({"type": "object", "properties": {"city": {"type": "string"}}})")});
    r.messages.push_back({.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = "Weather in Rome?"}}});
    return r;
  }
  // The model's ids for `pieces`, each encoded on its own (a model need not write what encode() gives).
  std::vector<std::int32_t> generate(std::initializer_list<std::string_view> pieces) const {
    std::vector<std::int32_t> ids;
    for (auto p : pieces) {
      const auto e = tok.encode(p, false);
      ids.insert(ids.end(), e.begin(), e.end());
    }
    return ids;
  }
  // The turn as the client gets it (the parser's blocks), without thinking when it was omitted.
  static ChatMessage client_turn(const std::string& raw, bool with_thinking) {
    HarmonyParser parser({.make_call_id = [] { return std::string("toolu_1"); }});
    std::vector<OutputEvent> events = parser.feed(raw);
    for (auto& e : parser.finish()) events.push_back(e);
    ChatMessage m{.role = ChatRole::Assistant};
    for (const OutputEvent& e : events) {
      if (e.kind == OutputEvent::Kind::ThinkingDelta && with_thinking) m.blocks.push_back({.type = BlockType::Thinking, .text = e.text});
      if (e.kind == OutputEvent::Kind::TextDelta) m.blocks.push_back({.type = BlockType::Text, .text = e.text});
      if (e.kind == OutputEvent::Kind::ToolCallStart)
        m.blocks.push_back({.type = BlockType::ToolUse, .tool_use_id = e.id, .tool_name = e.name});
      if (e.kind == OutputEvent::Kind::ToolCallArgsDelta) m.blocks.back().text += e.text;
    }
    for (auto& b : m.blocks)
      if (b.type == BlockType::ToolUse) b.input = ojson::parse(std::exchange(b.text, ""));
    return m;
  }
  static void add_result(ChatRequest& r, const ChatMessage& turn, const std::string& result) {
    r.messages.push_back(turn);
    r.messages.push_back({.role = ChatRole::User,
                          .blocks = {{.type = BlockType::ToolResult, .text = result, .tool_use_id = "toolu_1"}}});
  }
};

constexpr std::string_view kCallRaw =
    "<|channel|>analysis<|message|>Need the weather tool.<|end|><|start|>assistant<|channel|>commentary "
    "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Rome\"}";

TEST_F(HarmonyPrompt, DetectedFromTheTemplate) {
  EXPECT_EQ(builder.tool_call_format(), ToolCallFormat::Harmony);
  for (const char* name : {"Qwen3-Coder", "Qwen3.5-4B", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"})
    EXPECT_EQ(detect_tool_call_format(read_file_or_throw(test::testdata_file(
                  std::string("chat-templates/templates/llama.cpp-2026/") + name + ".jinja"))),
              ToolCallFormat::QwenXml)
        << name;
  EXPECT_EQ(detect_tool_call_format(read_file_or_throw(
                test::testdata_file("chat-templates/templates/llama.cpp/Qwen-Qwen3-0.6B.jinja"))),
            ToolCallFormat::Hermes);
}

// <|end|> closes the analysis message: stopping there would end every reply after its reasoning.
TEST_F(HarmonyPrompt, ReplyEndsAtReturnOrCallNotAtEnd) {
  const auto channel = tok.find_token("<|channel|>");
  ASSERT_TRUE(channel && tok.is_special(*channel));
  const auto harmony = end_of_turn_tokens(/*harmony_vocabulary=*/true);
  auto has = [](const std::vector<std::string_view>& v, std::string_view t) {
    return std::find(v.begin(), v.end(), t) != v.end();
  };
  EXPECT_TRUE(has(harmony, "<|return|>"));
  EXPECT_TRUE(has(harmony, "<|call|>"));
  EXPECT_FALSE(has(harmony, "<|end|>"));
  for (auto t : {"<|return|>", "<|call|>"}) EXPECT_TRUE(tok.find_token(t).has_value()) << t;
  const auto others = end_of_turn_tokens(/*harmony_vocabulary=*/false);
  EXPECT_TRUE(has(others, "<|end|>"));  // Phi-3's end of turn
  EXPECT_FALSE(has(others, "<|call|>"));
}

TEST_F(HarmonyPrompt, ReasoningEffortReachesTheSystemMessage) {
  ChatRequest r = first_request();
  EXPECT_NE(builder.build(r).text.find("Reasoning: medium\n"), std::string::npos);
  r.reasoning_effort = "high";
  EXPECT_NE(builder.build(r).text.find("Reasoning: high\n"), std::string::npos);
  r.template_kwargs["reasoning_effort"] = "low";  // explicit template variables win
  EXPECT_NE(builder.build(r).text.find("Reasoning: low\n"), std::string::npos);
}

// Claude Code's case: thinking display omitted, so the client sends the call back without its
// reasoning; the server's remembered turn puts the analysis (kept across tool calls) and the
// model's own header and argument text back.
TEST_F(HarmonyPrompt, ToolCallTurnKeepsTheCachedPrefix) {
  const BuiltPrompt p1 = builder.build(first_request(), owner);
  ASSERT_TRUE(p1.text.ends_with("<|start|>assistant")) << p1.text;
  const std::string raw(kCallRaw);
  const auto generated = generate({"<|channel|>analysis<|message|>", "Need the weather", " tool.",
                                   "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
                                   "<|constrain|>json<|message|>",
                                   "{\"city\":\"Rome\"}"});
  ASSERT_EQ(tok.decode(generated, false), raw);
  const ChatMessage sent = client_turn(raw, /*with_thinking=*/false);
  ASSERT_EQ(sent.blocks.size(), 1u);

  ChatRequest r2 = first_request();
  add_result(r2, sent, "sunny");
  // Without the remembered turn the template writes the call its own way.
  const BuiltPrompt plain = builder.build(r2, owner);
  EXPECT_TRUE(plain.text.starts_with(p1.text + " to=functions.get_weather<|channel|>commentary json<|message|>"
                                               "{\"city\": \"Rome\"}<|call|>"))
      << plain.text;

  builder.remember_assistant_output(owner, sent, raw, p1.text, p1.tokens, generated);
  const BuiltPrompt p2 = builder.build(r2, owner);
  std::vector<std::int32_t> kv = p1.tokens;
  kv.insert(kv.end(), generated.begin(), generated.end());
  EXPECT_TRUE(starts_with(p2.tokens, kv));
  EXPECT_TRUE(p2.text.starts_with(p1.text + raw +
                                  "<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
                                  "\"sunny\"<|end|><|start|>assistant"))
      << p2.text;
  EXPECT_TRUE(p2.text.ends_with("<|start|>assistant"));
  EXPECT_EQ(tok.decode(p2.tokens, false), p2.text);
  EXPECT_EQ(builder.build(r2, owner).tokens, p2.tokens);  // count_tokens builds the same way

  // Turn 3: a second call chains on turn 2's prompt.
  const std::string raw2 =
      "<|channel|>analysis<|message|>Sunny. Check tomorrow too.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Milan\" }";
  const auto generated2 = generate({raw2});
  const ChatMessage sent2 = client_turn(raw2, /*with_thinking=*/false);
  builder.remember_assistant_output(owner, sent2, raw2, p2.text, p2.tokens, generated2);
  ChatRequest r3 = r2;
  add_result(r3, sent2, "rain");
  const BuiltPrompt p3 = builder.build(r3, owner);
  kv = p2.tokens;
  kv.insert(kv.end(), generated2.begin(), generated2.end());
  EXPECT_TRUE(starts_with(p3.tokens, kv));
  EXPECT_EQ(tok.decode(p3.tokens, false), p3.text);

  // Turn 4 follows a final answer: the template drops every earlier analysis, so the prompt is
  // the template's rendering (shared with the cache up to turn 1's prompt).
  const std::string raw3 = "<|channel|>analysis<|message|>Summarise.<|end|><|start|>assistant<|channel|>final<|message|>Sunny, then rain.";
  const ChatMessage sent3 = client_turn(raw3, /*with_thinking=*/false);
  builder.remember_assistant_output(owner, sent3, raw3, p3.text, p3.tokens, generate({raw3}));
  ChatRequest r4 = r3;
  r4.messages.push_back(sent3);
  r4.messages.push_back({.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = "And Paris?"}}});
  const BuiltPrompt p4 = builder.build(r4, owner);
  EXPECT_EQ(p4.text.find("<|channel|>analysis"), std::string::npos) << p4.text;
  EXPECT_NE(p4.text.find("<|start|>assistant<|channel|>final<|message|>Sunny, then rain.<|end|><|start|>user"),
            std::string::npos);
  EXPECT_EQ(p4.tokens, tok.encode(p4.text, false));
  EXPECT_TRUE(starts_with(p4.tokens, p1.tokens));
}

// A client that sends the reasoning back (thinking blocks, OpenAI reasoning_content) and no
// agent id: the template keeps it as the call's analysis, exactly as generated.
TEST_F(HarmonyPrompt, ReasoningSentBackRendersAsAnalysis) {
  const BuiltPrompt p1 = builder.build(first_request());
  ChatRequest r2 = first_request();
  add_result(r2, client_turn(std::string(kCallRaw), /*with_thinking=*/true), "sunny");
  const BuiltPrompt p2 = builder.build(r2);
  EXPECT_TRUE(p2.text.starts_with(p1.text + "<|channel|>analysis<|message|>Need the weather tool.<|end|>"
                                            "<|start|>assistant to=functions.get_weather"))
      << p2.text;
  // The analysis message's ids are the model's own (same encoding piecewise at special tokens).
  std::vector<std::int32_t> kv = p1.tokens;
  const auto analysis = tok.encode("<|channel|>analysis<|message|>Need the weather tool.<|end|>", false);
  kv.insert(kv.end(), analysis.begin(), analysis.end());
  EXPECT_TRUE(starts_with(p2.tokens, kv));
}

TEST_F(HarmonyPrompt, FinalAnswerWithoutAnalysisIsSpliced) {
  const BuiltPrompt p1 = builder.build(first_request(), owner);
  const std::string raw = "<|channel|>final<|message|>Sunny.";
  const auto generated = generate({"<|channel|>final<|message|>", "Sun", "ny."});
  const ChatMessage sent = client_turn(raw, false);
  builder.remember_assistant_output(owner, sent, raw, p1.text, p1.tokens, generated);
  ChatRequest r2 = first_request();
  r2.messages.push_back(sent);
  r2.messages.push_back({.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = "Thanks"}}});
  const BuiltPrompt p2 = builder.build(r2, owner);
  std::vector<std::int32_t> kv = p1.tokens;
  kv.insert(kv.end(), generated.begin(), generated.end());
  EXPECT_TRUE(starts_with(p2.tokens, kv));
  EXPECT_TRUE(p2.text.starts_with(p1.text + raw + "<|end|><|start|>user<|message|>Thanks<|end|>"));
}

TEST_F(HarmonyPrompt, HistoryFromRawTurn) {
  const auto turn = harmony_turn_from_raw(kCallRaw);
  ASSERT_TRUE(turn);
  ASSERT_EQ(turn->blocks.size(), 2u);
  EXPECT_EQ(turn->blocks[0].type, BlockType::Thinking);
  EXPECT_EQ(turn->blocks[1].tool_name, "get_weather");
  EXPECT_EQ(turn->blocks[1].input, ojson::parse("{\"city\":\"Rome\"}"));
  EXPECT_FALSE(harmony_turn_from_raw("plain text"));
  EXPECT_FALSE(harmony_turn_from_raw("<|channel|>commentary to=functions.f<|message|>{\"a\":"));
}

// tool_choice any: the grammar writes the harmony call after the prompt's "<|start|>assistant",
// ending with <|call|> (a stop token); the parser reads the text before it as the call.
TEST_F(HarmonyPrompt, ForcedCallGrammarWritesWhatTheParserReads) {
  auto vocab = std::make_shared<const ConstraintVocab>(tok);
  ChatRequest r = first_request();
  r.tool_choice.type = ToolChoiceType::Any;
  auto constraint = make_forced_call_constraint(r, ToolCallFormat::Harmony, vocab, 256);
  ASSERT_TRUE(constraint);
  const std::int32_t shortest = constraint->shortest_completion_tokens();
  EXPECT_LT(shortest, 40);
  const std::string call =
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Rome\"}";
  std::vector<std::int32_t> ids = tok.encode(call + "<|call|>", false);
  std::vector<std::uint8_t> allowed;
  for (std::int32_t id : ids) {
    constraint->allowed(allowed);
    ASSERT_TRUE(allowed[id]) << "'" << tok.decode(std::vector<std::int32_t>{id}, false) << "' after '"
                             << constraint->text() << "'";
    constraint->accept(id);
  }
  EXPECT_TRUE(constraint->done());
  ids.pop_back();  // the stop token is not text
  const auto out = test::run_parser([] { return HarmonyParser(); }, {tok.decode(ids, false)});
  EXPECT_EQ(out.summary, std::vector<std::string>{"C:get_weather:{\"city\": \"Rome\"}"});
  EXPECT_EQ(out.n_complete_calls, 1);
}

}  // namespace
}  // namespace akv
