// The Qwen3.5 chat template (../shared/testdata/chat-templates/templates/llama.cpp-2026/
// Qwen3.5-4B.jinja, the hybrid Qwen3.5 family's) renders byte for byte as Jinja2 renders it in
// transformers' environment: system prompt, tools with XML-style tool calls and grouped tool
// responses, reasoning blocks, enable_thinking=false, and its raise_exception errors.
// Expectations: data/qwen35_template_golden.json, written by tools/qwen35_template_golden.py.
#include <gtest/gtest.h>

#include <filesystem>

#include "chat/chat_template.h"
#include "chat_testdata.h"

namespace akv {
namespace {

TEST(Qwen35Template, RendersLikeJinja2) {
  const nlohmann::ordered_json golden = nlohmann::ordered_json::parse(
      read_file_or_throw(std::string(AGENTKV_TEST_SOURCE_DIR) + "/data/qwen35_template_golden.json"));
  const ChatTemplate t = ChatTemplate::parse_or_throw(
      read_file_or_throw(test::testdata_file(golden.at("template").get<std::string>())));
  int n_cases = 0;
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
    for (const char* key : {"messages", "tools", "add_generation_prompt", "enable_thinking"})
      if (c.contains(key)) ctx[key] = c.at(key);
    if (c.contains("error")) {
      try {
        t.render(ctx);
        ADD_FAILURE() << "expected the error " << c.at("error");
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(c.at("error").get<std::string>()), std::string::npos)
            << e.what();
      }
    } else {
      EXPECT_EQ(t.render(ctx), c.at("output").get<std::string>());
    }
    ++n_cases;
  }
  EXPECT_EQ(n_cases, 4);
}

}  // namespace
}  // namespace akv
