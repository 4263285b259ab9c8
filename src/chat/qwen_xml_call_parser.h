// Qwen3-Coder's XML tool calls on the output side: QwenXmlCallParser splits the model's streamed
// reply into text, reasoning (<think>, for the Qwen3.5 templates that have it) and tool calls
//   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// whose parameter values are typed by the tool's JSON schema (qwen_xml_value). Same event
// contract as ToolCallParser (tool_call_parser.h).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_request.h"
#include "chat/reply_stream.h"
#include "chat/tool_call_parser.h"

namespace akv {

inline constexpr std::size_t kMaxQwenXmlNameBytes = 256;        // function and parameter names
inline constexpr std::size_t kMaxQwenXmlValueBytes = 1u << 20;  // a non-string value, buffered
inline constexpr int kMaxQwenXmlParameters = 1024;              // per call; more cut the call
inline constexpr int kMaxQwenXmlCalls = 128;                    // later calls come out as text

// How a parameter's value is read, from its schema (the tool's input_schema.properties[P]):
//   - a schema whose type is (or includes) "string", an enum of strings, an unknown tool or
//     parameter, or no type at all: the text itself, as a JSON string;
//   - number, integer, boolean, null, object, array (or a list of these): the text parsed as
//     JSON (booleans also as Python's True/False, null as None, as the template writes them
//     with `| string`) when it parses to one of those types; otherwise it stays a string.
// `raw` is the value between "<parameter=P>" and "</parameter>" with one leading and one
// trailing newline removed. `root` (the tool's input_schema) resolves local $refs.
bool qwen_xml_value_is_string(const nlohmann::ordered_json* schema,
                              const nlohmann::ordered_json* root = nullptr);
nlohmann::ordered_json qwen_xml_value(std::string_view raw, const nlohmann::ordered_json* schema,
                                      const nlohmann::ordered_json* root = nullptr);

struct QwenXmlCallParserOptions {
  std::vector<ToolSpec> tools{};  // for the parameter schemas
  bool parse_thinking = false;    // recognise <think>...</think>
  bool starts_in_thinking = false;
  std::function<std::string()> make_call_id{};  // default: "call_" + 24 random alphanumerics
};

// Contract:
//  - markers never come out as text; a possible marker prefix is held until the next feed();
//  - a call starts when "<function=NAME>" is read; its ToolCallArgsDelta fragments join to a
//    JSON object: "{", then per parameter `"P": value` where a string value streams as it is
//    written (JSON-escaped; a possible "\n</parameter>" held back) and other values come whole
//    at "</parameter>", then "}" at "</function>";
//  - a call cut short (the end of the reply, a bound, or text that is no parameter) is closed
//    into valid JSON (an open string closed, a pending typed value parsed or null) and does not
//    count in n_complete_calls(); what follows the cut point comes out as text;
//  - a "<tool_call>" not followed by "<function=NAME>" comes out as text, unchanged;
//  - whitespace at the start of the reply, around reasoning, before and between calls is
//    dropped, as is trailing whitespace at the end;
//  - feeding the same output split at any byte boundaries gives the same events once adjacent
//    deltas of one kind are joined.
class QwenXmlCallParser : private ReplyTextStream {
 public:
  explicit QwenXmlCallParser(QwenXmlCallParserOptions options);

  std::vector<OutputEvent> feed(std::string_view delta);
  std::vector<OutputEvent> finish();  // the parser is spent afterwards

  int n_tool_calls() const { return n_calls_; }
  int n_complete_calls() const { return n_calls_ - n_cut_calls_; }

 private:
  enum class Mode { Text, Thinking, CallOpen, Params, Value, AfterFunction };
  bool step(std::vector<OutputEvent>& out, bool final);
  bool step_text(std::vector<OutputEvent>& out, bool final);
  bool step_thinking(std::vector<OutputEvent>& out, bool final);
  bool step_call_open(std::vector<OutputEvent>& out, bool final);
  bool step_params(std::vector<OutputEvent>& out, bool final);
  bool step_value(std::vector<OutputEvent>& out, bool final);
  bool step_after_function(std::vector<OutputEvent>& out, bool final);
  void args(std::vector<OutputEvent>& out, std::string_view fragment);
  void end_value(std::vector<OutputEvent>& out, std::string_view raw);
  // Closes the current call as cut; `rest` (the input from the cut point) becomes text.
  void cut_call(std::vector<OutputEvent>& out, bool in_value);
  const nlohmann::ordered_json* parameter_schema(const std::string& key) const;

  QwenXmlCallParserOptions options_;
  Mode mode_ = Mode::Text;
  std::string call_name_;
  int n_params_ = 0;
  const nlohmann::ordered_json* value_schema_ = nullptr;
  const nlohmann::ordered_json* value_root_ = nullptr;  // its tool's input_schema ($refs)
  bool value_is_string_ = true;
  bool value_started_ = false;   // the leading newline question is settled
  std::string value_;            // a typed value buffered until </parameter>
  int n_calls_ = 0;
  int n_cut_calls_ = 0;
  bool finished_ = false;
};

}  // namespace akv
