// GPT-OSS's harmony format on the output side: HarmonyParser splits the model's streamed reply
// (decoded with special tokens kept; the prompt ends in "<|start|>assistant") into reasoning,
// text and tool calls; parse_harmony_messages reads a whole harmony text back into messages
// (the prompt builder compares a remembered turn with the template's rendering of it). The
// prompt side (rendering history, reasoning effort) is prompt_builder.h's.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/json_scanner.h"
#include "chat/tool_call_parser.h"

namespace akv {

// A reply is a sequence of messages:
//   [<|start|>assistant] [ to=R] <|channel|>C [ to=R] [<|constrain|>T | T] <|message|>BODY END
// END is <|end|>, <|call|> or <|return|> (the last two are stop tokens: usually not in the text),
// or the next message's <|start|> / <|channel|>, or the end of the reply.
//   channel analysis                 -> ThinkingDelta (the body, unchanged)
//   a recipient R (functions.N, ...) -> a tool call named N ("functions." dropped), its body the
//                                       JSON arguments, streamed as ToolCallArgsDelta
//   final, commentary without R, any other channel -> TextDelta
inline constexpr std::size_t kMaxHarmonyHeaderBytes = 512;  // longer: not a header (kept as text)
inline constexpr int kMaxHarmonyCalls = 128;                // later calls come out as text

struct HarmonyParserOptions {
  bool parse_calls = true;  // false (no tools, tool_choice none): a call's body is text
  // Id for each call; the default gives "call_" + 24 random alphanumerics.
  std::function<std::string()> make_call_id{};
};

// Contract (shared with ToolCallParser where it applies):
//  - markers are never emitted as text (except inside what is kept as text below); a possible
//    marker prefix is held until the next feed();
//  - bodies come out unchanged (no whitespace is trimmed), so reasoning sent back by a client
//    re-renders exactly as generated;
//  - a call starts when its header is read and its body's first non-blank byte is '{'; its
//    ToolCallArgsDelta fragments join to exactly the model's JSON, each ending where the JSON can
//    be closed; a body that ends (or turns invalid, or nests deeper than kMaxJsonDepth) before
//    the object does is closed into valid JSON and counts as cut (not in n_complete_calls);
//  - malformed output loses nothing: text before any header, a header that never ends (past
//    kMaxHarmonyHeaderBytes, or cut by another marker or the end), a call body that is not an
//    object, and what follows a call's JSON or its cut point in the body come out as text;
//  - feeding the same output split at any byte boundaries gives the same events once adjacent
//    deltas of one kind are joined.
class HarmonyParser {
 public:
  explicit HarmonyParser(HarmonyParserOptions options = {});

  std::vector<OutputEvent> feed(std::string_view delta);
  // End of generation: flushes what was held back. The parser is spent afterwards.
  std::vector<OutputEvent> finish();

  int n_tool_calls() const { return n_calls_; }
  int n_complete_calls() const { return n_calls_ - n_cut_calls_; }

 private:
  enum class Mode { Header, Text, Thinking, CallStart, CallArgs, CallRest };
  void step(std::vector<OutputEvent>& out, bool final);
  bool step_header(std::vector<OutputEvent>& out, bool final);
  bool step_body(std::vector<OutputEvent>& out, bool final);
  void body_bytes(std::vector<OutputEvent>& out, std::string_view bytes);
  void end_body(std::vector<OutputEvent>& out);
  void open_body(const std::string& channel, const std::string& recipient);
  void cut_call(std::vector<OutputEvent>& out);

  HarmonyParserOptions options_;
  Mode mode_ = Mode::Header;
  std::string buf_;      // input not yet decided
  std::string header_;   // the raw header of the current message (text again if it is no call)
  std::string call_name_;
  // The call's JSON arguments as scanned so far (its own text: fragments are slices of it).
  std::string args_;
  std::size_t args_sent_ = 0;
  std::size_t args_safe_ = 0;  // the last point args_ can be closed
  JsonScanner scan_;
  std::size_t args_depth_ = 0;  // containers open in args_
  int n_calls_ = 0;
  int n_cut_calls_ = 0;
  bool finished_ = false;
};

// One message of a harmony text.
struct HarmonyMessage {
  std::string role;          // "assistant", "user", "functions.N", ... ("" when the header had no <|start|>)
  std::string channel;       // "analysis", "commentary", "final", ... or ""
  std::string recipient;     // "functions.N" or ""
  std::string content_type;  // "json" (from "<|constrain|>json" or "commentary json") or ""
  std::string content;
  std::string end;  // "<|end|>", "<|call|>", "<|return|>", or "" (cut by the next message or the end)
  std::size_t end_pos = 0;  // offset just past the message (its end marker included)
};

// The messages at the start of `text` up to the first that does not parse (text outside a
// message, a header without <|message|> or with something else in it) or `max_messages`.
// A header needs a role, a channel or a recipient. Cost: linear.
std::vector<HarmonyMessage> parse_harmony_prefix(std::string_view text, std::size_t max_messages = 4096);

// All of `text` as messages; nullopt when some of it does not parse (or more than max_messages).
std::optional<std::vector<HarmonyMessage>> parse_harmony_messages(std::string_view text,
                                                                  std::size_t max_messages = 4096);

}  // namespace akv
