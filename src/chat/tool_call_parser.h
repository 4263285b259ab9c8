// ToolCallParser: splits the model's streamed output text into reply text, reasoning
// (<think>...</think>) and tool calls, for one model family (tool_call_format.h). Fed the
// detokenized text as it is generated; decode with special tokens kept, because some markers
// (<|python_tag|>, [TOOL_CALLS]) are special tokens. One parser per response; not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/output_event.h"
#include "chat/reply_stream.h"
#include "chat/tool_call_format.h"

namespace akv {

struct ToolCallParserOptions {
  ToolCallFormat format = ToolCallFormat::None;
  bool parse_thinking = false;  // recognise <think>...</think> (the template uses them)
  bool starts_in_thinking =
      false;  // the prompt ended inside <think> (BuiltPrompt::starts_in_thinking)
  // Id for each call; the default gives "call_" + 24 random alphanumerics.
  std::function<std::string()> make_call_id{};
};

// Contract of the event stream:
//  - a marker, or any prefix of one, is never emitted as text: possible marker prefixes (and
//    trailing whitespace) are held back until the next feed() or finish() decides;
//  - one ToolCallStart per call, then ToolCallArgsDelta fragments whose concatenation is the
//    call's input as a JSON object, then ToolCallEnd;
//  - arguments stream as they are generated: a call whose name comes before an object-valued
//    "arguments"/"parameters" starts when that object opens, and each feed() adds the model's
//    own argument text up to the last byte that cannot be undone (a number, literal, escape,
//    incomplete UTF-8 character or trailing comma is held until it ends). The fragments join
//    to exactly the model's argument text. Other calls (arguments given as a JSON string, or
//    before the name) come out whole when their object ends, arguments re-serialised;
//  - a streamed call cut short (finish() inside it, or JSON that turns invalid) is closed so its
//    fragments still join to a JSON object: open strings and containers are closed and a
//    missing value becomes null; the rest of that call's body is dropped. Such a call does not
//    count in n_complete_calls();
//  - whitespace at the start of the reply, around reasoning and between calls is dropped, as is
//    trailing whitespace before a call or at the end;
//  - a call body that yields no call (not valid JSON of the family's shape) comes out as text,
//    unchanged; once a body has yielded a call, what of it is not a call is dropped.
// Splitting the same output at different byte boundaries gives the same events once adjacent
// deltas of one kind are joined.
class ToolCallParser : private ReplyTextStream {
 public:
  explicit ToolCallParser(ToolCallParserOptions options);
  ~ToolCallParser();
  ToolCallParser(ToolCallParser&&) noexcept;
  ToolCallParser& operator=(ToolCallParser&&) noexcept;

  std::vector<OutputEvent> feed(std::string_view delta);
  // End of generation: flushes what was held back (an unterminated call is parsed if its body
  // is complete JSON, else emitted as text). The parser is spent afterwards.
  std::vector<OutputEvent> finish();

  // Calls started so far, and those of them that ended as the model wrote them (not cut short).
  int n_tool_calls() const { return n_calls_; }
  int n_complete_calls() const { return n_calls_ - n_cut_calls_; }

 private:
  enum class Mode { Text, Thinking, CallBody };
  class CallStream;  // the incremental view of the current call body (tool_call_parser.cpp)
  void step(std::vector<OutputEvent>& out, bool final);
  bool step_text(std::vector<OutputEvent>& out, bool final);
  bool step_thinking(std::vector<OutputEvent>& out, bool final);
  bool step_call(std::vector<OutputEvent>& out, bool final);
  void end_call(std::vector<OutputEvent>& out, std::string_view body, std::string_view raw);
  bool emit_calls(std::vector<OutputEvent>& out, std::string_view body);

  ToolCallParserOptions options_;
  std::vector<std::string> openers_;  // text-mode markers that start a call
  Mode mode_ = Mode::Text;
  std::string ws_before_call_;  // pending_ws_ when the call opened (restored if it is no call)
  std::string call_opener_;     // the marker that opened the current call ("" for bare JSON)
  std::unique_ptr<CallStream> stream_;  // null outside a call body
  int n_calls_ = 0;
  int n_cut_calls_ = 0;
  bool finished_ = false;
};

}  // namespace akv
