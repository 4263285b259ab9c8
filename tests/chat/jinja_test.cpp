// Unit tests of the Jinja interpreter: whitespace control, Python-compatible printing,
// tojson, errors with positions, raise_exception and the render limits.
#include <gtest/gtest.h>

#include "chat/chat_template.h"

namespace akv {
namespace {

std::string render(const std::string& source, const nlohmann::ordered_json& ctx = {}) {
  return ChatTemplate::parse_or_throw(source).render(
      ctx.is_null() ? nlohmann::ordered_json::object() : ctx);
}

TEST(Jinja, PythonPrinting) {
  EXPECT_EQ(render("{{ true }}|{{ none }}|{{ 1.0 }}|{{ 7 // 2 }}|{{ 7 / 2 }}|{{ -7 % 3 }}"),
            "True|None|1.0|3|3.5|2");
  EXPECT_EQ(render("{{ ['a', \"b'c\", 1, 2.5, none] }}"), "['a', \"b'c\", 1, 2.5, None]");
  EXPECT_EQ(render("{{ {'a': 1, 'b': [true]} }}"), "{'a': 1, 'b': [True]}");
  EXPECT_EQ(render("{{ (1,) }}{{ 1e20 }}{{ 0.00001 }}"),
            "(1,)1e+20"
            "1e-05");
  EXPECT_EQ(render("{{ undefined_name }}|{{ 'x' ~ 1 }}"), "|x1");
}

TEST(Jinja, WhitespaceControlAsTransformers) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before it.
  EXPECT_EQ(render("a\n  {% if true %}\nb\n  {% endif %}\nc"), "a\nb\nc");
  EXPECT_EQ(render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(render("x\n{# note #}\ny\n"), "x\ny");
  EXPECT_EQ(render("{% for i in range(3) %}{{ i }}{% if not loop.last %},{% endif %}{% endfor %}"),
            "0,1,2");
}

TEST(Jinja, TojsonMatchesPythonJsonDumps) {
  nlohmann::ordered_json ctx;
  ctx["x"] = nlohmann::ordered_json::parse(R"({"b": 1, "a": ["é", 1.5, null, true]})");
  EXPECT_EQ(render("{{ x|tojson }}", ctx), R"({"b": 1, "a": ["é", 1.5, null, true]})");
  EXPECT_EQ(render("{{ x|tojson(indent=2) }}", ctx),
            "{\n  \"b\": 1,\n  \"a\": [\n    \"é\",\n    1.5,\n    null,\n    true\n  ]\n}");
  EXPECT_EQ(render("{{ x|tojson(sort_keys=true) }}", ctx),
            R"({"a": ["é", 1.5, null, true], "b": 1})");
}

TEST(Jinja, ScopingNamespaceAndMacros) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1] %}{% set ns.x = 2 %}{% endfor %}"
                   "{{ ns.x }}"),
            "2");
  EXPECT_EQ(
      render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m('A') }}{{ m(1, b=2) }}"),
      "AB12");
  EXPECT_EQ(render("{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}in{% endcall %}"),
            "[in]");
}

TEST(Jinja, LoopsFiltersAndMethods) {
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(
      render("{% for x in [1, 2, 3, 4] if x is even %}{{ loop.index }}:{{ x }}/{{ loop.length }}"
             "{% endfor %}"),
      "1:2/2"
      "2:4/2");
  EXPECT_EQ(render("{% for a, b in [(1, 'x'), (2, 'y')] %}{{ loop.previtem }}{{ a }}{{ b }}"
                   "{{ loop.nextitem }};{% endfor %}"),
            "1x(2, 'y');(1, 'x')2y;");
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}"
                   "{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
            "02");
  EXPECT_EQ(render("{{ 'abcdef'[1:5:2] }}{{ [1, 2, 3][::-1] }}{{ 'héllo'|length }}"),
            "bd[3, 2, 1]5");
  EXPECT_EQ(render("{{ {'b': 1, 'A': 2}|dictsort }}"), "[('A', 2), ('b', 1)]");
  EXPECT_EQ(render("{{ [1, 2, 3]|batch(2)|list }}{{ [3, 1, 2]|sort(reverse=true) }}"),
            "[[1, 2], [3]][3, 2, 1]");
  EXPECT_EQ(render("{{ ' a b '.split() }}{{ 'a,b,c'.rsplit(',', 1) }}{{ '  x '.strip() }}|"
                   "{{ 'xxhixx'.strip('x') }}{{ 'Hi'.startswith(('a', 'H')) }}"),
            "['a', 'b']['a,b', 'c']x|hiTrue");
  EXPECT_EQ(render("{{ [{'r': 'u'}, {'r': 'a'}]|selectattr('r', 'equalto', 'a')|list }}"
                   "{{ [{'r': 'u'}]|map(attribute='r')|join(',') }}"),
            "[{'r': 'a'}]u");
  EXPECT_EQ(render("{{ {'a': 1}.get('b', 'dflt') }}{{ x is defined }}{{ none is none }}"
                   "{{ 3 is divisibleby 3 }}{{ 'a' if false }}"),
            "dfltFalseTrueTrue");
  EXPECT_EQ(render("{% set x %}block {{ 1 }}{% endset %}{{ x|upper }}"), "BLOCK 1");
  EXPECT_EQ(render("{% generation %}gen{% endgeneration %}{% filter upper %}f{% endfilter %}"),
            "genF");
}

TEST(Jinja, SyntaxErrorsCarryLineAndColumn) {
  try {
    ChatTemplate::parse_or_throw("ok\n{% if x %}\n{{ 1 + }}");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadFormat);
    EXPECT_TRUE(std::string(e.what()).starts_with("line 3, column ")) << e.what();
  }
  EXPECT_THROW(ChatTemplate::parse_or_throw("{% for x in y %}"), Error);
  EXPECT_THROW(ChatTemplate::parse_or_throw("{{ 'abc }}"), Error);
}

TEST(Jinja, RaiseExceptionCarriesTheMessage) {
  try {
    render("{{ raise_exception('Roles must alternate!') }}");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_STREQ(e.what(), "Roles must alternate!");
  }
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
  try {
    render("\n\n{{ 'a' + 1 }}");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_TRUE(std::string(e.what()).starts_with("line 3, column ")) << e.what();
    EXPECT_NE(std::string(e.what()).find("TypeError: can only concatenate str"), std::string::npos);
  }
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  ChatRenderOptions options;
  options.limits.max_steps = 100000;
  options.limits.max_output_bytes = 1 << 16;
  const auto t1 = ChatTemplate::parse_or_throw("{% for i in range(1000000) %}{% endfor %}");
  EXPECT_THROW(t1.render(nlohmann::ordered_json::object(), options), Error);
  const auto t2 = ChatTemplate::parse_or_throw("{{ 'x' * 1000000 }}");
  EXPECT_THROW(t2.render(nlohmann::ordered_json::object(), options), Error);
  const auto t3 = ChatTemplate::parse_or_throw("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  EXPECT_THROW(t3.render(nlohmann::ordered_json::object(), options), Error);
  EXPECT_THROW(ChatTemplate::parse_or_throw("{{ " + std::string(1000, '(') + "1"), Error);
}

TEST(Jinja, StrftimeNowUsesTheInjectedClock) {
  ChatRenderOptions options;
  options.clock = [] {
    std::tm tm{};
    tm.tm_year = 124;
    tm.tm_mon = 6;
    tm.tm_mday = 26;
    tm.tm_hour = 12;
    tm.tm_isdst = -1;
    return std::chrono::system_clock::from_time_t(std::mktime(&tm));
  };
  const auto t = ChatTemplate::parse_or_throw("{{ strftime_now('%d %b %Y') }}");
  EXPECT_EQ(t.render(nlohmann::ordered_json::object(), options), "26 Jul 2024");
}

}  // namespace
}  // namespace akv
