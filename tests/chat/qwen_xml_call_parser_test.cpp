// QwenXmlCallParser (Qwen3-Coder): XML calls to tool_use with values typed by the schema; every
// split of the output gives the same events; string values stream; malformed output is text;
// a cut call still joins to JSON.
#include <gtest/gtest.h>

#include "chat/qwen_xml_call_parser.h"
#include "parser_test_util.h"

namespace akv {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<ToolSpec> tools() {
  return {{.name = "get_weather",
           .description = "",
           .input_schema = ojson::parse(R"({"type": "object", "properties": {
             "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
             "ratio": {"type": ["number", "null"]}, "options": {"type": "object"},
             "tags": {"type": "array", "items": {"type": "string"}}, "unit": {"enum": ["c", "f"]},
             "code": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}})")},
          {.name = "Bash", .description = "", .input_schema = ojson::parse(R"({"type": "object", "properties": {"command": {"type": "string"}}})")}};
}

auto make_parser(bool thinking = false) {
  return [thinking] { return QwenXmlCallParser({.tools = tools(), .parse_thinking = thinking}); };
}

TEST(QwenXmlValue, TypedBySchema) {
  const ojson schema = tools()[0].input_schema["properties"];
  EXPECT_EQ(qwen_xml_value("Rome", &schema["city"]), "Rome");
  EXPECT_EQ(qwen_xml_value("42", &schema["city"]), "42");  // a string stays a string
  EXPECT_EQ(qwen_xml_value("42", &schema["days"]), 42);
  EXPECT_EQ(qwen_xml_value(" 7 ", &schema["days"]), 7);
  EXPECT_EQ(qwen_xml_value("True", &schema["metric"]), true);  // the template writes Python's str()
  EXPECT_EQ(qwen_xml_value("false", &schema["metric"]), false);
  EXPECT_EQ(qwen_xml_value("None", &schema["ratio"]), nullptr);
  EXPECT_EQ(qwen_xml_value("1.5", &schema["ratio"]), 1.5);
  EXPECT_EQ(qwen_xml_value("{\"a\": [1]}", &schema["options"]), ojson::parse("{\"a\": [1]}"));
  EXPECT_EQ(qwen_xml_value("[\"x\"]", &schema["tags"]), ojson::parse("[\"x\"]"));
  EXPECT_EQ(qwen_xml_value("c", &schema["unit"]), "c");
  EXPECT_EQ(qwen_xml_value("12", &schema["code"]), "12");  // string among the alternatives
  // A local $ref is resolved against the tool's schema (without it: a string).
  const ojson root = ojson::parse(R"({"properties": {"p": {"$ref": "#/$defs/point"}},
      "$defs": {"point": {"type": "object"}}})");
  EXPECT_EQ(qwen_xml_value("{\"x\": 1}", &root["properties"]["p"], &root), ojson::parse("{\"x\": 1}"));
  EXPECT_EQ(qwen_xml_value("{\"x\": 1}", &root["properties"]["p"]), "{\"x\": 1}");
  // Fallbacks: text that is not JSON of the schema's type stays a string.
  EXPECT_EQ(qwen_xml_value("three", &schema["days"]), "three");
  EXPECT_EQ(qwen_xml_value("[1]", &schema["days"]), "[1]");
  EXPECT_EQ(qwen_xml_value("{oops", &schema["options"]), "{oops");
  EXPECT_EQ(qwen_xml_value("42", nullptr), "42");  // unknown parameter
}

TEST(QwenXmlCallParser, TextThenCallWithTypedValues) {
  const std::string_view out =
      "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome \"centro\"\n\xC3\xA9\tx\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=options>\n{\"lang\": "
      "\"it\"}\n</parameter>\n<parameter=extra>\n42\n</parameter>\n</function>\n</tool_call>";
  const auto by_byte = test::check_every_split(
      make_parser(), out,
      {"T:Let me check.",
       "C:get_weather:{\"city\": \"Rome \\\"centro\\\"\\n\xC3\xA9\\tx\", \"days\": 3, \"metric\": true, "
       "\"options\": {\"lang\":\"it\"}, \"extra\": \"42\"}"});
  EXPECT_EQ(by_byte.n_complete_calls, 1);
  EXPECT_GT(by_byte.n_arg_fragments, 12);  // the string value streams
}

TEST(QwenXmlCallParser, TwoCallsAndTextAround) {
  test::check_every_split(make_parser(),
                          "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>\n"
                          "<tool_call>\n<function=Bash>\n<parameter=command>\n\necho '</param'\n\n</parameter>\n</function>\n"
                          "</tool_call>",
                          {"C:Bash:{\"command\": \"ls\"}", "C:Bash:{\"command\": \"\\necho '</param'\\n\"}"});
}

TEST(QwenXmlCallParser, ThinkingThenCall) {
  test::check_every_split(make_parser(/*thinking=*/true),
                          "<think>\nUse bash.\n</think>\n\n<tool_call>\n<function=Bash>\n</function>\n</tool_call>",
                          {"R:Use bash.", "C:Bash:{}"});
}

TEST(QwenXmlCallParser, MalformedOutputIsKeptAsText) {
  // Not a function after <tool_call>: the marker and what follows are text.
  test::check_every_split(make_parser(), "See <tool_call>{\"name\": \"Bash\"}</tool_call>",
                          {"T:See <tool_call>{\"name\": \"Bash\"}</tool_call>"});
  // Garbage where a parameter should be: the call is cut, the rest is text.
  const auto cut = test::check_every_split(
      make_parser(), "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</parameter>\noops</function>",
      {"C:Bash:{\"command\": \"ls\"}", "T:oops</function>"});
  EXPECT_EQ(cut.n_complete_calls, 0);
  // A typed value that the reply cuts: null, its text kept after the call.
  const auto typed = test::run_parser(make_parser(), {"<tool_call>\n<function=get_weather>\n<parameter=days>\n12"});
  EXPECT_EQ(typed.summary, (std::vector<std::string>{"C:get_weather:{\"days\": null}", "T:12"}));
  // A name past the bound is no call.
  const std::string long_name = "<tool_call>\n<function=" + std::string(kMaxQwenXmlNameBytes + 1, 'x') + ">";
  EXPECT_EQ(test::run_parser(make_parser(), {long_name}).n_calls, 0);
}

TEST(QwenXmlCallParser, CutAnywhereStillJoinsToJson) {
  test::check_every_cut(make_parser(),
                        "Ok.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRo\"me\n</parameter>\n<parameter=days>\n3\n"
                        "</parameter>\n</function>\n</tool_call>");
}

}  // namespace
}  // namespace akv
