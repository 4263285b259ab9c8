// The Anthropic SSE writer enforces the event grammar clients depend on (api-notes §1.4).
#include "server/anthropic_response.h"
#include "server/openai_response.h"

#include <gtest/gtest.h>

namespace akv {
namespace {

using json = nlohmann::ordered_json;

struct Event {
  std::string name;
  json data;
};

std::vector<Event> parse_sse(const std::string& s) {
  std::vector<Event> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::size_t end = s.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event";
    const std::string ev = s.substr(pos, end - pos);
    pos = end + 2;
    const std::size_t nl = ev.find('\n');
    EXPECT_EQ(ev.rfind("event: ", 0), 0u);
    Event e{ev.substr(7, nl - 7), json::parse(ev.substr(nl + 7))};
    EXPECT_EQ(e.data["type"], e.name) << "JSON type must equal the event name";
    out.push_back(std::move(e));
  }
  return out;
}

TEST(AnthropicSse, BlocksAreSequentialTypedAndClosed) {
  std::string wire;
  AnthropicSseWriter w("msg_1", "m", [&wire](std::string_view s) {
    wire += s;
    return true;
  });
  ReplyUsage u{.prompt_tokens = 100, .cached_tokens = 60, .output_tokens = 0};
  w.start(u);
  w.start(u);  // a second start is a no-op
  w.thinking("hmm");
  w.text("Hello");
  w.text(" world");
  w.tool_start("toolu_1", "Bash");
  w.tool_args("{\"command\":");
  w.tool_args("\"ls\"}");
  w.tool_end();
  w.tool_start("toolu_2", "Read");
  w.tool_args("{}");
  w.tool_end();
  u.output_tokens = 7;
  ReplyFinish f;
  f.reason = StopReason::ToolUse;
  f.usage = u;
  w.finish(f);

  const std::vector<Event> ev = parse_sse(wire);
  ASSERT_GE(ev.size(), 4u);
  EXPECT_EQ(ev.front().name, "message_start");
  EXPECT_EQ(ev.front().data["message"]["usage"]["input_tokens"], 40);
  EXPECT_EQ(ev.front().data["message"]["usage"]["cache_read_input_tokens"], 60);
  int starts = 0, open = -1, next_index = 0;
  std::string open_type;
  std::string args;
  for (const Event& e : ev) {
    if (e.name == "message_start") ++starts;
    if (e.name == "content_block_start") {
      ASSERT_EQ(open, -1) << "a block opened while another is open";
      EXPECT_EQ(e.data["index"], next_index++);
      open = e.data["index"];
      open_type = e.data["content_block"]["type"];
    }
    if (e.name == "content_block_delta") {
      EXPECT_EQ(e.data["index"], open);
      const std::string dt = e.data["delta"]["type"];
      if (open_type == "text") {
        EXPECT_EQ(dt, "text_delta");
      }
      if (open_type == "tool_use") {
        EXPECT_EQ(dt, "input_json_delta");
        args += e.data["delta"]["partial_json"].get<std::string>();
      }
      if (open_type == "thinking") {
        EXPECT_TRUE(dt == "thinking_delta" || dt == "signature_delta");
      }
    }
    if (e.name == "content_block_stop") {
      EXPECT_EQ(e.data["index"], open);
      open = -1;
    }
  }
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(next_index, 4);  // thinking, text, two tool calls
  EXPECT_EQ(args, "{\"command\":\"ls\"}{}");
  EXPECT_EQ(ev[ev.size() - 2].name, "message_delta");
  EXPECT_EQ(ev[ev.size() - 2].data["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(ev[ev.size() - 2].data["usage"]["output_tokens"], 7);
  EXPECT_EQ(ev.back().name, "message_stop");
}

TEST(AnthropicSse, AFailureAfterTheStartIsAnErrorEvent) {
  std::string wire;
  AnthropicSseWriter w("msg_1", "m", [&wire](std::string_view s) {
    wire += s;
    return true;
  });
  w.start({.prompt_tokens = 10});
  w.text("partial");
  w.error("overloaded_error", "Overloaded");
  const std::vector<Event> ev = parse_sse(wire);
  ASSERT_EQ(ev.size(), 4u);  // message_start, block start, delta, error (the stream then ends)
  EXPECT_EQ(ev[0].name, "message_start");
  EXPECT_EQ(ev.back().name, "error");
  EXPECT_EQ(ev.back().data["error"]["type"], "overloaded_error");
  EXPECT_EQ(ev.back().data["error"]["message"], "Overloaded");
}

TEST(OpenAiChunks, AFailureAfterTheStartIsAnErrorChunkThenDone) {
  std::string wire;
  OpenAiChunkWriter w("chatcmpl-1", "m", 1, /*include_usage=*/false, [&wire](std::string_view s) {
    wire += s;
    return true;
  });
  w.start({});
  w.error("server_error", "boom");
  const std::string expected_tail = "data: [DONE]\n\n";
  ASSERT_GE(wire.size(), expected_tail.size());
  EXPECT_EQ(wire.substr(wire.size() - expected_tail.size()), expected_tail);
  const std::size_t at = wire.find("data: {\"error\"");
  ASSERT_NE(at, std::string::npos);
  const json e = json::parse(wire.substr(at + 6, wire.find("\n\n", at) - at - 6));
  EXPECT_EQ(e["error"]["type"], "server_error");
  EXPECT_EQ(e["error"]["message"], "boom");
}

TEST(OpenAiChunks, RoleFirstToolCallsIndexedUsageLastThenDone) {
  std::string wire;
  OpenAiChunkWriter w("chatcmpl-1", "m", 1, /*include_usage=*/true, [&wire](std::string_view s) {
    wire += s;
    return true;
  });
  w.start({});
  w.text("hi");
  w.tool_start("call_1", "f");
  w.tool_args("{\"a\":1}");
  ReplyFinish f;
  f.reason = StopReason::ToolUse;
  f.usage = {.prompt_tokens = 5, .cached_tokens = 2, .output_tokens = 3};
  w.finish(f);
  std::vector<json> chunks;
  std::size_t pos = 0;
  while (pos < wire.size()) {
    const std::size_t end = wire.find("\n\n", pos);
    ASSERT_EQ(wire.compare(pos, 6, "data: "), 0);
    chunks.push_back(wire.substr(pos + 6, end - pos - 6) == "[DONE]" ? json("[DONE]") : json::parse(wire.substr(pos + 6, end - pos - 6)));
    pos = end + 2;
  }
  ASSERT_EQ(chunks.size(), 7u);  // role, text, tool start, tool args, finish, usage, [DONE]
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(chunks[0]["usage"].is_null());
  const json& call = chunks[2]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(call["index"], 0);
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "f");
  EXPECT_EQ(chunks[4]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(chunks[4]["choices"][0]["delta"].empty());
  EXPECT_TRUE(chunks[5]["choices"].is_array() && chunks[5]["choices"].empty());
  EXPECT_EQ(chunks[5]["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(chunks[6], "[DONE]");
}

}  // namespace
}  // namespace akv
