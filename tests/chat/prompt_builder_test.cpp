// PromptBuilder against transformers: each golden conversation of goldens/chat_templates.json is
// turned into a neutral ChatRequest, the builder makes the template context, and the rendering
// must equal transformers' text (and token ids) byte for byte. Also the raw-text store and the
// fallback template.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>

#include "base/error.h"
#include "base/mapped_file.h"
#include "chat/prompt_builder.h"
#include "chat_testdata.h"
#include "tokenizer/tokenizer.h"

namespace akv {
namespace {

using ojson = nlohmann::ordered_json;

const Tokenizer& tokenizer_for(const std::string& tokenizer_json) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[tokenizer_json];
  if (!slot) {
    const std::string dir = tokenizer_json.substr(0, tokenizer_json.rfind('/'));
    const std::string config = dir + "/tokenizer_config.json";
    std::string config_path;
    try {
      config_path = test::testdata_file(config);
    } catch (const Error&) {
    }
    slot = std::make_unique<Tokenizer>(
        Tokenizer::load_files_or_throw(test::testdata_file(tokenizer_json), config_path));
  }
  return *slot;
}

std::string template_source(const std::string& rel) {
  if (rel.ends_with(".jinja")) return read_file_or_throw(test::testdata_file(rel));
  return test::load_testdata_json(rel)["chat_template"].get<std::string>();
}

// Python json.dumps (", " and ": " separators, keys in order, ensure_ascii=False).
std::string py_dumps(const ojson& v) {
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) out += ", ";
      out += ojson(k).dump() + ": " + py_dumps(x);
      first = false;
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + py_dumps(v[i]);
    return out + "]";
  }
  return v.dump();
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from == to) return;
  for (std::size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
}

// transformers-form golden conversation -> the neutral request an API adapter would produce.
ChatRequest request_from_golden(const ojson& c) {
  ChatRequest r;
  r.thinking_enabled =
      true;  // the goldens leave enable_thinking undefined, which templates read as on
  for (const auto& m : c["messages"]) {
    const std::string role = m["role"];
    ChatMessage msg;
    if (role == "system" && r.messages.empty() && r.system.empty()) {
      r.system.push_back({.type = BlockType::Text, .text = m["content"].get<std::string>()});
      continue;
    }
    if (role == "user" || role == "system") {
      msg.role = role == "user" ? ChatRole::User : ChatRole::System;
      msg.blocks.push_back({.type = BlockType::Text, .text = m["content"].get<std::string>()});
      msg.content_was_string = true;
    } else if (role == "assistant") {
      msg.role = ChatRole::Assistant;
      const std::string content = m.value("content", "");
      if (!content.empty()) msg.blocks.push_back({.type = BlockType::Text, .text = content});
      if (m.contains("tool_calls"))
        for (const auto& tc : m["tool_calls"]) {
          ContentBlock b{.type = BlockType::ToolUse,
                         .tool_use_id = tc.value("id", ""),
                         .tool_name = tc["function"]["name"].get<std::string>()};
          const ojson& args = tc["function"]["arguments"];
          b.input = args.is_string() ? ojson::parse(args.get<std::string>()) : args;
          msg.blocks.push_back(std::move(b));
        }
    } else if (role == "tool") {
      msg.role = ChatRole::Tool;
      msg.blocks.push_back({.type = BlockType::ToolResult,
                            .text = m["content"].get<std::string>(),
                            .tool_use_id = m.value("tool_call_id", "")});
    }
    r.messages.push_back(std::move(msg));
  }
  if (c["tools"].is_array())
    for (const auto& t : c["tools"]) {
      const ojson& f = t["function"];
      r.tools.push_back({.name = f["name"],
                         .description = f.value("description", ""),
                         .input_schema = f["parameters"]});
    }
  for (const auto& [k, v] : c["special_tokens"].items()) r.template_kwargs[k] = v;
  for (const auto& [k, v] : c["extra_kwargs"].items()) r.template_kwargs[k] = v;
  return r;
}

// The golden conversation passes tool arguments as JSON strings and keys sorted; the neutral
// request carries arguments as objects (what vLLM and transformers document), so transformers
// would print json.dumps(object) where the golden shows the string (raw or json-quoted).
std::string expected_with_object_arguments(const ojson& c) {
  std::string expected = c["rendered"];
  for (const auto& m : c["messages"])
    if (m.contains("tool_calls"))
      for (const auto& tc : m["tool_calls"]) {
        const ojson& args = tc["function"]["arguments"];
        if (!args.is_string()) continue;
        const std::string s = args.get<std::string>();
        const std::string obj = py_dumps(ojson::parse(s));
        replace_all(expected, ojson(s).dump(), obj);
        replace_all(expected, s, obj);
      }
  return expected;
}

ojson sorted_keys(const ojson& v) {
  return ojson::parse(nlohmann::json(v).dump());
}

TEST(PromptBuilderGolden, NeutralRequestRendersLikeTransformers) {
  const ojson goldens = test::load_testdata_json("goldens/chat_templates.json");
  int n_text = 0, n_tokens = 0, n_errors = 0;
  for (const auto& c : goldens["cases"]) {
    const std::string name =
        c["template"].get<std::string>() + " / " + c["conversation"].get<std::string>();
    SCOPED_TRACE(name);
    const std::string tok_path = c.contains("tokenizer") && c["tokenizer"].is_string() ? c["tokenizer"].get<std::string>()
                                                            : "tokenizers/qwen3/tokenizer.json";
    PromptBuilderOptions options;
    options.template_override = template_source(c["template"]);
    options.render.clock = test::pinned_clock;
    PromptBuilder builder(tokenizer_for(tok_path), options);
    const ChatRequest request = request_from_golden(c);

    ojson context = builder.build_context(request);
    context["add_generation_prompt"] =
        c["add_generation_prompt"];  // *_nogen cases render without it
    // The goldens leave enable_thinking undefined unless they set it; some templates read
    // undefined as off (QwQ, R1 as patched by llama.cpp), Qwen3 as on. The builder always
    // states the request's choice, so drop it here to render the golden's exact input.
    if (!c["extra_kwargs"].contains("enable_thinking")) context.erase("enable_thinking");
    const bool has_tools = c["tools"].is_array();
    if (has_tools) context = sorted_keys(context);  // the golden's tools and calls have sorted keys

    if (c.contains("error")) {
      EXPECT_THROW(builder.chat_template().render(context, options.render), Error);
      ++n_errors;
      continue;
    }
    const std::string rendered = builder.chat_template().render(context, options.render);
    const std::string expected =
        has_tools ? expected_with_object_arguments(c) : c["rendered"].get<std::string>();
    EXPECT_EQ(rendered, expected);
    ++n_text;
    if (c.contains("token_ids") && !has_tools) {
      const auto tokens = tokenizer_for(tok_path).encode(rendered, false);
      EXPECT_EQ(tokens, c["token_ids"].get<std::vector<std::int32_t>>());
      // A final assistant turn is a prefill for the builder (continued), not for this golden.
      const bool thinking_as_golden =
          c["extra_kwargs"].contains("enable_thinking") ||
          options.template_override->find("enable_thinking") == std::string::npos;
      if (c["add_generation_prompt"].get<bool>() && c["messages"].back()["role"] != "assistant" &&
          thinking_as_golden) {
        EXPECT_EQ(builder.build(request).tokens, tokens);
      }
      ++n_tokens;
    }
  }
  EXPECT_GT(n_text, 130);
  EXPECT_GT(n_tokens, 100);
  EXPECT_GT(n_errors, 5);
}

TEST(PromptBuilderGolden, ToolContextHasTransformersShape) {
  PromptBuilder builder(tokenizer_for("tokenizers/qwen3/tokenizer.json"));
  ChatRequest r;
  r.tools.push_back(
      {.name = "Bash", .description = "Run a command", .input_schema = {{"type", "object"}}});
  ContentBlock call{.type = BlockType::ToolUse, .tool_use_id = "toolu_1", .tool_name = "Bash"};
  call.input = {{"command", "ls"}};
  r.messages.push_back(
      {.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = "go"}}});
  r.messages.push_back(
      {.role = ChatRole::Assistant, .blocks = {{.type = BlockType::Text, .text = "Sure."}, call}});
  r.messages.push_back(
      {.role = ChatRole::User,
       .blocks = {{.type = BlockType::ToolResult, .text = "a.txt", .tool_use_id = "toolu_1"},
                  {.type = BlockType::Text, .text = "and now?"}}});
  const ojson ctx = builder.build_context(r);
  EXPECT_EQ(
      ctx["tools"].dump(),
      R"([{"type":"function","function":{"name":"Bash","description":"Run a command","parameters":{"type":"object"}}}])");
  const ojson& msgs = ctx["messages"];
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(
      msgs[1].dump(),
      R"({"role":"assistant","content":"Sure.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"Bash","arguments":{"command":"ls"}}}]})");
  EXPECT_EQ(msgs[2].dump(),
            R"({"role":"tool","tool_call_id":"toolu_1","name":"Bash","content":"a.txt"})");
  EXPECT_EQ(msgs[3].dump(), R"({"role":"user","content":"and now?"})");
  EXPECT_TRUE(ctx["add_generation_prompt"].get<bool>());
  EXPECT_EQ(builder.tool_call_format(), ToolCallFormat::Hermes);
}

TEST(PromptBuilderRawText, StoredTurnReRendersAsTheModelWroteIt) {
  PromptBuilderOptions options;
  options.template_override = read_file_or_throw(
      test::testdata_file("chat-templates/templates/llama.cpp/Qwen-Qwen2.5-7B-Instruct.jinja"));
  PromptBuilder builder(tokenizer_for("tokenizers/qwen3/tokenizer.json"), options);
  ChatRequest r;
  r.tools.push_back({.name = "Bash", .description = "Run", .input_schema = {{"type", "object"}}});
  r.messages.push_back(
      {.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = "list"}}});
  const TurnOwner owner{.tenant = "t", .agent = "a"};
  const BuiltPrompt turn1 = builder.build(r, owner);

  // The model wrote compact JSON and text before the call: the template would re-serialise it.
  const std::string raw =
      "Let me look.\n<tool_call>\n{\"name\":\"Bash\",\"arguments\":{\"command\":\"ls "
      "-la\"}}\n</tool_call>";
  ContentBlock call{.type = BlockType::ToolUse, .tool_use_id = "toolu_9", .tool_name = "Bash"};
  call.input = {{"command", "ls -la"}};
  ChatMessage turn{.role = ChatRole::Assistant,
                   .blocks = {{.type = BlockType::Text, .text = "Let me look."}, call}};
  r.messages.push_back(turn);
  r.messages.push_back(
      {.role = ChatRole::User,
       .blocks = {{.type = BlockType::ToolResult, .text = "x", .tool_use_id = "toolu_9"}}});

  const BuiltPrompt without_store = builder.build(r, owner);
  EXPECT_FALSE(without_store.text.starts_with(turn1.text + raw));

  builder.remember_assistant_output(owner, turn, raw);
  // The client echoes the turn back with a different id and key order: still found.
  ContentBlock echoed = call;
  echoed.tool_use_id = "toolu_other";
  r.messages[1] = {.role = ChatRole::Assistant,
                   .blocks = {{.type = BlockType::Text, .text = "Let me look."}, echoed}};
  const BuiltPrompt with_store = builder.build(r, owner);
  EXPECT_TRUE(with_store.text.starts_with(turn1.text + raw + "<|im_end|>\n")) << with_store.text;
  EXPECT_TRUE(std::equal(turn1.tokens.begin(), turn1.tokens.end(), with_store.tokens.begin()));
}

// KV reuse across a tool round trip (Qwen3's own template, thinking off): the generation prompt
// ends with an empty think block that the template leaves out when it re-renders the turn, and
// the model spelled "<tool_call>" in pieces, unlike encode(). The next prompt must still start
// with the ids the KV cache holds: prompt ids + generated ids.
class PromptBuilderKvSplice : public ::testing::Test {
 protected:
  const Tokenizer& tok = tokenizer_for("tokenizers/qwen3/tokenizer.json");
  PromptBuilder builder{tok};
  const TurnOwner owner{.tenant = "t", .agent = "a"};

  static ChatRequest first_request() {
    ChatRequest r;
    r.tools.push_back({.name = "get_weather",
                       .description = "Weather of a city",
                       .input_schema = {{"type", "object"}}});
    r.messages.push_back({.role = ChatRole::User,
                          .blocks = {{.type = BlockType::Text, .text = "Weather in Rome?"}}});
    return r;
  }
  static ChatMessage call_turn(const std::string& city, const std::string& id) {
    ContentBlock call{.type = BlockType::ToolUse, .tool_use_id = id, .tool_name = "get_weather"};
    call.input = {{"city", city}};
    return {.role = ChatRole::Assistant, .blocks = {call}};
  }
  static ChatRequest second_request(const ChatMessage& assistant) {
    ChatRequest r = first_request();
    r.messages.push_back(assistant);
    r.messages.push_back(
        {.role = ChatRole::User,
         .blocks = {{.type = BlockType::ToolResult, .text = "sunny", .tool_use_id = "call_1"}}});
    return r;
  }
  std::vector<std::int32_t> enc(std::string_view s) const { return tok.encode(s, false); }
  static bool starts_with(const std::vector<std::int32_t>& ids,
                          const std::vector<std::int32_t>& prefix) {
    return ids.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
  }
};

TEST_F(PromptBuilderKvSplice, NextPromptStartsWithPromptAndGeneratedIds) {
  const BuiltPrompt p1 = builder.build(first_request(), owner);
  ASSERT_TRUE(p1.text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")) << p1.text;

  // "<tool_call>" in four pieces instead of its added token.
  std::vector<std::int32_t> generated;
  for (const char* piece : {"<", "tool", "_call", ">",
                            "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                            "\"Rome\"}}\n",
                            "</tool_call>"}) {
    const auto ids = enc(piece);
    generated.insert(generated.end(), ids.begin(), ids.end());
  }
  const std::string raw = tok.decode(generated, /*skip_special_tokens=*/false);
  ASSERT_NE(enc(raw), generated);

  // Without the ids the template drops the think block: the prefix match ends at turn 1's prompt.
  const ChatRequest r2 = second_request(call_turn("Rome", "call_1"));
  PromptBuilder text_only(tok);
  text_only.remember_assistant_output(owner, call_turn("Rome", "call_0"), raw);
  EXPECT_FALSE(text_only.build(r2, owner).text.starts_with(p1.text));

  builder.remember_assistant_output(owner, call_turn("Rome", "call_0"), raw, p1.text, p1.tokens,
                                    generated);
  const BuiltPrompt p2 = builder.build(r2, owner);
  std::vector<std::int32_t> kv = p1.tokens;
  kv.insert(kv.end(), generated.begin(), generated.end());
  EXPECT_TRUE(starts_with(p2.tokens, kv));
  EXPECT_TRUE(p2.text.starts_with(p1.text + raw + "<|im_end|>\n<|im_start|>user\n<tool_response>"))
      << p2.text;
  EXPECT_TRUE(p2.text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_EQ(tok.decode(p2.tokens, false), p2.text);
  EXPECT_EQ(builder.build(r2, owner).tokens, p2.tokens);  // count_tokens builds the same way

  // Turn 3 chains on turn 2's spliced prompt.
  const std::vector<std::int32_t> generated2 = enc("It is sunny.");
  ChatMessage answer{.role = ChatRole::Assistant,
                     .blocks = {{.type = BlockType::Text, .text = "It is sunny."}}};
  builder.remember_assistant_output(owner, answer, "It is sunny.", p2.text, p2.tokens, generated2);
  ChatRequest r3 = r2;
  r3.messages.push_back(answer);
  r3.messages.push_back(
      {.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = "And Paris?"}}});
  const BuiltPrompt p3 = builder.build(r3, owner);
  kv = p2.tokens;
  kv.insert(kv.end(), generated2.begin(), generated2.end());
  EXPECT_TRUE(starts_with(p3.tokens, kv));
  EXPECT_EQ(tok.decode(p3.tokens, false), p3.text);
}

TEST_F(PromptBuilderKvSplice, EditedTurnIsRenderedAndEncodedAfresh) {
  const BuiltPrompt p1 = builder.build(first_request(), owner);
  const std::string raw =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
  std::vector<std::int32_t> generated = enc("<");
  const auto rest = enc(raw.substr(1));
  generated.insert(generated.end(), rest.begin(), rest.end());
  builder.remember_assistant_output(owner, call_turn("Rome", "call_0"), raw, p1.text, p1.tokens,
                                    generated);

  // The client changed the call: nothing remembered applies.
  const ChatRequest edited = second_request(call_turn("Paris", "call_1"));
  const BuiltPrompt p = builder.build(edited, owner);
  PromptBuilder fresh(tok);
  EXPECT_EQ(p.text, fresh.build(edited).text);
  EXPECT_EQ(p.tokens, enc(p.text));
  EXPECT_EQ(p.text.find("<think>\n\n</think>\n\n<tool_call>"), std::string::npos);

  // A remembered turn whose prompt differs (another conversation with the same reply).
  ChatRequest other = second_request(call_turn("Rome", "call_1"));
  other.messages[0].blocks[0].text = "Weather in Rome, please?";
  const BuiltPrompt q = builder.build(other, owner);
  EXPECT_EQ(q.tokens, enc(q.text));
  EXPECT_EQ(q.text.find(p1.text), std::string::npos);
}

// A conversation sent again with a new turn (its reply not remembered: cut by max_tokens) is
// encoded through its owner's memo: the same ids as a fresh encode, the earlier turns' text not
// encoded again; another tenant's request with the same agent id gets a memo of its own.
TEST(PromptBuilderEncodeMemo, NextTurnReusesTheEarlierTurnsIdsOfItsOwnConversationOnly) {
  const Tokenizer& tok = tokenizer_for("tokenizers/qwen3/tokenizer.json");
  PromptBuilder builder{tok};
  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += "line " + std::to_string(i) + " of the file says hello.\n";
  ChatRequest r;
  r.system = {{.type = BlockType::Text, .text = "You are an agent. " + long_text}};
  r.messages.push_back({.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = long_text + "Summarize."}}});
  const TurnOwner a{.tenant = "t1", .agent = "a"}, a_elsewhere{.tenant = "t2", .agent = "a"};
  const BuiltPrompt p1 = builder.build(r, a);
  EXPECT_EQ(p1.tokens, tok.encode(p1.text, false));
  EXPECT_EQ(builder.encode_memos().n_memos(), 1u);
  const std::size_t bytes1 = builder.encode_memos().n_bytes();
  EXPECT_GT(bytes1, 2 * long_text.size());

  r.messages.push_back({.role = ChatRole::Assistant, .blocks = {{.type = BlockType::Text, .text = "The file"}}});
  r.messages.push_back({.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = "Go on, " + long_text}}});
  const BuiltPrompt p2 = builder.build(r, a);
  EXPECT_EQ(p2.tokens, tok.encode(p2.text, false));
  EXPECT_EQ(builder.build(r, a_elsewhere).tokens, p2.tokens);
  EXPECT_EQ(builder.encode_memos().n_memos(), 2u);
  EXPECT_EQ(builder.build(r).tokens, p2.tokens);  // anonymous: no memo
  EXPECT_EQ(builder.encode_memos().n_memos(), 2u);

  PromptBuilderOptions without_memo;
  without_memo.encode_memo_capacity_bytes = 0;
  PromptBuilder no_memo{tok, without_memo};
  EXPECT_EQ(no_memo.build(r, a).tokens, p2.tokens);
  EXPECT_EQ(no_memo.encode_memos().n_memos(), 0u);
}

TEST(EncodeMemoStore, KeysByTenantAndAgentAndEvictsTheLeastRecentlyUsed) {
  const Tokenizer& tok = tokenizer_for("tokenizers/qwen3/tokenizer.json");
  std::string text;
  for (int i = 0; i < 100; ++i) text += "word" + std::to_string(i) + " ";
  std::size_t one = 0;
  {
    EncodeMemoStore probe(std::size_t{1} << 30);
    probe.encode({.tenant = "t", .agent = "a"}, [&](EncodeMemo* m) { return tok.encode_up_to(text, false, SIZE_MAX, m); });
    one = probe.n_bytes();
  }
  ASSERT_GT(one, text.size());
  EncodeMemoStore store(2 * one + one / 2);  // room for two conversations' memos
  std::vector<EncodeMemo*> seen;
  auto encode = [&](const TurnOwner& o) {
    return store.encode(o, [&](EncodeMemo* m) {
      seen.push_back(m);
      return tok.encode_up_to(text, false, SIZE_MAX, m);
    });
  };
  const TurnOwner a{.tenant = "t", .agent = "a"}, b{.tenant = "t", .agent = "b"}, c{.tenant = "u", .agent = "a"};
  // "t"+"1a" and "t1"+"a" must differ too.
  const TurnOwner d{.tenant = "t1", .agent = "a"}, e{.tenant = "t", .agent = "1a"};
  for (const TurnOwner& o : {a, b, a, c, d, e}) EXPECT_EQ(encode(o), tok.encode(text, false));
  EXPECT_EQ(seen[0], seen[2]);  // a's memo again
  EXPECT_NE(seen[0], seen[1]);
  EXPECT_NE(seen[0], seen[3]);  // another tenant, the same agent id
  EXPECT_NE(seen[4], seen[5]);
  EXPECT_EQ(store.n_memos(), 2u);
  EXPECT_LE(store.n_bytes(), 2 * one + one / 2);
  EXPECT_EQ(store.encode({.tenant = "t"}, [&](EncodeMemo* m) {
    EXPECT_EQ(m, nullptr);  // anonymous
    return std::vector<std::int32_t>{};
  }).size(), 0u);
}

TEST(AssistantTextStore, LruEvictsByBytesAndEntries) {
  // Each entry counts its texts, 4 bytes per id and its owner's strings (here 1 byte).
  const TurnOwner o{.tenant = "", .agent = "a"};
  AssistantTextStore store(/*capacity_bytes=*/11, /*max_entries=*/2);
  auto turn = [](std::string t) {
    return ChatMessage{.role = ChatRole::Assistant,
                       .blocks = {{.type = BlockType::Text, .text = t}}};
  };
  store.remember(o, turn("a"), "AAAA");
  store.remember(o, turn("b"), "BBBB");
  ASSERT_TRUE(store.find(o, turn("a")));  // a is now most recent
  store.remember(o, turn("c"), "CCCC");   // over 2 entries: b goes
  EXPECT_FALSE(store.find(o, turn("b")));
  EXPECT_EQ(*store.find(o, turn("a")), "AAAA");
  store.remember(o, turn("d"), "DDDDDDDD");  // 14 bytes > 11: evicts until it fits
  EXPECT_LE(store.n_bytes(), 11u);
  EXPECT_EQ(*store.find(o, turn("d")), "DDDDDDDD");
  store.remember(o, turn("e"), std::string(11, 'x'));  // larger than capacity: not stored
  EXPECT_FALSE(store.find(o, turn("e")));
  // Surrounding whitespace and thinking blocks do not change the key.
  ChatMessage with_thinking = turn(" d\n");
  with_thinking.blocks.insert(with_thinking.blocks.begin(),
                              {.type = BlockType::Thinking, .text = "t"});
  EXPECT_TRUE(store.find(o, with_thinking));

  // Ids count 4 bytes each: 2 + 0 + 4 * 2 + 1 = 11 fits; one more id does not.
  AssistantTextStore with_ids(/*capacity_bytes=*/11);
  with_ids.remember(
      o, turn("f"),
      RememberedTurn{.raw_text = "FF", .prompt_text = "", .prompt_ids = {1}, .generated_ids = {2}});
  EXPECT_EQ(with_ids.n_bytes(), 11u);
  EXPECT_EQ(with_ids.find_turn(o, turn("f"))->generated_ids, std::vector<std::int32_t>{2});
  with_ids.remember(
      o, turn("g"),
      RememberedTurn{
          .raw_text = "GG", .prompt_text = "", .prompt_ids = {1, 2}, .generated_ids = {3}});
  EXPECT_FALSE(with_ids.find(o, turn("g")));
}

// A common reply ("Done.", a `Bash ls` call) remembered in one conversation is never found by
// another tenant or another agent: its raw text (with reasoning the other client never saw)
// must not reach their prompts. Without an agent id nothing is remembered or found.
TEST(AssistantTextStore, TurnsAreFoundOnlyInTheirOwnConversation) {
  AssistantTextStore store;
  ContentBlock call{.type = BlockType::ToolUse, .tool_use_id = "toolu_1", .tool_name = "Bash"};
  call.input = {{"command", "ls"}};
  const ChatMessage done{.role = ChatRole::Assistant, .blocks = {{.type = BlockType::Text, .text = "Done."}}};
  const ChatMessage ls{.role = ChatRole::Assistant, .blocks = {call}};
  const TurnOwner alice{.tenant = "t1", .agent = "alice"};
  store.remember(alice, done, "<think>tenant 1's secret plan</think>Done.");
  store.remember(alice, ls, "<think>t1 only</think><tool_call>{\"name\":\"Bash\"}</tool_call>");
  EXPECT_EQ(*store.find(alice, done), "<think>tenant 1's secret plan</think>Done.");
  EXPECT_TRUE(store.find(alice, ls));

  for (const TurnOwner& other : {TurnOwner{.tenant = "t2", .agent = "alice"},  // another tenant
                                 TurnOwner{.tenant = "t1", .agent = "bob"},    // another agent
                                 TurnOwner{.tenant = "t1", .agent = ""},       // anonymous
                                 TurnOwner{.tenant = "", .agent = "alice"},    // no auth
                                 TurnOwner{.tenant = "t1alice", .agent = ""}, TurnOwner{.tenant = "t", .agent = "1alice"}}) {
    SCOPED_TRACE(other.tenant + "/" + other.agent);
    EXPECT_FALSE(store.find(other, done));
    EXPECT_FALSE(store.find_turn(other, ls));
  }
  const TurnOwner anonymous{.tenant = "t1", .agent = ""};
  store.remember(anonymous, done, "anonymous raw");
  EXPECT_FALSE(store.find(anonymous, done)) << "no conversation identity: not remembered";
  EXPECT_EQ(*store.find(alice, done), "<think>tenant 1's secret plan</think>Done.");
}

// The same through PromptBuilder: tenant 2 sends the same history as tenant 1's conversation;
// its prompt is the template's rendering, without tenant 1's raw text.
TEST(PromptBuilderRawText, AnotherTenantOrAgentGetsNoneOfAConversationsRawText) {
  const Tokenizer tok = Tokenizer::load_files_or_throw(
      test::testdata_file("models/stories260K/hf/tokenizer.json"),
      test::testdata_file("models/stories260K/hf/tokenizer_config.json"));
  PromptBuilder builder(tok);
  ChatRequest r;
  r.messages.push_back({.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = "Clean up."}}});
  const ChatMessage done{.role = ChatRole::Assistant, .blocks = {{.type = BlockType::Text, .text = "Done."}}};
  const std::string raw = " <think>tenant 1's hidden reasoning</think>Done.";
  const TurnOwner alice{.tenant = "t1", .agent = "alice"};
  builder.remember_assistant_output(alice, done, raw);
  r.messages.push_back(done);
  r.messages.push_back({.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = "Thanks."}}});

  EXPECT_NE(builder.build(r, alice).text.find("hidden reasoning"), std::string::npos) << "its own conversation";
  for (const TurnOwner& other : {TurnOwner{.tenant = "t2", .agent = "alice"}, TurnOwner{.tenant = "t1", .agent = "bob"},
                                 TurnOwner{.tenant = "t1", .agent = ""}}) {
    SCOPED_TRACE(other.tenant + "/" + other.agent);
    const std::string text = builder.build(r, other).text;
    EXPECT_EQ(text.find("hidden reasoning"), std::string::npos) << text;
    EXPECT_EQ(text, PromptBuilder(tok).build(r).text) << "the template's own rendering";
    EXPECT_EQ(builder.build_context(r, other).dump().find("hidden"), std::string::npos);
  }
}

TEST(PromptBuilderFallback, PlainTemplateForModelsWithout) {
  const Tokenizer tok = Tokenizer::load_files_or_throw(
      test::testdata_file("models/stories260K/hf/tokenizer.json"),
      test::testdata_file("models/stories260K/hf/tokenizer_config.json"));
  ASSERT_FALSE(tok.chat_template().has_value());
  PromptBuilder builder(tok);
  EXPECT_TRUE(builder.uses_fallback_template());
  ChatRequest r;
  r.system = {{.type = BlockType::Text, .text = "Be brief."}};
  r.messages.push_back(
      {.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = "Tell a story."}}});
  const BuiltPrompt p = builder.build(r);
  EXPECT_EQ(p.text, "<s>System: Be brief.\nUser: Tell a story.\nAssistant:");
  ASSERT_FALSE(p.tokens.empty());
  EXPECT_EQ(p.tokens[0], tok.bos_id());
  EXPECT_EQ(std::count(p.tokens.begin(), p.tokens.end(), tok.bos_id()), 1);

  // Prefill: a final assistant turn is continued, not closed.
  r.messages.push_back(
      {.role = ChatRole::Assistant, .blocks = {{.type = BlockType::Text, .text = "Once upon"}}});
  const BuiltPrompt prefill = builder.build(r);
  EXPECT_TRUE(prefill.continues_final_message);
  EXPECT_EQ(prefill.text, "<s>System: Be brief.\nUser: Tell a story.\nAssistant: Once upon");

  // A generated reply (leading space as the SPM decoder gives it) re-renders as generated.
  r.messages.pop_back();
  const std::string raw = " Once upon a time";
  ChatMessage reply{.role = ChatRole::Assistant,
                    .blocks = {{.type = BlockType::Text, .text = "Once upon a time"}}};
  const TurnOwner owner{.tenant = "", .agent = "a"};
  builder.remember_assistant_output(owner, reply, raw);
  r.messages.push_back(reply);
  r.messages.push_back(
      {.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = "More."}}});
  EXPECT_EQ(builder.build(r, owner).text, p.text + raw + "\nUser: More.\nAssistant:");
}

}  // namespace
}  // namespace akv
