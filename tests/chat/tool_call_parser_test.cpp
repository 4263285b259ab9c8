// ToolCallParser per family on whole and split inputs: every split point (and byte-by-byte
// feeding) must give the same events, markers never leak into text, calls parse to objects.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_call_parser.h"

namespace akv {
namespace {

using Kind = OutputEvent::Kind;

struct Expect {
  std::vector<std::string> text;  // "T:..." text, "R:..." thinking, "C:name:{args}" call
};

ToolCallParserOptions options_for(ToolCallFormat format, bool thinking = false,
                                  bool in_thinking = false) {
  ToolCallParserOptions o;
  o.format = format;
  o.parse_thinking = thinking;
  o.starts_in_thinking = in_thinking;
  return o;
}

// Events as comparable strings: adjacent deltas of one kind joined; a call as "C:name:args".
std::vector<std::string> summarize(const std::vector<OutputEvent>& events) {
  std::vector<std::string> out;
  std::string args, name;
  bool in_call = false;
  for (const auto& e : events) {
    switch (e.kind) {
      case Kind::TextDelta:
      case Kind::ThinkingDelta: {
        const std::string tag = e.kind == Kind::TextDelta ? "T:" : "R:";
        EXPECT_FALSE(in_call);
        if (!out.empty() && out.back().starts_with(tag))
          out.back() += e.text;
        else
          out.push_back(tag + e.text);
        break;
      }
      case Kind::ToolCallStart:
        EXPECT_FALSE(in_call);
        EXPECT_FALSE(e.id.empty());
        in_call = true, name = e.name, args.clear();
        break;
      case Kind::ToolCallArgsDelta:
        EXPECT_TRUE(in_call);
        args += e.text;
        break;
      case Kind::ToolCallEnd: {
        EXPECT_TRUE(in_call);
        const auto parsed = nlohmann::ordered_json::parse(args);  // fragments join to valid JSON
        EXPECT_TRUE(parsed.is_object());
        out.push_back("C:" + name + ":" + parsed.dump());
        in_call = false;
        break;
      }
    }
  }
  EXPECT_FALSE(in_call);
  return out;
}

std::vector<OutputEvent> run(const ToolCallParserOptions& o,
                             const std::vector<std::string_view>& pieces) {
  ToolCallParser p(o);
  std::vector<OutputEvent> all;
  for (auto piece : pieces) {
    auto ev = p.feed(piece);
    all.insert(all.end(), ev.begin(), ev.end());
  }
  auto ev = p.finish();
  all.insert(all.end(), ev.begin(), ev.end());
  return all;
}

void check(const ToolCallParserOptions& o, std::string_view output,
           const std::vector<std::string>& expected) {
  SCOPED_TRACE(std::string(output));
  EXPECT_EQ(summarize(run(o, {output})), expected);
  for (std::size_t i = 0; i <= output.size(); ++i) {
    SCOPED_TRACE("split at " + std::to_string(i));
    ASSERT_EQ(summarize(run(o, {output.substr(0, i), output.substr(i)})), expected);
  }
  std::vector<std::string_view> bytes;
  for (std::size_t i = 0; i < output.size(); ++i) bytes.push_back(output.substr(i, 1));
  EXPECT_EQ(summarize(run(o, bytes)), expected);
}

TEST(ToolCallParser, HermesTextThenTwoCalls) {
  check(
      options_for(ToolCallFormat::Hermes),
      "Let me check.\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls "
      "-la\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"Read\", \"arguments\": {\"path\": "
      "\"a</tool_call>b\"}}\n</tool_call>",
      {"T:Let me check.", R"(C:Bash:{"command":"ls -la"})", R"(C:Read:{"path":"a</tool_call>b"})"});
}

TEST(ToolCallParser, HermesPlainTextWithMarkerLikeCharacters) {
  check(options_for(ToolCallFormat::Hermes), "if a < b and <tool>x</tool> or <tool_cal",
        {"T:if a < b and <tool>x</tool> or <tool_cal"});
}

TEST(ToolCallParser, HermesArgumentsAsStringAndUnterminatedCall) {
  check(options_for(ToolCallFormat::Hermes),
        "<tool_call>\n{\"name\": \"x\", \"arguments\": \"{\\\"a\\\": 1}\"}", {R"(C:x:{"a":1})"});
}

TEST(ToolCallParser, HermesInvalidBodyComesOutAsText) {
  check(options_for(ToolCallFormat::Hermes), "Try <tool_call>not json</tool_call> done",
        {"T:Try <tool_call>not json</tool_call> done"});
}

TEST(ToolCallParser, Qwen3ThinkingTextAndCall) {
  check(options_for(ToolCallFormat::Hermes, /*thinking=*/true),
        "<think>\nI should list files.\n</think>\n\nSure.\n<tool_call>\n{\"name\": \"Bash\", "
        "\"arguments\": {}}\n</tool_call>",
        {"R:I should list files.", "T:Sure.", "C:Bash:{}"});
}

TEST(ToolCallParser, StartsInsideThinking) {
  check(options_for(ToolCallFormat::None, true, /*in_thinking=*/true),
        "Hmm, <b>.\n</think>\n\nAnswer: 4", {"R:Hmm, <b>.", "T:Answer: 4"});
}

TEST(ToolCallParser, Llama3BareJsonCalls) {
  check(options_for(ToolCallFormat::Llama3Json),
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris {}\"}}; {\"name\": \"t\", "
        "\"parameters\": {}}",
        {R"(C:get_weather:{"city":"Paris {}"})", "C:t:{}"});
}

TEST(ToolCallParser, Llama3PythonTagAndPlainJsonAnswer) {
  check(options_for(ToolCallFormat::Llama3Json),
        "Calling.<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": [1, 2]}}",
        {"T:Calling.", R"(C:f:{"x":[1,2]})"});
  // JSON that is not a call shape stays text.
  check(options_for(ToolCallFormat::Llama3Json), "{\"answer\": 42}", {R"(T:{"answer": 42})"});
  // Python code after the tag is not a JSON call: text.
  check(options_for(ToolCallFormat::Llama3Json), "<|python_tag|>print(1)",
        {"T:<|python_tag|>print(1)"});
}

TEST(ToolCallParser, MistralArrayAndNamedForms) {
  check(options_for(ToolCallFormat::Mistral),
        "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": \"]\"}}, {\"name\": \"b\", "
        "\"arguments\": {}}]",
        {R"(C:a:{"x":"]"})", "C:b:{}"});
  check(options_for(ToolCallFormat::Mistral),
        "[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{\"city\": \"Paris\"}",
        {R"(C:get_weather:{"city":"Paris"})"});
  check(options_for(ToolCallFormat::Mistral), "Plain [TOOL] text", {"T:Plain [TOOL] text"});
}

TEST(ToolCallParser, OneStartPerCallWithDistinctIds) {
  ToolCallParserOptions o = options_for(ToolCallFormat::Hermes);
  int n = 0;
  o.make_call_id = [&n] { return "call_" + std::to_string(n++); };
  const auto events =
      run(o, {"<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": "
              "\"b\", \"arguments\": {}}</tool_call>"});
  std::vector<std::string> ids;
  for (const auto& e : events)
    if (e.kind == Kind::ToolCallStart) ids.push_back(e.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"call_0", "call_1"}));
}

}  // namespace
}  // namespace akv
