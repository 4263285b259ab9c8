// Tool-call arguments stream while the model writes them: for each family, every split point and
// byte-by-byte feeding give the same calls, the argument fragments join to exactly the model's
// own argument text, they arrive in many pieces, and a call cut anywhere still joins to a JSON
// object. Also the output parser's stop-reason signal for a cut call.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_call_parser.h"
#include "server/output_sink.h"
#include "server/tool_output_parser.h"

namespace akv {
namespace {

using Kind = OutputEvent::Kind;

struct Streamed {
  std::vector<std::string> summary;  // "T:text", "R:thinking", "C:name:args" (fragments joined)
  std::vector<int> n_arg_fragments;  // per call
  int n_complete_calls = 0;
};

Streamed run(ToolCallFormat format, const std::vector<std::string_view>& pieces) {
  ToolCallParser p({.format = format, .parse_thinking = true});
  std::vector<OutputEvent> events;
  for (auto piece : pieces) {
    auto ev = p.feed(piece);
    events.insert(events.end(), ev.begin(), ev.end());
  }
  auto ev = p.finish();
  events.insert(events.end(), ev.begin(), ev.end());

  Streamed s;
  s.n_complete_calls = p.n_complete_calls();
  bool in_call = false;
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case Kind::TextDelta:
      case Kind::ThinkingDelta: {
        EXPECT_FALSE(in_call);
        const std::string tag = e.kind == Kind::TextDelta ? "T:" : "R:";
        if (!s.summary.empty() && s.summary.back().starts_with(tag))
          s.summary.back() += e.text;
        else
          s.summary.push_back(tag + e.text);
        break;
      }
      case Kind::ToolCallStart:
        EXPECT_FALSE(in_call);
        in_call = true;
        s.summary.push_back("C:" + e.name + ":");
        s.n_arg_fragments.push_back(0);
        break;
      case Kind::ToolCallArgsDelta:
        EXPECT_TRUE(in_call);
        EXPECT_FALSE(e.text.empty());
        s.summary.back() += e.text;
        ++s.n_arg_fragments.back();
        break;
      case Kind::ToolCallEnd: {
        EXPECT_TRUE(in_call);
        in_call = false;
        const std::string& c = s.summary.back();
        const std::string args = c.substr(c.find(':', 2) + 1);
        const auto parsed = nlohmann::ordered_json::parse(args, nullptr, false);
        EXPECT_TRUE(parsed.is_object()) << args;
        break;
      }
    }
  }
  EXPECT_FALSE(in_call);
  return s;
}

std::vector<std::string_view> bytes_of(std::string_view s) {
  std::vector<std::string_view> out;
  for (std::size_t i = 0; i < s.size(); ++i) out.push_back(s.substr(i, 1));
  return out;
}

// Whole, split at every point and byte by byte: the same calls, with the model's own argument
// text; byte by byte, each call's arguments come in at least `min_fragments` pieces.
void check_streams(ToolCallFormat format, std::string_view output, const std::vector<std::string>& expected,
                   int min_fragments) {
  SCOPED_TRACE(std::string(output));
  EXPECT_EQ(run(format, {output}).summary, expected);
  for (std::size_t i = 0; i <= output.size(); ++i) {
    SCOPED_TRACE("split at " + std::to_string(i));
    ASSERT_EQ(run(format, {output.substr(0, i), output.substr(i)}).summary, expected);
  }
  const Streamed by_byte = run(format, bytes_of(output));
  EXPECT_EQ(by_byte.summary, expected);
  for (int n : by_byte.n_arg_fragments) EXPECT_GE(n, min_fragments);
}

// Cut after every byte (max_tokens or a stop sequence there): every call still joins to a JSON
// object (checked in run) and a call counts as complete only when it was.
void check_every_cut(ToolCallFormat format, std::string_view output) {
  SCOPED_TRACE(std::string(output));
  const int n_calls = run(format, {output}).n_complete_calls;
  for (std::size_t i = 0; i <= output.size(); ++i) {
    SCOPED_TRACE("cut at " + std::to_string(i));
    const Streamed s = run(format, {output.substr(0, i)});
    ASSERT_LE(s.n_complete_calls, n_calls);
    ASSERT_LE(s.n_complete_calls, static_cast<int>(s.n_arg_fragments.size()));
  }
}

constexpr std::string_view kHermes =
    "Writing it.\n<tool_call>\n{\"name\": \"Write\", \"arguments\": {\"path\": \"/tmp/a b.txt\", "
    "\"content\": \"line 1\\nline \\\"2\\\" \\u00e9\\ud83d\\ude00 \xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80 "
    "</tool_call> {not json}\", \"mode\": 420, \"ratio\": -1.5e+3, \"zero\": 0, \"flags\": [true, false, "
    "null], \"nested\": {\"k\": [], \"o\": {}}}}\n</tool_call>";
constexpr std::string_view kHermesArgs =
    "{\"path\": \"/tmp/a b.txt\", \"content\": \"line 1\\nline \\\"2\\\" \\u00e9\\ud83d\\ude00 "
    "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80 </tool_call> {not json}\", \"mode\": 420, \"ratio\": -1.5e+3, "
    "\"zero\": 0, \"flags\": [true, false, null], \"nested\": {\"k\": [], \"o\": {}}}";

TEST(ToolCallStream, HermesArgumentsStreamAsTheModelWroteThem) {
  check_streams(ToolCallFormat::Hermes, kHermes, {"T:Writing it.", "C:Write:" + std::string(kHermesArgs)}, 40);
  check_every_cut(ToolCallFormat::Hermes, kHermes);
}

TEST(ToolCallStream, HermesThinkingThenTwoCalls) {
  constexpr std::string_view out =
      "<think>plan</think>\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
  check_streams(ToolCallFormat::Hermes, out, {"R:plan", R"(C:a:{"x": 1})", "C:b:{}"}, 1);
  check_every_cut(ToolCallFormat::Hermes, out);
}

TEST(ToolCallStream, Llama3BareAndPythonTag) {
  constexpr std::string_view bare =
      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris {x}\", \"days\": [1, 2, 10]}}; "
      "{\"name\": \"t\", \"parameters\": {}}";
  check_streams(ToolCallFormat::Llama3Json, bare,
                {R"(C:get_weather:{"city": "Paris {x}", "days": [1, 2, 10]})", "C:t:{}"}, 1);
  check_every_cut(ToolCallFormat::Llama3Json, bare);
  constexpr std::string_view tagged = "Calling.<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": \"long query text\"}}";
  check_streams(ToolCallFormat::Llama3Json, tagged, {"T:Calling.", R"(C:f:{"q": "long query text"})"}, 10);
  check_every_cut(ToolCallFormat::Llama3Json, tagged);
}

TEST(ToolCallStream, MistralArrayAndNamedForms) {
  constexpr std::string_view array =
      "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": \"]\", \"n\": 12}}, {\"name\": \"b\", "
      "\"arguments\": {\"y\": \"zzzz\"}}]";
  check_streams(ToolCallFormat::Mistral, array, {R"(C:a:{"x": "]", "n": 12})", R"(C:b:{"y": "zzzz"})"}, 4);
  check_every_cut(ToolCallFormat::Mistral, array);
  constexpr std::string_view named = "[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{\"city\": \"Oslo\", \"n\": 3}";
  check_streams(ToolCallFormat::Mistral, named, {R"(C:get_weather:{"city": "Oslo", "n": 3})"}, 6);
  check_every_cut(ToolCallFormat::Mistral, named);
}

TEST(ToolCallStream, CallsThatCannotStreamComeOutWhole) {
  // Arguments as a JSON string, or before the name: one fragment when the object ends.
  check_streams(ToolCallFormat::Hermes, "<tool_call>{\"name\": \"x\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
                {R"(C:x:{"a":1})"}, 1);
  check_streams(ToolCallFormat::Hermes, "<tool_call>{\"arguments\": {\"a\": [1]}, \"name\": \"x\"}</tool_call>",
                {R"(C:x:{"a": [1]})"}, 1);
  const Streamed s = run(ToolCallFormat::Hermes, bytes_of("<tool_call>{\"arguments\": {\"a\": [1]}, \"name\": \"x\"}</tool_call>"));
  EXPECT_EQ(s.n_arg_fragments, std::vector<int>{1});
}

TEST(ToolCallStream, ACutCallIsClosedAndNotComplete) {
  // max_tokens inside a string key, a number, after a comma, inside an escape.
  const std::vector<std::pair<std::string_view, std::string>> cases = {
      {"<tool_call>{\"name\": \"f\", \"arguments\": {\"ci", R"(C:f:{"ci":null})"},
      {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 12", R"(C:f:{"a": null})"},
      {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2], ", R"(C:f:{"a": [1, 2]})"},
      {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"x\\u00", R"(C:f:{"a": "x"})"},
      {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": tru", R"(C:f:{"a": {"b": null}})"},
  };
  for (const auto& [out, expected] : cases) {
    SCOPED_TRACE(std::string(out));
    const Streamed s = run(ToolCallFormat::Hermes, {out});
    EXPECT_EQ(s.summary, std::vector<std::string>{expected});
    EXPECT_EQ(s.n_complete_calls, 0);
  }
  // JSON that turns invalid mid-arguments: the call is closed there, the rest of its body dropped.
  const Streamed bad = run(ToolCallFormat::Hermes, bytes_of("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1 2}}</tool_call> after"));
  EXPECT_EQ(bad.summary, (std::vector<std::string>{R"(C:f:{"a": 1 })", "T:after"}));
}

TEST(ToolCallStream, FragmentsAreWholeUtf8) {
  ToolCallParser p({.format = ToolCallFormat::Hermes});
  int n_fragments = 0;
  for (char c : kHermes) {
    for (const OutputEvent& e : p.feed(std::string_view(&c, 1))) {
      if (e.kind != Kind::ToolCallArgsDelta) continue;
      ++n_fragments;  // dump throws on a split UTF-8 character
      EXPECT_NO_THROW(nlohmann::json(e.text).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict)) << e.text;
    }
  }
  EXPECT_GT(n_fragments, 40);
}

// Random argument objects (nesting, escapes, numbers, UTF-8) fed in random pieces: the fragments
// join to the model's text, and a cut anywhere leaves a JSON object.
std::string random_value(std::mt19937& rng, int depth) {
  static const char* kStrings[] = {"", "a", "x y", "\\n\\\"", "\\u00e9\\ud83d\\ude00", "\xC3\xA9\xF0\x9F\x98\x80", "</tool_call>", "}]"};
  static const char* kScalars[] = {"0", "-1", "12.5", "1e3", "-0.25E-2", "true", "false", "null"};
  const int kind = static_cast<int>(rng() % (depth > 2 ? 2 : 4));
  if (kind == 0) return std::string("\"") + kStrings[rng() % std::size(kStrings)] + "\"";
  if (kind == 1) return kScalars[rng() % std::size(kScalars)];
  const int n = static_cast<int>(rng() % 4);
  std::string out = kind == 2 ? "{" : "[";
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += rng() % 2 ? ", " : ",";
    if (kind == 2) out += "\"k" + std::to_string(i) + "\": ";
    out += random_value(rng, depth + 1);
  }
  return out + (kind == 2 ? "}" : "]");
}

TEST(ToolCallStream, RandomArgumentsAnyPieces) {
  std::mt19937 rng(1234);
  for (int round = 0; round < 300; ++round) {
    std::string args = "{\"a\": " + random_value(rng, 1) + ", \"b\": " + random_value(rng, 1) + "}";
    const std::string out = "<tool_call>\n{\"name\": \"f\", \"arguments\": " + args + "}\n</tool_call>";
    SCOPED_TRACE(out);
    ASSERT_TRUE(nlohmann::json::parse(args, nullptr, false).is_object()) << args;
    std::vector<std::string_view> pieces;
    for (std::size_t i = 0; i < out.size();) {
      const std::size_t n = 1 + rng() % 6;
      pieces.push_back(std::string_view(out).substr(i, n));
      i += n;
    }
    ASSERT_EQ(run(ToolCallFormat::Hermes, pieces).summary, std::vector<std::string>{"C:f:" + args});
    const std::size_t cut = rng() % out.size();
    run(ToolCallFormat::Hermes, {std::string_view(out).substr(0, cut)});  // checks the JSON
  }
}

TEST(ToolCallStream, AParserMovedInsideACallCarriesOn) {
  ToolCallParser first({.format = ToolCallFormat::Hermes});
  std::vector<OutputEvent> ev = first.feed("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"b");
  ToolCallParser moved(std::move(first));
  const std::vector<OutputEvent> more = moved.feed("c\"}}</tool_call>");
  ev.insert(ev.end(), more.begin(), more.end());
  std::string args;
  for (const OutputEvent& e : ev)
    if (e.kind == Kind::ToolCallArgsDelta) args += e.text;
  EXPECT_EQ(args, R"({"a": "bc"})");
  EXPECT_EQ(moved.n_complete_calls(), 1);
}

TEST(ToolOutputParser, ACutCallIsNoToolUse) {
  auto complete = make_tool_output_parser({.format = ToolCallFormat::Hermes});
  CollectingSink sink;
  ASSERT_TRUE(complete->feed("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>", sink));
  ASSERT_TRUE(complete->finish(sink));
  EXPECT_TRUE(complete->saw_tool_call());
  ASSERT_EQ(sink.blocks().size(), 1u);
  EXPECT_EQ(sink.blocks()[0].args_json, R"({"a": 1})");

  auto cut = make_tool_output_parser({.format = ToolCallFormat::Hermes});
  CollectingSink cut_sink;
  ASSERT_TRUE(cut->feed("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"lo", cut_sink));
  ASSERT_TRUE(cut->finish(cut_sink));
  EXPECT_FALSE(cut->saw_tool_call());
  ASSERT_EQ(cut_sink.blocks().size(), 1u);
  EXPECT_EQ(cut_sink.blocks()[0].args_json, R"({"a": "lo"})");
}

}  // namespace
}  // namespace akv
