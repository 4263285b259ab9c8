// data/template_goldens_2026.json (tools/make_template_goldens.py: Python jinja2 configured as
// transformers does): GPT-OSS's harmony template and Qwen3-Coder's over the shared conversations
// and conversations with object arguments, tool results, reasoning and reasoning effort. Our
// template engine must render each byte for byte, or fail with the same error.
#include <gtest/gtest.h>

#include <map>

#include "base/mapped_file.h"
#include "chat/chat_template.h"
#include "chat_testdata.h"

namespace akv {
namespace {

TEST(ChatTemplateGolden2026, HarmonyAndQwen3CoderRenderLikeJinja2) {
  const auto golden = nlohmann::ordered_json::parse(
      read_file_or_throw(std::string(AGENTKV_TEST_SOURCE_DIR) + "/data/template_goldens_2026.json"));
  std::map<std::string, ChatTemplate> templates;
  ChatRenderOptions options;
  options.clock = test::pinned_clock;
  int n_cases = 0, n_errors = 0;
  for (const auto& c : golden.at("cases")) {
    ++n_cases;
    const std::string rel = c.at("template").get<std::string>();
    SCOPED_TRACE(rel + " / " + c.at("conversation").get<std::string>());
    if (!templates.count(rel))
      templates.emplace(rel, ChatTemplate::parse_or_throw(read_file_or_throw(test::testdata_file(rel))));
    nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
    ctx["messages"] = c.at("messages");
    ctx["tools"] = c.at("tools");
    ctx["add_generation_prompt"] = c.at("add_generation_prompt");
    for (const auto& [k, v] : c.at("special_tokens").items()) ctx[k] = v;
    for (const auto& [k, v] : c.at("extra_kwargs").items()) ctx[k] = v;
    std::string outcome;
    try {
      outcome = "ok:" + templates.at(rel).render(ctx, options);
    } catch (const Error& e) {
      outcome = std::string("error:") + e.what();
    }
    if (c.contains("error")) {
      ++n_errors;
      // raise_exception's message must be exact; a Python error's text must end ours.
      const std::string expected = c.at("error").get<std::string>();
      const std::string prefix = "TemplateError: ";
      if (expected.starts_with(prefix)) {
        EXPECT_EQ(outcome, "error:" + expected.substr(prefix.size()));
      } else {
        const std::string message = expected.substr(expected.find(": ") + 2);
        EXPECT_TRUE(outcome.starts_with("error:") && outcome.ends_with(message)) << expected << "\n" << outcome;
      }
    } else {
      EXPECT_EQ(outcome, "ok:" + c.at("rendered").get<std::string>());
    }
  }
  EXPECT_EQ(n_cases, 28);
  EXPECT_EQ(n_errors, 2);
}

}  // namespace
}  // namespace akv
