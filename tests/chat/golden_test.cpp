// goldens/chat_templates.json: transformers 5.17's renderings of every shipped template over
// seven conversations, byte for byte, and its expected errors. Token ids are checked by the
// tokenizer's tests, not here (this test does not depend on src/tokenizer).
#include <gtest/gtest.h>

#include <map>

#include "chat/chat_template.h"
#include "chat_testdata.h"

namespace akv {
namespace {

std::string template_source(const std::string& rel) {
  if (rel.ends_with(".jinja")) return read_file_or_throw(test::testdata_file(rel));
  const nlohmann::ordered_json config = test::load_testdata_json(rel);
  const auto& t = config.at("chat_template");
  if (t.is_string()) return t.get<std::string>();
  for (const auto& named : t) {
    if (named.at("name") == "default") return named.at("template").get<std::string>();
  }
  throw Error(ErrorKind::NotFound, rel + ": no default chat template");
}

TEST(ChatTemplateGolden, TransformersRenderingsAndErrors) {
  const nlohmann::ordered_json golden = test::load_testdata_json("goldens/chat_templates.json");
  std::map<std::string, ChatTemplate> templates;
  ChatRenderOptions options;
  options.clock = test::pinned_clock;

  int n_total = 0, n_pass = 0, n_errors_expected = 0;
  std::vector<std::string> failures;
  for (const auto& c : golden.at("cases")) {
    ++n_total;
    const std::string name =
        c.at("template").get<std::string>() + " / " + c.at("conversation").get<std::string>();
    std::string outcome;
    try {
      const std::string rel = c.at("template").get<std::string>();
      if (!templates.count(rel))
        templates.emplace(rel, ChatTemplate::parse_or_throw(template_source(rel)));
      nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
      ctx["messages"] = c.at("messages");
      ctx["tools"] = c.at("tools");
      ctx["add_generation_prompt"] = c.at("add_generation_prompt");
      for (const auto& [k, v] : c.at("special_tokens").items()) ctx[k] = v;
      for (const auto& [k, v] : c.at("extra_kwargs").items()) ctx[k] = v;
      outcome = "ok:" + templates.at(rel).render(ctx, options);
    } catch (const Error& e) {
      outcome = std::string("error:") + e.what();
    }
    bool pass;
    if (c.contains("error")) {
      ++n_errors_expected;
      // "TemplateError: msg" is raise_exception(msg): the message must be exact. Other Python
      // errors ("TypeError: ...") must appear in ours after the line/column prefix.
      const std::string expected = c.at("error").get<std::string>();
      const std::string prefix = "TemplateError: ";
      if (expected.starts_with(prefix)) {
        pass = outcome == "error:" + expected.substr(prefix.size());
      } else {
        pass = outcome.starts_with("error:") && outcome.ends_with(expected);
      }
      if (!pass) failures.push_back(name + ": expected error '" + expected + "', got " + outcome);
    } else {
      pass = outcome == "ok:" + c.at("rendered").get<std::string>();
      if (!pass) {
        failures.push_back(name + ":\n--- expected\n" + c.at("rendered").get<std::string>() +
                           "\n--- got\n" + outcome);
      }
    }
    n_pass += pass;
  }
  std::printf("chat_templates.json: %d/%d pass (%d expected errors)\n", n_pass, n_total,
              n_errors_expected);
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(n_total, 150);
  EXPECT_EQ(n_errors_expected, 9);
  EXPECT_EQ(n_pass, n_total);
}

}  // namespace
}  // namespace akv
