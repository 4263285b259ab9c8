// What the output parsers share (tool_call_parser.h, qwen_xml_call_parser.h, harmony_parser.h):
// holding back a possible marker prefix, call ids, and ReplyTextStream, the reply-text and
// <think> reasoning steps of the two parsers whose reasoning sits in <think> tags.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/output_event.h"

namespace akv {

// The blanks the parsers drop around reasoning and calls.
inline bool is_reply_ws(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

// "call_" + 24 random alphanumerics.
std::string random_call_id();

// Length of the longest suffix of `s` that is a proper prefix of one of `markers`: the bytes to
// hold until the next feed() decides.
std::size_t held_prefix_length(std::string_view s, std::span<const std::string_view> markers);
inline std::size_t held_prefix_length(std::string_view s,
                                      std::initializer_list<std::string_view> markers) {
  return held_prefix_length(s, std::span<const std::string_view>(markers.begin(), markers.size()));
}

// The reply text and <think> state of a parser (a base of ToolCallParser and QwenXmlCallParser;
// the owner's thread only). Whitespace rules: leading whitespace is dropped while skip_ws_ (the
// reply's start, after reasoning, after a call); trailing whitespace waits in pending_ws_ until
// more text follows, and is dropped at the end.
class ReplyTextStream {
 protected:
  // Appends `text` as `kind` under the whitespace rules, joined to a previous event of the
  // same kind.
  void emit_text(std::vector<OutputEvent>& out, OutputEvent::Kind kind, std::string_view text,
                 bool final);
  // Inside <think>: buf_ up to "</think>" (all of it but a possible prefix of the marker while
  // not `final`) comes out as ThinkingDelta. True when "</think>" was read and consumed: the
  // caller goes back to its text mode, whitespace after the marker skipped.
  bool step_think_body(std::vector<OutputEvent>& out, bool final);

  std::string buf_;         // input not yet decided
  std::string pending_ws_;  // whitespace held until non-whitespace follows
  bool skip_ws_ = true;
};

}  // namespace akv
