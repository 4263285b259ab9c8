// chat-templates/hfjs: huggingface.js' e2e chat templates (reference: transformers 5.17's
// output) and its Jinja feature cases (reference: Python Jinja2 3.1.6's output; "<<ERROR: X>>"
// means Python raised X and we must raise an error mentioning it).
#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "chat_testdata.h"

namespace akv {
namespace {

// Renders `source` with `context`; returns the text or "<<ERROR: message>>".
std::string render_or_error(const std::string& source, const nlohmann::ordered_json& context,
                            const ChatRenderOptions& options) {
  try {
    return ChatTemplate::parse_or_throw(source).render(context, options);
  } catch (const Error& e) {
    return std::string("<<ERROR: ") + e.what() + ">>";
  }
}

bool matches(const std::string& expected, const std::string& got) {
  if (expected.starts_with("<<ERROR: ")) {
    // Python's message is "Kind: detail"; ours is prefixed with "line L, column C: ".
    const std::string detail = expected.substr(9, expected.size() - 11);
    return got.starts_with("<<ERROR: ") && got.find(detail) != std::string::npos;
  }
  return expected == got;
}

TEST(ChatTemplateHfjs, E2eCasesMatchTransformers) {
  const nlohmann::ordered_json cases =
      test::load_testdata_json("chat-templates/hfjs/chat_template_e2e_cases.json");
  ChatRenderOptions options;
  options.clock = test::pinned_clock;
  int n_total = 0, n_pass = 0;
  for (const char* group : {"default_templates", "custom_templates"}) {
    for (const auto& [name, c] : cases.at(group).items()) {
      ++n_total;
      const auto& ref = c.contains("transformers_5_17_output") ? c.at("transformers_5_17_output")
                                                               : c.at("python_jinja2_output");
      const std::string expected = ref.get<std::string>();
      const std::string got = render_or_error(c.at("chat_template"), c.at("data"), options);
      if (matches(expected, got)) {
        ++n_pass;
      } else {
        ADD_FAILURE() << name << ":\n--- expected\n" << expected << "\n--- got\n" << got;
      }
    }
  }
  std::printf("chat_template_e2e_cases.json: %d/%d pass\n", n_pass, n_total);
  EXPECT_EQ(n_total, 53);
  EXPECT_EQ(n_pass, n_total);
}

TEST(ChatTemplateHfjs, FeatureCasesMatchPythonJinja2) {
  const nlohmann::ordered_json cases =
      test::load_testdata_json("chat-templates/hfjs/jinja_feature_cases.json");
  ChatRenderOptions options;
  options.clock = test::pinned_clock;
  options.transformers_defaults = false;  // the reference rendered the bare context
  int n_total = 0, n_pass = 0;
  for (const auto& [name, c] : cases.at("cases").items()) {
    ++n_total;
    const std::string expected = c.at("python_jinja2_output").get<std::string>();
    const std::string got = render_or_error(c.at("template"), c.at("context"), options);
    if (matches(expected, got)) {
      ++n_pass;
    } else {
      ADD_FAILURE() << name << ": template\n"
                    << c.at("template").get<std::string>() << "\n--- expected\n"
                    << expected << "\n--- got\n"
                    << got;
    }
  }
  std::printf("jinja_feature_cases.json: %d/%d pass\n", n_pass, n_total);
  EXPECT_EQ(n_total, 157);
  EXPECT_EQ(n_pass, n_total);
}

}  // namespace
}  // namespace akv
