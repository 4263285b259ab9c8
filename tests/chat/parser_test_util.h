// Test helpers shared by the output parser tests: run a parser over pieces, summarise its events
// ("T:text", "R:reasoning", "C:name:args" with adjacent deltas joined), and check that every
// split of the input gives the same summary.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/qwen_xml_call_parser.h"
#include "chat/tool_call_parser.h"

namespace akv::test {

// The whole of `text` through the output parser of `format` (QwenXml's needs the tools, for the
// parameter types).
inline std::vector<OutputEvent> parse_all(std::string_view text, ToolCallFormat format,
                                          const std::vector<ToolSpec>& tools) {
  std::vector<OutputEvent> events, tail;
  if (format == ToolCallFormat::QwenXml) {
    QwenXmlCallParser parser({.tools = tools});
    events = parser.feed(text);
    tail = parser.finish();
  } else {
    ToolCallParser parser({.format = format});
    events = parser.feed(text);
    tail = parser.finish();
  }
  events.insert(events.end(), tail.begin(), tail.end());
  return events;
}

struct ParsedOutput {
  std::vector<std::string> summary;
  int n_calls = 0;
  int n_complete_calls = 0;
  int n_arg_fragments = 0;
};

// A call's fragments must join to a JSON object (checked here).
inline std::vector<std::string> summarize_events(const std::vector<OutputEvent>& events, int* n_fragments = nullptr) {
  std::vector<std::string> out;
  bool in_call = false;
  std::string args;
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case OutputEvent::Kind::TextDelta:
      case OutputEvent::Kind::ThinkingDelta: {
        EXPECT_FALSE(in_call);
        EXPECT_FALSE(e.text.empty());
        const std::string tag = e.kind == OutputEvent::Kind::TextDelta ? "T:" : "R:";
        if (!out.empty() && out.back().starts_with(tag))
          out.back() += e.text;
        else
          out.push_back(tag + e.text);
        break;
      }
      case OutputEvent::Kind::ToolCallStart:
        EXPECT_FALSE(in_call);
        EXPECT_FALSE(e.id.empty());
        in_call = true;
        args.clear();
        out.push_back("C:" + e.name + ":");
        break;
      case OutputEvent::Kind::ToolCallArgsDelta:
        EXPECT_TRUE(in_call);
        EXPECT_FALSE(e.text.empty());
        args += e.text;
        if (n_fragments) ++*n_fragments;
        break;
      case OutputEvent::Kind::ToolCallEnd: {
        EXPECT_TRUE(in_call);
        in_call = false;
        const auto parsed = nlohmann::ordered_json::parse(args, nullptr, false);
        EXPECT_TRUE(parsed.is_object()) << args;
        out.back() += args;
        break;
      }
    }
  }
  EXPECT_FALSE(in_call);
  return out;
}

// `make()` gives a fresh parser (feed/finish/n_tool_calls/n_complete_calls).
template <typename Make>
ParsedOutput run_parser(const Make& make, const std::vector<std::string_view>& pieces) {
  auto parser = make();
  std::vector<OutputEvent> events;
  for (auto piece : pieces) {
    auto ev = parser.feed(piece);
    events.insert(events.end(), ev.begin(), ev.end());
  }
  auto ev = parser.finish();
  events.insert(events.end(), ev.begin(), ev.end());
  ParsedOutput out;
  out.summary = summarize_events(events, &out.n_arg_fragments);
  out.n_calls = parser.n_tool_calls();
  out.n_complete_calls = parser.n_complete_calls();
  return out;
}

// Whole, split at every byte boundary, and byte by byte: the same summary.
template <typename Make>
ParsedOutput check_every_split(const Make& make, std::string_view output, const std::vector<std::string>& expected) {
  SCOPED_TRACE(std::string(output));
  const ParsedOutput whole = run_parser(make, {output});
  EXPECT_EQ(whole.summary, expected);
  for (std::size_t i = 0; i <= output.size(); ++i) {
    SCOPED_TRACE("split at " + std::to_string(i));
    const ParsedOutput split = run_parser(make, {output.substr(0, i), output.substr(i)});
    EXPECT_EQ(split.summary, expected);
    if (split.summary != expected) break;
  }
  std::vector<std::string_view> bytes;
  for (std::size_t i = 0; i < output.size(); ++i) bytes.push_back(output.substr(i, 1));
  const ParsedOutput by_byte = run_parser(make, bytes);
  EXPECT_EQ(by_byte.summary, expected);
  EXPECT_EQ(by_byte.n_complete_calls, whole.n_complete_calls);
  return by_byte;
}

// Cut after every byte (max_tokens there): every call still joins to a JSON object (checked by
// summarize_events), and no more calls count as complete than in the whole output.
template <typename Make>
void check_every_cut(const Make& make, std::string_view output) {
  SCOPED_TRACE(std::string(output));
  const int n_complete = run_parser(make, {output}).n_complete_calls;
  for (std::size_t i = 0; i <= output.size(); ++i) {
    SCOPED_TRACE("cut at " + std::to_string(i));
    const ParsedOutput cut = run_parser(make, {output.substr(0, i)});
    ASSERT_LE(cut.n_complete_calls, n_complete);
    ASSERT_LE(cut.n_complete_calls, cut.n_calls);
  }
}

}  // namespace akv::test
