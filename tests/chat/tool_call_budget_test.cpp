// Forced tool calls under limits: the grammar holds strings, arrays and numbers to the schema's
// lengths and counts; its shortest-completion length is exact (a lower bound that a byte along a
// shortest completion lowers by one); and a "random model" (uniform over the allowed tokens)
// under max_tokens 30/60/200 always ends in a complete, valid call within the budget, on
// stories260K's 512-token vocab and Qwen3's 151K. Reports the budgeted mask time on Qwen3.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "chat/tool_call_constraint.h"
#include "chat/tool_call_parser.h"
#include "chat_testdata.h"
#include "parser_test_util.h"
#include "schema_check.h"
#include "tokenizer/tokenizer.h"

namespace akv {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kWeatherSchema = ojson::parse(R"({
  "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
  "properties": {
    "city": {"type": "string", "maxLength": 40, "pattern": "^[A-Z]"},
    "days": {"type": "integer", "exclusiveMinimum": 0},
    "unit": {"type": "string", "enum": ["c", "f"]}},
  "required": ["city", "unit"], "additionalProperties": false})");

const ojson kFormSchema = ojson::parse(R"({
  "type": "object",
  "properties": {
    "title": {"type": "string", "minLength": 3, "maxLength": 8},
    "count": {"type": "integer"},
    "ratio": {"type": "number"},
    "points": {"type": "array", "minItems": 2, "maxItems": 3, "items": {"$ref": "#/$defs/point"}},
    "tags": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 5}},
    "mode": {"enum": ["fast", "slow"]},
    "owner": {"type": "object", "properties": {"name": {"type": "string"}, "id": {"type": "integer"}},
              "required": ["name"]}},
  "required": ["title", "count", "points", "mode", "owner"],
  "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                      "required": ["x", "y"]}}})");

const ojson kBashSchema = ojson::parse(R"({
  "type": "object",
  "properties": {"command": {"type": "string"}, "timeout": {"type": "number"},
                 "env": {"type": "object"}, "args": {"type": "array", "items": {}}},
  "required": ["command"], "additionalProperties": false})");

std::vector<ToolSpec> budget_tools() {
  return {{.name = "get_weather", .description = "", .input_schema = kWeatherSchema},
          {.name = "fill_form", .description = "", .input_schema = kFormSchema},
          {.name = "Bash", .description = "", .input_schema = kBashSchema}};
}

bool accepts_all(const ToolCallGrammar& g, std::string_view text) {
  GrammarState s = g.initial_state();
  return g.advance(s, text) && g.complete(s);
}

std::string call(const std::string& name, const std::string& args) {
  return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
}

TEST(ToolCallGrammar, HonoursLengthAndCountLimits) {
  const ToolCallGrammar g(budget_tools(), ToolCallFormat::Hermes);
  auto form = [&](const std::string& title, const std::string& points, const std::string& rest) {
    return call("fill_form", "{\"title\": " + title + ", \"count\": 7, \"points\": " + points +
                                 rest + ", \"mode\": \"fast\", \"owner\": {\"name\": \"\"}}");
  };
  const std::string two = "[{\"x\": 1, \"y\": 2}, {\"x\": 3, \"y\": 4}]";
  const std::string three = "[{\"x\": 1, \"y\": 2}, {\"x\": 3, \"y\": 4}, {\"x\": 5, \"y\": 6}]";
  EXPECT_TRUE(accepts_all(g, form("\"abc\"", two, "")));
  EXPECT_TRUE(accepts_all(g, form("\"abcdefgh\"", three, "")));
  EXPECT_TRUE(accepts_all(
      g, form("\"\xC3\xA9\xE6\x97\xA5\\n\\u00e9\xF0\x9F\x98\x80\\\"x\"", two, "")));  // 7 chars
  EXPECT_FALSE(accepts_all(g, form("\"ab\"", two, "")));                              // minLength 3
  EXPECT_FALSE(accepts_all(g, form("\"abcdefghi\"", two, "")));                       // maxLength 8
  EXPECT_FALSE(accepts_all(
      g, form("\"\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\"", two, "")));
  EXPECT_FALSE(accepts_all(g, form("\"abc\"", "[{\"x\": 1, \"y\": 2}]", "")));  // minItems 2
  EXPECT_FALSE(accepts_all(
      g, form("\"abc\"", three.substr(0, three.size() - 1) + ", {\"x\": 7, \"y\": 8}]", "")));
  EXPECT_TRUE(accepts_all(g, form("\"abc\"", two, ", \"tags\": [\"12345\", \"\"]")));
  EXPECT_FALSE(accepts_all(g, form("\"abc\"", two, ", \"tags\": [\"123456\"]")));
  EXPECT_FALSE(accepts_all(g, form("\"abc\"", two, ", \"tags\": [\"a\", \"b\", \"c\"]")));

  auto number = [&](const std::string& count, const std::string& ratio) {
    return accepts_all(
        g, call("fill_form", "{\"title\": \"abc\", \"count\": " + count + ", \"ratio\": " + ratio +
                                 ", \"points\": " + two +
                                 ", \"mode\": \"slow\", \"owner\": {\"name\": \"n\"}}"));
  };
  EXPECT_TRUE(number("1234567890123456", "-0.5"));
  EXPECT_TRUE(number("-1234567890123456", "1234567890123456.1234567890123456e-99"));
  EXPECT_FALSE(number("12345678901234567", "1"));    // 17 integer digits
  EXPECT_FALSE(number("1", "1.12345678901234567"));  // 17 fraction digits
  EXPECT_FALSE(number("1", "1e100"));                // 3 exponent digits
  EXPECT_FALSE(number("1.5", "1"));                  // integer
  EXPECT_FALSE(number("01", "1"));

  // Contradictory or malformed limits are ignored or clamped, never an error.
  const ToolCallGrammar odd({{.name = "t",
                              .description = "",
                              .input_schema = ojson::parse(R"({"type": "object", "properties": {
        "a": {"type": "string", "minLength": 5, "maxLength": 2},
        "b": {"type": "array", "minItems": "x", "maxItems": -1}}, "required": ["a", "b"]})")}},
                            ToolCallFormat::Hermes);
  EXPECT_TRUE(accepts_all(odd, call("t", "{\"a\": \"xy\", \"b\": []}")));
  EXPECT_FALSE(accepts_all(odd, call("t", "{\"a\": \"xyz\", \"b\": []}")));
}

// From states along random byte walks: complete iff the cost is 0; no byte lowers the cost by
// more than one; some byte lowers it by exactly one, and following such bytes completes the call
// in exactly `cost` bytes.
void check_shortest_completions(const ToolCallGrammar& g, std::mt19937& rng) {
  GrammarState s = g.initial_state();
  for (int step = 0; step < 160 && !g.complete(s); ++step) {
    const std::uint32_t cost = g.shortest_completion_bytes(s);
    ASSERT_GT(cost, 0u);
    ASSERT_LT(cost, kGrammarUnreachable);
    std::vector<std::uint8_t> bytes;
    int descending = -1;
    for (int b = 0; b < 256; ++b) {
      GrammarState t = s;
      if (!g.advance(t, static_cast<std::uint8_t>(b))) continue;
      const std::uint32_t after = g.shortest_completion_bytes(t);
      ASSERT_GE(after + 1, cost) << "byte " << b << " at step " << step;
      if (after + 1 == cost && descending < 0) descending = b;
      bytes.push_back(static_cast<std::uint8_t>(b));
    }
    ASSERT_GE(descending, 0) << "no byte shortens the completion at step " << step;
    if (step % 16 == 15) {  // follow a shortest completion from here
      GrammarState t = s;
      for (std::uint32_t i = 0; i < cost; ++i) {
        const std::uint32_t before = g.shortest_completion_bytes(t);
        bool moved = false;
        for (int b = 0; b < 256 && !moved; ++b) {
          GrammarState u = t;
          if (g.advance(u, static_cast<std::uint8_t>(b)) &&
              g.shortest_completion_bytes(u) + 1 == before)
            t = u, moved = true;
        }
        ASSERT_TRUE(moved);
      }
      ASSERT_TRUE(g.complete(t));
      ASSERT_EQ(g.shortest_completion_bytes(t), 0u);
    }
    g.advance(s, bytes[rng() % bytes.size()]);
  }
}

TEST(ToolCallGrammar, ShortestCompletionIsExact) {
  std::mt19937 rng(7);
  for (ToolCallFormat format : {ToolCallFormat::Hermes, ToolCallFormat::Llama3Json,
                                 ToolCallFormat::Mistral, ToolCallFormat::QwenXml}) {
    const ToolCallGrammar all(budget_tools(), format);
    for (int walk = 0; walk < 12; ++walk) check_shortest_completions(all, rng);
  }
  for (const auto& tool : budget_tools())
    for (ToolCallFormat format : {ToolCallFormat::Hermes, ToolCallFormat::QwenXml}) {
      const ToolCallGrammar one({tool}, format);
      for (int walk = 0; walk < 8; ++walk) check_shortest_completions(one, rng);
    }
  const ToolCallGrammar empty({{.name = "x", .description = "", .input_schema = ojson::object()}},
                              ToolCallFormat::Hermes);
  const GrammarState s = empty.initial_state();
  EXPECT_EQ(empty.shortest_completion_bytes(s), call("x", "{}").size());
}

struct BudgetStats {
  int n_calls = 0;
  int n_rejected = 0;
  std::vector<double> mask_ms;
};

// The call text parses back as one call of an allowed tool whose input validates.
void expect_valid_call(const std::string& text, ToolCallFormat format,
                       const std::vector<ToolSpec>& tools) {
  const auto events = test::parse_all(text, format, tools);
  ASSERT_FALSE(events.empty()) << text;
  ASSERT_EQ(events.front().kind, OutputEvent::Kind::ToolCallStart) << text;
  ASSERT_EQ(events.back().kind, OutputEvent::Kind::ToolCallEnd) << text;
  std::string args;
  for (const auto& e : events) {
    ASSERT_NE(e.kind, OutputEvent::Kind::TextDelta) << text;
    if (e.kind == OutputEvent::Kind::ToolCallArgsDelta) args += e.text;
  }
  const auto it = std::find_if(tools.begin(), tools.end(),
                               [&](const ToolSpec& t) { return t.name == events[0].name; });
  ASSERT_NE(it, tools.end()) << text;
  EXPECT_TRUE(test::valid_against(ojson::parse(args), it->input_schema, it->input_schema)) << text;
}

// One walk of a random model: each step samples uniformly among the allowed tokens.
void budgeted_walk(const std::shared_ptr<const ConstraintVocab>& vocab, const ChatRequest& request,
                   ToolCallFormat format, std::int32_t budget, std::mt19937& rng,
                   BudgetStats& stats) {
  auto constraint = make_forced_call_constraint(request, format, vocab, budget);
  ASSERT_TRUE(constraint);
  const std::int32_t needed = constraint->shortest_completion_tokens();
  ASSERT_LT(needed, ToolCallConstraint::kNoCompletion);
  if (needed > budget) {  // the server rejects this request; the tightest budget it accepts works
    ++stats.n_rejected;
    budget = needed;
    constraint = make_forced_call_constraint(request, format, vocab, budget);
  }
  std::vector<float> logits(vocab->vocab_size() + 5);
  std::vector<std::int32_t> ids;
  std::int32_t n = 0;
  for (; n < budget && !constraint->done(); ++n) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    constraint->mask(logits);
    stats.mask_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ids.clear();
    for (std::int32_t id = 0; id < vocab->vocab_size(); ++id)
      if (logits[id] == 0.0f) ids.push_back(id);
    ASSERT_FALSE(ids.empty());
    for (auto eos : vocab->eos_ids())
      ASSERT_LT(logits[eos], -1e30f) << "EOS before the call is complete";
    const std::int32_t pick = ids[rng() % ids.size()];
    const std::size_t before = constraint->text().size();
    constraint->accept(pick);
    ASSERT_EQ(constraint->text().size(), before + vocab->bytes(pick).size())
        << "allowed token rejected";
  }
  ASSERT_TRUE(constraint->done()) << "budget " << budget << ", " << n
                                  << " tokens: " << constraint->text();
  expect_valid_call(constraint->text(), format, request.tools);
  ++stats.n_calls;
}

void budgeted_walks(const Tokenizer& tok, ToolCallFormat format, int n_walks, BudgetStats& stats) {
  auto vocab = std::make_shared<const ConstraintVocab>(tok);
  EXPECT_TRUE(vocab->has_byte_tokens());
  std::mt19937 rng(99);
  const auto tools = budget_tools();
  for (std::int32_t budget : {30, 60, 200}) {
    for (std::size_t choice = 0; choice <= tools.size(); ++choice) {
      ChatRequest request;
      request.tools = tools;
      request.tool_choice.type = choice < tools.size() ? ToolChoiceType::Tool : ToolChoiceType::Any;
      if (choice < tools.size()) request.tool_choice.name = tools[choice].name;
      std::printf("  budget %d, %s: shortest call %d tokens\n", budget,
                  choice < tools.size() ? tools[choice].name.c_str() : "any",
                  make_forced_call_constraint(request, format, vocab, budget)
                      ->shortest_completion_tokens());
      for (int walk = 0; walk < n_walks; ++walk) {
        budgeted_walk(vocab, request, format, budget, rng, stats);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[std::min(v.size() - 1, static_cast<std::size_t>(q * v.size()))];
}

TEST(ToolCallConstraint, BudgetedRandomWalksStories260K) {
  const Tokenizer tok = Tokenizer::load_files_or_throw(
      test::testdata_file("models/stories260K/hf/tokenizer.json"),
      test::testdata_file("models/stories260K/hf/tokenizer_config.json"));
  BudgetStats stats;
  for (ToolCallFormat format : {ToolCallFormat::Hermes, ToolCallFormat::Llama3Json,
                                 ToolCallFormat::Mistral, ToolCallFormat::QwenXml}) {
    budgeted_walks(tok, format, 4, stats);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(stats.n_calls, 4 * 3 * 4 * 4);
  EXPECT_GT(stats.n_rejected, 0);  // byte-sized tokens: some calls do not fit 30 tokens
  std::printf("stories260K: %d calls (%d over budget), mask median %.3f ms, max %.3f ms\n",
              stats.n_calls, stats.n_rejected, percentile(stats.mask_ms, 0.5),
              percentile(stats.mask_ms, 1.0));
}

TEST(ToolCallConstraint, BudgetedRandomWalksQwen3WithMaskTiming) {
  const Tokenizer tok =
      Tokenizer::load_files_or_throw(test::testdata_file("tokenizers/qwen3/tokenizer.json"),
                                     test::testdata_file("tokenizers/qwen3/tokenizer_config.json"));
  BudgetStats stats;
  budgeted_walks(tok, ToolCallFormat::Hermes, 3, stats);
  if (HasFatalFailure()) return;
  budgeted_walks(tok, ToolCallFormat::QwenXml, 3, stats);
  if (HasFatalFailure()) return;
  EXPECT_EQ(stats.n_calls, 2 * 3 * 4 * 3);
  const double median = percentile(stats.mask_ms, 0.5);
  std::printf(
      "qwen3: %d calls (%d over budget), %zu steps, mask median %.3f ms, p99 %.3f ms, max %.3f "
      "ms\n",
      stats.n_calls, stats.n_rejected, stats.mask_ms.size(), median,
      percentile(stats.mask_ms, 0.99), percentile(stats.mask_ms, 1.0));
  EXPECT_LT(median, 5.0);
}

TEST(ToolCallConstraint, ReportsCallsThatCannotFitTheBudget) {
  const Tokenizer tok =
      Tokenizer::load_files_or_throw(test::testdata_file("tokenizers/qwen3/tokenizer.json"),
                                     test::testdata_file("tokenizers/qwen3/tokenizer_config.json"));
  auto vocab = std::make_shared<const ConstraintVocab>(tok);
  ChatRequest request;
  request.tools = {{.name = "essay",
                    .description = "",
                    .input_schema = ojson::parse(R"({"type": "object", "properties": {
                      "text": {"type": "string", "minLength": 3000}}, "required": ["text"]})")}};
  request.tool_choice.type = ToolChoiceType::Any;
  auto constraint = make_forced_call_constraint(request, ToolCallFormat::Hermes, vocab, 20);
  EXPECT_GT(constraint->shortest_completion_bytes(), 3000u);
  const std::int32_t needed = constraint->shortest_completion_tokens();
  EXPECT_GT(needed, 20);  // what the server turns into a 400
  EXPECT_LT(needed, 3000);
  // Even so, the constraint never gets stuck: it takes the most progressing token each step.
  std::vector<float> logits(vocab->vocab_size());
  for (int n = 0; n < needed && !constraint->done(); ++n) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    constraint->mask(logits);
    const auto pick = std::find(logits.begin(), logits.end(), 0.0f) - logits.begin();
    ASSERT_LT(pick, vocab->vocab_size());
    constraint->accept(static_cast<std::int32_t>(pick));
  }
  EXPECT_TRUE(constraint->done()) << constraint->text();
  expect_valid_call(constraint->text(), ToolCallFormat::Hermes, request.tools);
}

}  // namespace
}  // namespace akv
