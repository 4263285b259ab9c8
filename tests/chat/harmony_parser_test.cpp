// HarmonyParser (GPT-OSS): channels to reasoning, text and tool calls; every split of the output
// gives the same events; malformed output comes out as text; a cut call still joins to JSON.
// Also parse_harmony_messages.
#include <gtest/gtest.h>

#include "chat/harmony_parser.h"
#include "parser_test_util.h"

namespace akv {
namespace {

auto make_parser(bool calls = true) {
  return [calls] { return HarmonyParser({.parse_calls = calls}); };
}

TEST(HarmonyParser, AnalysisThenFinalAnswer) {
  // The prompt ended in "<|start|>assistant"; <|return|> is a stop token (not in the text).
  test::check_every_split(make_parser(),
                    "<|channel|>analysis<|message|>User greets. Reply  briefly.\n<|end|>"
                    "<|start|>assistant<|channel|>final<|message|>Hello! \xC3\xA9\xF0\x9F\x98\x80 <b>hi</b>",
                    {"R:User greets. Reply  briefly.\n", "T:Hello! \xC3\xA9\xF0\x9F\x98\x80 <b>hi</b>"});
}

TEST(HarmonyParser, AnalysisThenCallStreamsTheModelsArguments) {
  const std::string_view out =
      "<|channel|>analysis<|message|>Need to list files.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.Bash <|constrain|>json<|message|>"
      "{\"command\":\"ls -la \\\"/tmp/a b\\\" <|end\",\"timeout\":1.5e3,\"flags\":[true,null,-0],\"o\":{}}";
  const auto by_byte = test::check_every_split(
      make_parser(), out,
      {"R:Need to list files.",
       "C:Bash:{\"command\":\"ls -la \\\"/tmp/a b\\\" <|end\",\"timeout\":1.5e3,\"flags\":[true,null,-0],\"o\":{}}"});
  EXPECT_EQ(by_byte.n_complete_calls, 1);
  EXPECT_GT(by_byte.n_arg_fragments, 10);  // streamed, not sent whole
  // With the stop token in the text, and in the template's header form.
  test::check_every_split(make_parser(),
                          "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
                          "{\"city\": \"Rome\"}<|call|>",
                          {"C:get_weather:{\"city\": \"Rome\"}"});
}

TEST(HarmonyParser, CommentaryPreambleIsTextAndChannelsWithoutEndMarkers) {
  test::check_every_split(make_parser(),
                          "<|channel|>commentary<|message|>Looking.<|start|>assistant<|channel|>analysis<|message|>"
                          "hmm<|channel|>final<|message|>Done.<|return|>",
                          {"T:Looking.", "R:hmm", "T:Done."});
}

TEST(HarmonyParser, MalformedOutputIsKeptAsText) {
  // No header at all.
  test::check_every_split(make_parser(), "Just text, no channel.", {"T:Just text, no channel."});
  // A call whose body is not an object: header and body come out as text.
  test::check_every_split(make_parser(), "<|channel|>commentary to=functions.Bash<|message|>ls -la<|call|>",
                          {"T:<|channel|>commentary to=functions.Bash<|message|>ls -la"});
  // Arguments that turn invalid: the call is closed where it could be, the rest is text.
  const auto broken = test::check_every_split(
      make_parser(), "<|channel|>commentary to=functions.f<|message|>{\"a\": \"x\", oops}<|call|>",
      {"C:f:{\"a\": \"x\"}", "T:, oops}"});
  EXPECT_EQ(broken.n_complete_calls, 0);
  // Text after the arguments in the same message.
  test::check_every_split(make_parser(), "<|channel|>commentary to=functions.f<|message|>{} trailing<|call|>",
                          {"C:f:{}", "T:trailing"});
  // A header cut by the next message, and one that never ends.
  test::check_every_split(make_parser(), "<|channel|>final<|start|>assistant<|channel|>final<|message|>ok",
                          {"T:<|channel|>finalok"});
  // A header with something else in it: text through its <|message|>, then the body as text.
  test::check_every_split(make_parser(), "<|channel|>final<b><|message|>body<|end|><|start|>assistant<|channel|>final<|message|>x",
                          {"T:<|channel|>final<b><|message|>bodyx"});
  const std::string long_header = "<|channel|>" + std::string(kMaxHarmonyHeaderBytes, 'x') + "<|message|>body";
  EXPECT_EQ(test::run_parser(make_parser(), {long_header}).summary, std::vector<std::string>{"T:" + long_header});
}

TEST(HarmonyParser, CallsNotAllowedComeOutAsText) {
  test::check_every_split(make_parser(/*calls=*/false),
                          "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}",
                          {"T:<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}"});
}

TEST(HarmonyParser, CutAnywhereStillJoinsToJson) {
  test::check_every_cut(make_parser(),
                        "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary "
                        "to=functions.Write <|constrain|>json<|message|>{\"path\":\"/a\",\"n\":[1,2.5,{\"k\":false}],"
                        "\"s\":\"\\u00e9\\n\"}");
  const auto cut = test::run_parser(make_parser(), {"<|channel|>commentary to=functions.f<|message|>{\"a\": [1, 2"});
  // Numbers wait for the byte after them: the call closes before "1", which is kept as text.
  EXPECT_EQ(cut.summary, (std::vector<std::string>{"C:f:{\"a\": []}", "T:1, 2"}));
  EXPECT_EQ(cut.n_calls, 1);
  EXPECT_EQ(cut.n_complete_calls, 0);
}

TEST(HarmonyParser, DeepArgumentsAreCut) {
  std::string deep = "<|channel|>commentary to=functions.f<|message|>{\"a\":";
  for (int i = 0; i < 200; ++i) deep += "[";
  const auto out = test::run_parser(make_parser(), {deep});
  ASSERT_FALSE(out.summary.empty());
  EXPECT_EQ(out.n_complete_calls, 0);
}

TEST(HarmonyMessages, ParsesHeadersInEitherOrder) {
  const auto m = parse_harmony_messages(
      "<|start|>assistant<|channel|>analysis<|message|>a<|end|>"
      "<|start|>assistant to=functions.x<|channel|>commentary json<|message|>{}<|call|>"
      "<|start|>functions.x to=assistant<|channel|>commentary<|message|>\"r\"<|end|>"
      "<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>commentary to=functions.y <|constrain|>json<|message|>[1]");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->size(), 5u);
  EXPECT_EQ((*m)[0].channel, "analysis");
  EXPECT_EQ((*m)[0].content, "a");
  EXPECT_EQ((*m)[1].recipient, "functions.x");
  EXPECT_EQ((*m)[1].content_type, "json");
  EXPECT_EQ((*m)[1].end, "<|call|>");
  EXPECT_EQ((*m)[2].role, "functions.x");
  EXPECT_EQ((*m)[3].role, "user");
  EXPECT_EQ((*m)[4].recipient, "functions.y");
  EXPECT_EQ((*m)[4].content, "[1]");
  EXPECT_EQ((*m)[4].end, "");
  EXPECT_FALSE(parse_harmony_messages("text<|start|>user<|message|>x"));
  EXPECT_FALSE(parse_harmony_messages("<|start|>assistant<|channel|>final"));
  EXPECT_EQ(parse_harmony_prefix("<|start|>user<|message|>a<|end|>garbage").size(), 1u);
}

}  // namespace
}  // namespace akv
