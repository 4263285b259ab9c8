// Bounds on what a client can make chat/ do: JSON nesting is measured before any tree is built
// (deep trees overflow the stack in nlohmann's recursive copies), template values refuse depth
// before recursing, and a prompt far past the context is refused after encoding about a
// context's worth of tokens, not all of it (a 32 MiB body was 13 s of tokenizing).
#include <gtest/gtest.h>

#include <pthread.h>

#include <algorithm>
#include <ctime>
#include <functional>
#include <memory>
#include <string>

#include "base/error.h"
#include "chat/json_depth.h"
#include "chat/prompt_builder.h"
#include "chat/tool_call_parser.h"
#include "chat/value.h"
#include "chat_testdata.h"
#include "tokenizer/tokenizer.h"

namespace akv {
namespace {

using ojson = nlohmann::ordered_json;

const Tokenizer& qwen3() {
  static const auto tokenizer = std::make_unique<Tokenizer>(Tokenizer::load_files_or_throw(
      test::testdata_file("tokenizers/qwen3/tokenizer.json"),
      test::testdata_file("tokenizers/qwen3/tokenizer_config.json")));
  return *tokenizer;
}

// Varied prose, so the BPE word cache does not make it cheap.
std::string prose(std::size_t bytes) {
  std::string s;
  s.reserve(bytes + 64);
  for (std::size_t i = 0; s.size() < bytes; ++i)
    s += "Line " + std::to_string(i * 7919 % 100003) +
         " of the log: value=" + std::to_string(i * i % 9973) + " ok.\n";
  s.resize(bytes);
  return s;
}

TEST(JsonDepth, CountsBracketsOutsideStrings) {
  EXPECT_EQ(json_nesting_depth("1", 10), 0);
  EXPECT_EQ(json_nesting_depth(R"({"a":[1,{"b":[]}]})", 10), 4);
  EXPECT_EQ(json_nesting_depth(R"({"a":"[[[[{{{{\"[[[["})", 10),
            1);                                            // in a string, escaped quote too
  EXPECT_EQ(json_nesting_depth(R"(["\\",[[]]])", 10), 3);  // an escaped backslash ends no string
  EXPECT_EQ(json_nesting_depth(std::string(15000, '[') + std::string(15000, ']'), 128),
            129);  // stops early
  EXPECT_TRUE(
      parse_json_or_discarded(std::string(200, '[') + std::string(200, ']'), 128).is_discarded());
  EXPECT_EQ(parse_json_or_discarded(R"({"a":[1]})", 128).dump(), R"({"a":[1]})");
  EXPECT_TRUE(parse_json_or_discarded("{", 128).is_discarded());
}

// Runs `fn` on a thread with a stack of `bytes`, as small as a worker's might be.
void run_on_small_stack(std::size_t bytes, std::function<void()> fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t thread;
  auto call = [](void* f) -> void* {
    (*static_cast<std::function<void()>*>(f))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, call, &fn), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

TEST(ValueFromJson, RefusesDepthBeforeRecursing) {
  // 15000 levels: recursing to the bottom before checking overflows a 512 KiB stack.
  const ojson deep = ojson::parse(std::string(15000, '[') + std::string(15000, ']'));
  std::string error;
  run_on_small_stack(512 << 10, [&] {
    try {
      jinja::Value::from_json(deep);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  EXPECT_NE(error.find("nested deeper than 256"), std::string::npos) << error;
  const ojson ok = ojson::parse(std::string(256, '[') + std::string(256, ']'));
  EXPECT_EQ(jinja::value_depth(jinja::Value::from_json(ok)), 256);
  const ojson one_more = ojson::parse(std::string(257, '[') + std::string(257, ']'));
  EXPECT_THROW(jinja::Value::from_json(one_more), Error);
}

TEST(ToolCallParser, DeepArgumentsFromTheModelAreNotACall) {
  // The model writes arguments as a JSON string 15000 levels deep: parsed and re-dumped, that
  // recursed to the bottom.
  std::string deep;
  for (int i = 0; i < 15000; ++i) deep += "{\"a\":";
  deep += "1" + std::string(15000, '}');
  const std::string reply =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": " + ojson(deep).dump() + "}\n</tool_call>";
  int n_calls = -1;
  run_on_small_stack(512 << 10, [&] {
    ToolCallParser parser({.format = ToolCallFormat::Hermes});
    const auto events = parser.feed(reply);
    const auto last = parser.finish();
    n_calls = parser.n_tool_calls();
  });
  EXPECT_EQ(n_calls, 0);
}

// Text whose pieces the text past a cut could change: whitespace runs, digits, composing marks,
// CJK, emoji, punctuation runs, special-token look-alikes.
std::string mixed(std::size_t bytes) {
  static const char* kParts[] = {"Hello  world",
                                 "\n\n\t  ",
                                 "e\xCC\x81t\xC3\xA9 ",
                                 "12345678 ",
                                 "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
                                 "\xF0\x9F\x98\x80!! ",
                                 "====----",
                                 "<|im_end|>",
                                 "don't ",
                                 "    \n",
                                 "\xE1\x84\x80\xE1\x85\xA1 "};
  std::string s;
  for (std::size_t i = 0; s.size() < bytes; ++i) s += kParts[(i * 7 + i / 11) % std::size(kParts)];
  return s;
}

TEST(EncodeUpTo, SameIdsUnderTheBoundTheFullIdsInOrderPastIt) {
  // Tokenizers whose pre-tokenizer splits text into words give the full encoding's ids in
  // order; for those where a whole text is one word (mistral-v0.3, llama2) the ids past the
  // bound are those of the word's beginning.
  for (const auto& [name, splits] : {std::pair{"qwen3", true}, {"llama3", true}, {"gemma3", true},
                                     {"mistral-v0.3", false}, {"llama2", false}}) {
    const std::string dir = std::string("tokenizers/") + name;
    std::string config;
    try {
      config = test::testdata_file(dir + "/tokenizer_config.json");
    } catch (const Error&) {
    }
    const Tokenizer tok =
        Tokenizer::load_files_or_throw(test::testdata_file(dir + "/tokenizer.json"), config);
    for (const std::string& text : {prose(30000), mixed(30000)}) {
      const auto all = tok.encode(text, false);
      EXPECT_EQ(tok.encode_up_to(text, false, all.size()), all) << name;
      EXPECT_EQ(tok.encode_up_to(text, false, SIZE_MAX), all) << name;
      for (std::size_t bound :
           {std::size_t{0}, std::size_t{10}, std::size_t{100}, std::size_t{1000}, all.size() - 1}) {
        const auto part = tok.encode_up_to(text, false, bound);
        ASSERT_GT(part.size(), bound) << name;
        if (!splits) continue;
        ASSERT_LE(part.size(), all.size()) << name;
        EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin()))
            << name << " bound " << bound;
      }
    }
  }
}

// This thread's CPU time: the bounds below are on the work done, which a loaded machine does not
// stretch the way it stretches wall time.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

TEST(PromptBound, AHugePromptIsRefusedQuickly) {
  PromptBuilder builder(qwen3());
  ChatRequest r;
  r.messages.push_back(
      {.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = prose(20u << 20)}}});
  constexpr std::size_t kContext = 32768;
  const double t0 = thread_cpu_seconds();
  const BuiltPrompt p = builder.build(r, {}, kContext);
  const double seconds = thread_cpu_seconds() - t0;
  EXPECT_GT(p.tokens.size(), kContext);
  EXPECT_LT(p.tokens.size(), 2 * kContext) << "encoding went on past the bound";
  EXPECT_LT(seconds, 2.0) << "a 20 MB prompt took " << seconds << " s of CPU to refuse";
}

TEST(EncodeUpTo, OneGiantWordIsRefusedQuickly) {
  // llama2's tokenizer has no pre-tokenizer: a whole message is one BPE word.
  const Tokenizer tok =
      Tokenizer::load_files_or_throw(test::testdata_file("tokenizers/llama2/tokenizer.json"),
                                     test::testdata_file("tokenizers/llama2/tokenizer_config.json"));
  const std::string text = prose(20u << 20);
  const double t0 = thread_cpu_seconds();
  const auto ids = tok.encode_up_to(text, true, 32768);
  const double seconds = thread_cpu_seconds() - t0;
  EXPECT_GT(ids.size(), 32768u);
  EXPECT_LT(seconds, 2.0) << "a 20 MB word took " << seconds << " s of CPU to refuse";
}

TEST(PromptBound, APromptUnderTheBoundIsWhole) {
  PromptBuilder builder(qwen3());
  ChatRequest r;
  r.messages.push_back(
      {.role = ChatRole::User, .blocks = {{.type = BlockType::Text, .text = prose(4000)}}});
  const BuiltPrompt whole = builder.build(r);
  EXPECT_EQ(builder.build(r, {}, whole.tokens.size()).tokens, whole.tokens);
  EXPECT_GT(builder.build(r, {}, whole.tokens.size() - 1).tokens.size(), whole.tokens.size() - 1);
}

}  // namespace
}  // namespace akv
