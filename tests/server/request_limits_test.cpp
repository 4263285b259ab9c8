// Hostile and careless request bodies (issue 13): deep nesting, invalid UTF-8, bytes after the
// JSON, and fields of the wrong type or size must each be a 400 naming the field, through the
// same calls the route handlers make (fields::parse_body, then parse_*), never a crash or a 5xx.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "server/anthropic_request.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_request.h"

namespace akv {
namespace {

using json = nlohmann::ordered_json;

constexpr int kIssueDepth = 15000;  // the depth that overflowed the stack (a ~30 KB body)

std::string deep_object(int levels) {
  std::string s;
  for (int i = 0; i < levels; ++i) s += "{\"a\":";
  s += "1";
  s.append(static_cast<std::size_t>(levels), '}');
  return s;
}

std::string deep_array(int levels) {
  return std::string(static_cast<std::size_t>(levels), '[') +
         std::string(static_cast<std::size_t>(levels), ']');
}

// JSON string literal holding `text` (quotes and backslashes escaped).
std::string quoted(const std::string& text) {
  return json(text).dump();
}

enum class Route { Messages, CountTokens, Chat, Completions };

// What a route handler does with the body, up to the engine. The error's message, "" if none.
std::string error_of(Route route, const std::string& body) {
  try {
    const json j = fields::parse_body(body);
    switch (route) {
      case Route::Messages:
        parse_anthropic_messages(j);
        break;
      case Route::CountTokens:
        parse_anthropic_count_tokens(j);
        break;
      case Route::Chat:
        parse_openai_chat(j);
        break;
      case Route::Completions:
        parse_openai_completion(j);
        break;
    }
  } catch (const Error& e) {
    // Every one of these is the client's mistake: a 400 that is not retried.
    EXPECT_EQ(api_error_from(e).status, 400) << e.what();
    EXPECT_NO_THROW(error_body(api_error_from(e), Dialect::Anthropic, "req_1").dump())
        << "the error body must dump";
    return e.what();
  }
  return "";
}

void expect_error(Route route, const std::string& body, const std::string& needle) {
  const std::string e = error_of(route, body);
  EXPECT_NE(e.find(needle), std::string::npos)
      << "body: " << body.substr(0, 300) << "\nerror: " << e;
}

const std::string kUser = R"({"role":"user","content":"hi"})";

std::string messages_body(const std::string& extra,
                          const std::string& messages = "[" + kUser + "]") {
  return R"({"model":"m","max_tokens":8,"messages":)" + messages +
         (extra.empty() ? "" : "," + extra) + "}";
}

std::string chat_body(const std::string& extra, const std::string& messages = "[" + kUser + "]") {
  return R"({"model":"m","messages":)" + messages + (extra.empty() ? "" : "," + extra) + "}";
}

const std::string kDepthError = "nested deeper than 128 levels";

TEST(RequestLimits, DeepInputSchemaIsA400) {
  const std::string tools =
      R"("tools":[{"name":"t","input_schema":)" + deep_object(kIssueDepth) + "}]";
  expect_error(Route::Messages, messages_body(tools), kDepthError);
  expect_error(Route::CountTokens, R"({"model":"m","messages":[)" + kUser + "]," + tools + "}",
               kDepthError);
}

TEST(RequestLimits, DeepToolUseInputIsA400) {
  const std::string messages =
      "[" + kUser +
      R"(,{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"t","input":)" +
      deep_object(kIssueDepth) + "}]}]";
  expect_error(Route::Messages, messages_body("", messages), kDepthError);
}

TEST(RequestLimits, DeepToolResultContentIsA400) {
  const std::string messages =
      R"([{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":)" +
      deep_array(kIssueDepth) + "}]}]";
  expect_error(Route::Messages, messages_body("", messages), kDepthError);
  expect_error(Route::CountTokens, R"({"model":"m","messages":)" + messages + "}", kDepthError);
}

TEST(RequestLimits, DeepFunctionParametersIsA400) {
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"f","parameters":)" +
                            deep_object(kIssueDepth) + "}}]";
  expect_error(Route::Chat, chat_body(tools), kDepthError);
}

TEST(RequestLimits, DeepArgumentsInAStringAreA400NamingTheField) {
  // The body itself is flat: the depth is inside the string, parsed a second time.
  const std::string messages =
      "[" + kUser +
      R"(,{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":)" +
      quoted(deep_object(kIssueDepth)) + "}}]}]";
  expect_error(Route::Chat, chat_body("", messages),
               "messages.1.tool_calls.0.function.arguments: JSON " + kDepthError);
}

TEST(RequestLimits, NestingAtTheLimitPassesOneMoreFails) {
  // The body object, tools, the tool, then the schema: 3 levels above input_schema.
  const auto body = [](int schema_levels) {
    return messages_body(R"("tools":[{"name":"t","input_schema":)" + deep_object(schema_levels) +
                         "}]");
  };
  EXPECT_EQ(error_of(Route::Messages, body(fields::kMaxJsonDepth - 3)), "");
  expect_error(Route::Messages, body(fields::kMaxJsonDepth - 2), kDepthError);
  expect_error(Route::Messages, body(300),
               kDepthError);  // past the template's 256 too: still a 400
}

TEST(RequestLimits, InvalidUtf8IsA400WhoseErrorBodyDumps) {
  expect_error(Route::Messages,
               messages_body("", "[{\"role\":\"user\",\"content\":\"bad \xff\xfe byte\"}]"),
               "not valid JSON");
  expect_error(Route::Chat, chat_body("\"user\":\"\xc3\""), "not valid JSON");
  expect_error(Route::Messages, messages_body("", "[{\"role\":\"user\",\"content\":\"\\ud800\"}]"),
               "not valid JSON");
  // The parse error quotes the bytes; the error body replaces them.
  const ApiError e = api_error(400, "last read: '\xff'");
  EXPECT_EQ(error_body(e, Dialect::OpenAI, "")["error"]["message"],
            "last read: '\xEF\xBF\xBD'");  // U+FFFD
}

TEST(RequestLimits, AnythingAfterTheBodyIsA400) {
  const std::string body = messages_body("");
  expect_error(Route::Messages, body + std::string("\0", 1), "NUL byte");
  expect_error(Route::Messages, body + std::string("\0{\"x\":1}", 8), "NUL byte");
  expect_error(Route::Messages, body + " x", "not valid JSON");
  EXPECT_EQ(error_of(Route::Messages, body + " \n"), "");
  // A NUL written as an escape is text like any other.
  EXPECT_EQ(
      error_of(Route::Messages, messages_body("", R"([{"role":"user","content":"a\u0000b"}])")),
      "");
}

TEST(RequestLimits, AnthropicEmptyAndMistypedFields) {
  expect_error(Route::Messages, messages_body("", "[]"),
               "messages: at least one message is required");
  expect_error(Route::CountTokens, R"({"model":"m","messages":[]})",
               "messages: at least one message is required");
  expect_error(Route::Messages, messages_body("", R"([{"role":"user","content":""}])"),
               "messages.0.content: must not be empty");
  expect_error(Route::Messages, messages_body("", R"([{"role":"user","content":[]}])"),
               "messages.0.content: must not be empty");
  expect_error(
      Route::Messages,
      messages_body("", "[" + kUser + R"(,{"role":"assistant","content":""},)" + kUser + "]"),
      "messages.1.content: must not be empty");
  // A final assistant turn may be empty: a prefill of nothing.
  EXPECT_EQ(error_of(Route::Messages,
                     messages_body("", "[" + kUser + R"(,{"role":"assistant","content":""}])")),
            "");
  // max_tokens 0 stays accepted: it pre-warms the prefix cache (api-notes 1.2).
  EXPECT_EQ(error_of(Route::Messages, R"({"model":"m","max_tokens":0,"messages":[)" + kUser + "]}"),
            "");

  expect_error(Route::Messages, messages_body(R"("tools":[{"name":"t"}])"),
               "tools.0.input_schema: Field required");
  expect_error(Route::Messages, messages_body(R"("tools":[{"type":"custom","name":"t"}])"),
               "tools.0.input_schema: Field required");
  expect_error(Route::Messages,
               messages_body(R"("tools":[{"name":"","input_schema":{"type":"object"}}])"),
               "tools.0.name: must not be empty");
  EXPECT_EQ(
      error_of(Route::Messages,
               messages_body(R"("tools":[{"type":"web_search_20250305","name":"web_search"}])")),
      "");

  expect_error(Route::Messages, messages_body(R"("metadata":"abc")"),
               "metadata: Input should be a valid dictionary");
  expect_error(Route::Messages, messages_body(R"("metadata":{"user_id":5})"),
               "metadata.user_id: Input should be a valid string");
  expect_error(Route::Messages, messages_body(R"("thinking":true)"),
               "thinking: Input should be a valid dictionary");
  expect_error(Route::Messages, messages_body(R"("thinking":{"budget_tokens":5})"),
               "thinking.type: Field required");
  EXPECT_EQ(error_of(Route::Messages,
                     messages_body(R"("thinking":{"type":"adaptive","display":"omitted"})")),
            "");
}

TEST(RequestLimits, AnthropicStopSequences) {
  expect_error(Route::Messages, messages_body(R"("stop_sequences":"END")"),
               "stop_sequences: Input should be a valid list");
  std::string many = "[";
  for (int i = 0; i < 10000; ++i) many += (i ? ",\"s" : "\"s") + std::to_string(i) + "\"";
  many += "]";
  expect_error(Route::Messages, messages_body("\"stop_sequences\":" + many),
               "stop_sequences: at most 64 strings");
  const std::string long_stop = quoted(std::string(fields::kMaxStopSequenceBytes + 1, 'x'));
  expect_error(Route::Messages, messages_body(R"("stop_sequences":["ok",)" + long_stop + "]"),
               "stop_sequences.1: at most 512 bytes");
  const ChatRequest r =
      parse_anthropic_messages(json::parse(messages_body(R"("stop_sequences":["a","b"])")));
  EXPECT_EQ(r.stop_sequences, (std::vector<std::string>{"a", "b"}));
}

TEST(RequestLimits, OpenAiMistypedAndUnsupportedFields) {
  expect_error(Route::Chat, chat_body(R"("stream":true,"stream_options":{"include_usage":"yes"})"),
               "stream_options.include_usage: Input should be a valid boolean");
  expect_error(Route::Chat, chat_body(R"("stream_options":7)"),
               "stream_options: Input should be a valid dictionary");
  expect_error(Route::Completions,
               R"({"model":"m","prompt":"x","stream_options":{"include_usage":1}})",
               "stream_options.include_usage");
  expect_error(Route::Chat, chat_body(R"("logprobs":true)"),
               "logprobs: log probabilities are not supported");
  expect_error(Route::Chat, chat_body(R"("logprobs":"yes")"),
               "logprobs: Input should be a valid boolean");
  expect_error(Route::Chat, chat_body(R"("top_logprobs":21)"),
               "top_logprobs: Input should be between 0 and 20");
  expect_error(Route::Chat, chat_body(R"("top_logprobs":-1)"),
               "top_logprobs: Input should be between 0 and 20");
  expect_error(Route::Chat, chat_body(R"("top_logprobs":3)"),
               "top_logprobs: log probabilities are not supported");
  expect_error(Route::Completions, R"({"model":"m","prompt":"x","logprobs":2})",
               "logprobs: log probabilities are not supported");
  EXPECT_EQ(error_of(Route::Chat, chat_body(R"("logprobs":false,"top_logprobs":0)")), "");
  expect_error(Route::Chat, chat_body(R"("user":5)"), "user: Input should be a valid string");
  expect_error(Route::Completions, R"({"model":"m","prompt":"x","user":{"id":1}})",
               "user: Input should be a valid string");
  expect_error(Route::Chat,
               chat_body(R"("stop":["a",)" +
                         quoted(std::string(fields::kMaxStopSequenceBytes + 1, 'x')) + "]"),
               "stop.1: at most 512 bytes");
}

TEST(RequestLimits, CompletionTokenIdsOutsideInt32AreA400NotWrapped) {
  expect_error(Route::Completions, R"({"model":"m","prompt":[1,4294967297]})",
               "prompt.1: Input should be a token id between 0 and 2147483647");
  expect_error(Route::Completions, R"({"model":"m","prompt":[-1]})",
               "prompt.0: Input should be a token id");
  expect_error(Route::Completions, R"({"model":"m","prompt":[1,2,18446744073709551615]})",
               "prompt.2: Input should be a token id");
  EXPECT_EQ(
      parse_openai_completion(json::parse(R"({"model":"m","prompt":[2147483647]})")).prompt_ids,
      (std::vector<std::int32_t>{2147483647}));
  try {
    check_prompt_ids({1, 2, 300}, 300);
    ADD_FAILURE() << "an id past the vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(api_error_from(e).status, 400);
    EXPECT_NE(
        std::string(e.what()).find("prompt.2: token id 300 is outside the vocabulary [0, 300)"),
        std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_prompt_ids({0, 299}, 300));
}

}  // namespace
}  // namespace akv
