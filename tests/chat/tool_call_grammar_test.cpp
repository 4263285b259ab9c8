// Forced tool calls: the schema grammar accepts valid calls and rejects invalid ones; random
// token walks under ToolCallConstraint (stories260K's 512-token vocab, Qwen3's 151K) always end
// in a call whose arguments validate against the schema, and the parser reads it back. Also
// times the per-step mask on the Qwen3 vocab.
#include <gtest/gtest.h>

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

const ojson kBashSchema = ojson::parse(R"({
  "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
  "properties": {
    "command": {"type": "string", "description": "The command"},
    "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 600000},
    "description": {"type": "string", "maxLength": 100, "pattern": "^\\p{L}+$"},
    "run_in_background": {"type": "boolean"}},
  "required": ["command"], "additionalProperties": false})");

const ojson kEditSchema = ojson::parse(R"({
  "type": "object",
  "properties": {
    "file_path": {"type": "string", "format": "path"},
    "old_string": {"type": "string"},
    "replace_all": {"type": "boolean", "default": false},
    "mode": {"enum": ["a", "ab", 3, null]}},
  "required": ["file_path", "old_string"], "additionalProperties": false, "propertyNames": {"pattern": "x"}})");

const ojson kNestedSchema = ojson::parse(R"({
  "type": "object",
  "properties": {
    "items": {"type": "array", "maxItems": 3, "items": {"type": "object",
      "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
      "required": ["id"]}},
    "opt": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "kind": {"const": "x"},
    "point": {"$ref": "#/$defs/point"},
    "either": {"type": ["integer", "boolean"]},
    "meta": {}},
  "required": ["items", "kind"],
  "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}}})");

std::vector<ToolSpec> tools() {
  return {{.name = "Bash", .description = "", .input_schema = kBashSchema},
          {.name = "Edit", .description = "", .input_schema = kEditSchema},
          {.name = "EditNested", .description = "", .input_schema = kNestedSchema}};
}

bool accepts_all(const ToolCallGrammar& g, std::string_view text) {
  GrammarState s = g.initial_state();
  return g.advance(s, text) && g.complete(s);
}

TEST(ToolCallGrammar, AcceptsValidCallsRejectsInvalidOnes) {
  const ToolCallGrammar g(tools(), ToolCallFormat::Hermes);
  EXPECT_TRUE(accepts_all(
      g,
      "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls -la\"}}\n</tool_call>"));
  EXPECT_TRUE(accepts_all(g,
                          "<tool_call>\n{\"name\": \"Bash\", \"arguments\": "
                          "{\"command\":\"a\\\"b\\u00e9\",\"timeout\": -1.5e3, "
                          "\"run_in_background\": true}}\n</tool_call>"));
  EXPECT_TRUE(accepts_all(g,
                          "<tool_call>\n{\"name\": \"Edit\", \"arguments\": {\"file_path\": "
                          "\"/x\", \"old_string\": \"\", "
                          "\"mode\": \"ab\"}}\n</tool_call>"));
  EXPECT_TRUE(accepts_all(g,
                          "<tool_call>\n{\"name\": \"Edit\", \"arguments\": {\"file_path\": "
                          "\"/x\", \"old_string\": \"\", "
                          "\"mode\": null}}\n</tool_call>"));
  EXPECT_TRUE(accepts_all(g,
                          "<tool_call>\n{\"name\": \"EditNested\", \"arguments\": {\"items\": "
                          "[{\"id\": 1, \"tags\": [\"a\"]}, "
                          "{\"id\": -20}], \"opt\": null, \"kind\": \"x\", \"point\": {\"x\": 1, "
                          "\"y\": 2.5}, \"either\": false, "
                          "\"meta\": {\"k\": [1, {\"z\": null}]}}}\n</tool_call>"));
  // Missing required, wrong type, extra key, unknown tool, bad enum, two spaces, not finished.
  EXPECT_FALSE(
      accepts_all(g, "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts_all(
      g, "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": 5}}\n</tool_call>"));
  EXPECT_FALSE(accepts_all(g,
                           "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"x\", "
                           "\"other\": 1}}\n</tool_call>"));
  EXPECT_FALSE(accepts_all(
      g, "<tool_call>\n{\"name\": \"Bashh\", \"arguments\": {\"command\": \"x\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts_all(g,
                           "<tool_call>\n{\"name\": \"Edit\", \"arguments\": {\"file_path\": "
                           "\"/x\", \"old_string\": \"\", "
                           "\"mode\": \"b\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts_all(
      g, "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\":  \"x\"}}\n</tool_call>"));
  EXPECT_FALSE(
      accepts_all(g, "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"x\"}}"));
  EXPECT_FALSE(accepts_all(g,
                           "<tool_call>\n{\"name\": \"EditNested\", \"arguments\": {\"items\": "
                           "[{\"id\": 1.5}], \"kind\": \"x\"}}\n</tool_call>"));

  const ToolCallGrammar llama({tools()[0]}, ToolCallFormat::Llama3Json);
  EXPECT_TRUE(accepts_all(llama, "{\"name\": \"Bash\", \"parameters\": {\"command\": \"ls\"}}"));
  const ToolCallGrammar mistral({tools()[0]}, ToolCallFormat::Mistral);
  EXPECT_TRUE(accepts_all(
      mistral, "[TOOL_CALLS][{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}}]"));
}

// Qwen3-Coder's XML calls: parameters in schema order as the template writes them; string
// parameters are raw text (anything but </parameter>, maxLength held), enums their raw values,
// typed ones JSON of their schema.
TEST(ToolCallGrammar, QwenXmlCalls) {
  const ToolCallGrammar g(tools(), ToolCallFormat::QwenXml);
  auto xml = [](const std::string& name, const std::string& params) {
    return "<tool_call>\n<function=" + name + ">\n" + params + "</function>\n</tool_call>";
  };
  auto param = [](const std::string& key, const std::string& value) {
    return "<parameter=" + key + ">\n" + value + "\n</parameter>\n";
  };
  EXPECT_TRUE(accepts_all(g, xml("Bash", param("command", "ls -la \"x\" <in >out\n\tend"))));
  EXPECT_TRUE(accepts_all(g, xml("Bash", param("command", "ls") + param("timeout", "1.5e3") +
                                             param("description", "list") +
                                             param("run_in_background", "true"))));
  EXPECT_TRUE(accepts_all(g, xml("Bash", "<parameter=command>\nls</parameter>\n")));
  EXPECT_TRUE(accepts_all(g, xml("Edit", param("file_path", "/x") + param("old_string", "") +
                                             param("mode", "ab"))));
  EXPECT_TRUE(accepts_all(g, xml("EditNested", param("items", "[{\"id\": 1}]") +
                                                   param("kind", "x") +
                                                   param("point", "{\"x\": 1, \"y\": 2}"))));
  // Missing required, wrong order, typed value not of its type, unknown parameter, a value
  // holding </parameter>, past maxLength (100), not finished.
  EXPECT_FALSE(accepts_all(g, xml("Bash", param("timeout", "1"))));
  EXPECT_FALSE(accepts_all(g, xml("Bash", param("timeout", "1") + param("command", "ls"))));
  EXPECT_FALSE(accepts_all(g, xml("Bash", param("command", "ls") + param("timeout", "soon"))));
  EXPECT_FALSE(accepts_all(g, xml("Bash", param("command", "ls") + param("other", "1"))));
  EXPECT_FALSE(accepts_all(g, xml("Bash", param("command", "a</parameter>b"))));
  EXPECT_FALSE(accepts_all(
      g, xml("Bash", param("command", "ls") + param("description", std::string(101, 'd')))));
  EXPECT_TRUE(accepts_all(
      g, xml("Bash", param("command", "ls") + param("description", std::string(100, 'd')))));
  // The enum's non-string members would come back as strings: only "a" and "ab" can be written.
  EXPECT_FALSE(accepts_all(g, xml("Edit", param("file_path", "/x") + param("old_string", "") +
                                              param("mode", "3"))));
  EXPECT_FALSE(accepts_all(g, xml("Edit", param("file_path", "/x") + param("old_string", "") +
                                              param("mode", "\"a\""))));
  EXPECT_FALSE(accepts_all(g, "<tool_call>\n<function=Bash>\n" + param("command", "ls")));
}

struct WalkStats {
  int n_calls = 0;
  double total_ms = 0, max_ms = 0;
  int n_steps = 0;
};

// Samples random allowed tokens until the constraint is done; checks the result.
void random_walks(const Tokenizer& tok, ToolCallFormat format, int n_walks, WalkStats& stats) {
  auto vocab = std::make_shared<const ConstraintVocab>(tok);
  std::mt19937 rng(1234);
  const auto all_tools = tools();
  std::vector<std::uint8_t> allowed;
  std::vector<float> logits(vocab->vocab_size() + 7);  // models pad their vocab
  for (int walk = 0; walk < n_walks; ++walk) {
    ChatRequest request;
    request.tools = all_tools;
    request.tool_choice.type = walk % 2 ? ToolChoiceType::Any : ToolChoiceType::Tool;
    request.tool_choice.name = all_tools[walk % all_tools.size()].name;
    // XML string parameters end only at "</parameter>", which random tokens do not spell:
    // a budget makes those walks finish.
    auto constraint =
        make_forced_call_constraint(request, format, vocab, format == ToolCallFormat::QwenXml ? 300 : 0);
    ASSERT_TRUE(constraint);
    int step = 0;
    for (; step < 2000 && !constraint->done(); ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      std::fill(logits.begin(), logits.end(), 0.0f);
      constraint->mask(logits);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      stats.total_ms += ms, stats.max_ms = std::max(stats.max_ms, ms), ++stats.n_steps;
      std::vector<std::int32_t> ids, closing;
      for (std::int32_t id = 0; id < vocab->vocab_size(); ++id) {
        if (logits[id] == 0.0f) {
          ids.push_back(id);
          const std::string& b = vocab->bytes(id);
          if (b.find_first_of("\"]}") != std::string::npos) closing.push_back(id);
        }
      }
      for (std::size_t i = vocab->vocab_size(); i < logits.size(); ++i)
        ASSERT_LT(logits[i], -1e30f);
      ASSERT_FALSE(ids.empty());
      for (auto eos : vocab->eos_ids())
        ASSERT_LT(logits[eos], -1e30f) << "EOS before the call is complete";
      // Lean towards closing tokens as the walk grows so every walk ends.
      const auto& pool = (step > 25 && !closing.empty() && rng() % 4 != 0) ? closing : ids;
      const std::int32_t pick = pool[rng() % pool.size()];
      const std::size_t before = constraint->text().size();
      constraint->accept(pick);
      ASSERT_EQ(constraint->text().size(), before + vocab->bytes(pick).size())
          << "allowed token rejected: " << constraint->text() << " + [" << vocab->bytes(pick)
          << "]";
    }
    ASSERT_TRUE(constraint->done()) << constraint->text();
    std::fill(logits.begin(), logits.end(), 0.0f);
    constraint->mask(logits);
    for (std::int32_t id = 0; id < vocab->vocab_size(); ++id) {
      const bool is_eos =
          std::find(vocab->eos_ids().begin(), vocab->eos_ids().end(), id) != vocab->eos_ids().end();
      ASSERT_EQ(logits[id] == 0.0f, is_eos);
    }

    // The family's parser reads the text back as one call whose input validates.
    std::vector<OutputEvent> events;
    for (OutputEvent& e : test::parse_all(constraint->text(), format, all_tools)) {
      if (e.kind == OutputEvent::Kind::ToolCallArgsDelta && events.back().kind == e.kind)
        events.back().text += e.text;  // the XML parser streams a call's arguments in pieces
      else
        events.push_back(std::move(e));
    }
    ASSERT_EQ(events.size(), 3u) << constraint->text();
    ASSERT_EQ(events[0].kind, OutputEvent::Kind::ToolCallStart);
    const auto it = std::find_if(all_tools.begin(), all_tools.end(),
                                 [&](const ToolSpec& t) { return t.name == events[0].name; });
    ASSERT_NE(it, all_tools.end());
    if (request.tool_choice.type == ToolChoiceType::Tool) {
      EXPECT_EQ(events[0].name, request.tool_choice.name);
    }
    const ojson args = ojson::parse(events[1].text);
    EXPECT_TRUE(test::valid_against(args, it->input_schema, it->input_schema))
        << constraint->text();
    ++stats.n_calls;
  }
}

TEST(ToolCallConstraint, RandomWalksStories260K) {
  const Tokenizer tok = Tokenizer::load_files_or_throw(
      test::testdata_file("models/stories260K/hf/tokenizer.json"),
      test::testdata_file("models/stories260K/hf/tokenizer_config.json"));
  ConstraintVocab vocab(tok);
  EXPECT_EQ(vocab.bytes(*tok.find_token("<0x0A>")), "\n");
  WalkStats stats;
  random_walks(tok, ToolCallFormat::Hermes, 60, stats);
  random_walks(tok, ToolCallFormat::Llama3Json, 20, stats);
  random_walks(tok, ToolCallFormat::Mistral, 20, stats);
  random_walks(tok, ToolCallFormat::QwenXml, 40, stats);
  EXPECT_EQ(stats.n_calls, 140);
  std::printf("stories260K: %d steps, mask %.3f ms/step mean, %.3f ms max\n", stats.n_steps,
              stats.total_ms / stats.n_steps, stats.max_ms);
}

TEST(ToolCallConstraint, RandomWalksQwen3WithMaskTiming) {
  const Tokenizer tok =
      Tokenizer::load_files_or_throw(test::testdata_file("tokenizers/qwen3/tokenizer.json"),
                                     test::testdata_file("tokenizers/qwen3/tokenizer_config.json"));
  const auto t0 = std::chrono::steady_clock::now();
  ConstraintVocab vocab(tok);
  const double build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(vocab.bytes(*tok.find_token("Ġthe")), " the");
  EXPECT_EQ(vocab.bytes(*tok.find_token("<tool_call>")), "<tool_call>");
  WalkStats stats;
  random_walks(tok, ToolCallFormat::Hermes, 24, stats);
  random_walks(tok, ToolCallFormat::QwenXml, 12, stats);
  EXPECT_EQ(stats.n_calls, 36);
  const double mean = stats.total_ms / stats.n_steps;
  std::printf(
      "qwen3 (%d tokens): vocab build %.0f ms; %d steps, mask %.3f ms/step mean, %.3f ms max\n",
      vocab.vocab_size(), build_ms, stats.n_steps, mean, stats.max_ms);
  EXPECT_LT(mean, 10.0);
}

}  // namespace
}  // namespace akv
