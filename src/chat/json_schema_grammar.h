// A character-level recognizer of one forced tool call: the family's call syntax around a JSON
// value valid for the tool's input_schema. Compiled once per request from a JSON Schema subset:
// type (object, string, number, integer, boolean, null, array, or a list of them), properties,
// required, additionalProperties, items, enum, const, anyOf/oneOf (the first alternative that can
// start with the next character wins), local $ref (#/$defs/..., #/definitions/...), minLength and
// maxLength (code points; an escape is one), minItems and maxItems. Every other keyword ($schema,
// pattern, format, minimum, ...) is ignored, never an error: the grammar accepts a subset of the
// valid instances, never an invalid one. Objects take their properties in schema order (optional
// ones may be skipped, required ones not); extra keys are only generated for objects that list no
// properties. At most one space wherever JSON allows whitespace, so a small model cannot loop on
// blanks; numbers have at most 16 integer digits, 16 fraction digits and 2 exponent digits.
// The grammar also knows, for any state, the length of the shortest text that completes the call
// (json_schema_completion.cpp), so a token budget can be honoured.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_request.h"
#include "chat/tool_call_format.h"

namespace akv {

// Lengths and counts the schema leaves open; and the cost of a value no finite text completes
// (a required property recursing into itself).
inline constexpr std::uint32_t kGrammarUnbounded = 0xFFFFFFFFu;
inline constexpr std::uint32_t kGrammarUnreachable = 1u << 30;

enum class GrammarNodeKind : std::uint8_t {
  Any,
  Object,
  Array,
  String,
  Number,
  Integer,
  Literal,
  AnyOf
};

struct GrammarNode {
  GrammarNodeKind kind = GrammarNodeKind::Any;
  std::vector<std::string> key_literals{};  // Object: JSON-quoted property names, schema order
  std::vector<std::int32_t> property_nodes{};
  std::vector<bool> required{};
  bool free_keys = false;               // Object listing no properties: any key, Any values
  std::int32_t items = -1;              // Array: item node (-1: Any)
  std::vector<std::string> literals{};  // Literal: the JSON texts allowed (enum, const, true...)
  std::vector<std::int32_t> alternatives{};      // AnyOf
  std::uint32_t min_length = 0;                  // String: code points
  std::uint32_t max_length = kGrammarUnbounded;  // String
  std::uint32_t min_items = 0;                   // Array
  std::uint32_t max_items = kGrammarUnbounded;   // Array
  // Filled after compiling (bytes, saturating at kGrammarUnreachable):
  std::uint32_t min_bytes = kGrammarUnreachable;  // the shortest text of this value
  std::vector<std::uint32_t>
      required_rest_bytes{};                        // Object [n+1]: `,"k":v` of required props >= i
  std::vector<std::uint32_t> optional_min_bytes{};  // Object [n+1]: shortest `"k":v` of props >= i
};

// The text around the call: prefix + "\"<name>\"" (or the bare name) + middle + <arguments
// JSON> + suffix.
struct ToolCallSyntax {
  std::string prefix;
  std::string middle;
  std::string suffix;
  bool quoted_name = true;  // the name as a JSON string; false: as it is
};
// Hermes (and None): <tool_call>\n{"name": N, "arguments": A}\n</tool_call>; Llama 3:
// {"name": N, "parameters": A}; Mistral: [TOOL_CALLS][{"name": N, "arguments": A}]; Harmony
// (after the prompt's "<|start|>assistant"): <|channel|>commentary to=functions.N
// <|constrain|>json<|message|>A<|call|>; QwenXml: <tool_call>\n<function=N>\n then the
// parameters as XML (qwen_xml_grammar.cpp), then \n</tool_call>.
ToolCallSyntax tool_call_syntax(ToolCallFormat format);

// One frame of the recognizer's stack (plain data: states are copied while walking the vocab).
struct GrammarFrame {
  const std::vector<std::string>* literals = nullptr;  // Lit frames
  std::uint64_t mask = 0;                              // Lit: candidates still possible
  std::uint32_t pos = 0;    // Lit: chars matched; Object: next property index; Num: digits
                            // in the current part; Str: next UTF-8 byte's range
  std::uint32_t count = 0;  // Str: code points begun; Array: items begun
  std::int32_t node = -1;   // grammar node (-1: Any)
  std::uint16_t aux = 0;    // chosen property / tool index
  std::uint8_t kind = 0;
  std::uint8_t phase = 0;
  std::uint8_t n_ws = 0;    // spaces seen at the current position
  std::uint8_t report = 0;  // Lit: write the chosen candidate into the parent frame
};

inline constexpr int kGrammarMaxDepth = 32;

struct GrammarState {
  std::array<GrammarFrame, kGrammarMaxDepth> frames{};
  std::int32_t depth = 0;
  bool dead = false;
};

class ToolCallGrammar {
 public:
  // `tools`: the callable tools (tool_choice any: all of them; tool/named: just that one). A tool
  // without a usable schema gets Any arguments (an object). Throws Error(InvalidArgument) when
  // `tools` is empty. Cost: linear in the schemas.
  ToolCallGrammar(const std::vector<ToolSpec>& tools, ToolCallFormat format);

  GrammarState initial_state() const;
  // Consumes one byte; false (state unchanged) when the byte cannot come next.
  bool advance(GrammarState& state, std::uint8_t byte) const;
  bool advance(GrammarState& state, std::string_view bytes) const;
  // The same without the copy: on false, `state` is left inconsistent (the vocab walk discards it).
  bool advance_or_spoil(GrammarState& state, std::uint8_t byte) const;
  // The whole call has been matched; nothing more may follow.
  bool complete(const GrammarState& state) const;
  // The state sits inside a JSON string between characters (no pending escape or UTF-8
  // continuation): any complete UTF-8 text without '"', '\\' or control bytes of at most
  // `chars_left` characters keeps it there (the vocab walk's fast path); the first
  // `chars_needed` of them shorten the shortest completion by one byte each.
  // Likewise inside a Qwen XML string parameter's text (`xml`), for text without '<' or control
  // bytes (ConstraintVocab::xml_text_chars).
  struct StringRoom {
    bool inside = false;
    std::uint32_t chars_left = 0;
    std::uint32_t chars_needed = 0;
    bool xml = false;
  };
  StringRoom free_string_room(const GrammarState& state) const;

  // Bytes of the shortest text that completes the call from `state` (0 once complete): close
  // the open string/number, write the missing required properties with their shortest values,
  // close arrays and objects, then the family's closing text. Each byte of such a text lowers
  // it by exactly one. kGrammarUnreachable when none exists (dead state). Cost: O(depth), plus
  // the candidates of a pending tool name or property key.
  std::uint32_t shortest_completion_bytes(const GrammarState& state) const;

  const ToolCallSyntax& syntax() const { return syntax_; }

 private:
  enum class Step { Consumed, Reprocess, Reject };
  Step step_frame(GrammarState& s, std::uint8_t c) const;
  Step step_value(GrammarState& s, GrammarFrame& f, std::uint8_t c) const;
  Step step_object(GrammarState& s, GrammarFrame& f, std::uint8_t c) const;
  Step step_array(GrammarState& s, GrammarFrame& f, std::uint8_t c) const;
  Step step_literal(GrammarState& s, GrammarFrame& f, std::uint8_t c) const;
  Step step_string(GrammarState& s, GrammarFrame& f, std::uint8_t c) const;
  Step step_root(GrammarState& s, GrammarFrame& f, std::uint8_t c) const;
  Step step_number(GrammarState& s, GrammarFrame& f, std::uint8_t c) const;
  // Qwen3-Coder XML calls (qwen_xml_grammar.cpp): per tool, its parameters in schema order, each
  // `<parameter=K>\n` + value + closing text; string parameters (as qwen_xml_value types them)
  // are the text itself (or one of a string enum's values), others a JSON value of their schema.
  struct XmlParam {
    std::int32_t node = -1;                 // JSON value node; raw text: its String node or -1
    bool raw = true;                        // the text itself
    std::vector<std::string> raw_literals;  // a string enum's values (raw; empty: free text)
    bool required = false;
    std::uint32_t value_min = 0;  // bytes of its shortest value (raw text: with </parameter>)
    const std::vector<std::string>* close = nullptr;  // the text after the value
  };
  struct XmlTool {
    std::vector<std::string> openers;           // "<parameter=K>\n" each, then "</function>"
    std::vector<XmlParam> params;               // [n], n < 64 (the opener mask)
    std::vector<std::uint32_t> required_rest;   // [n + 1]: bytes of the required params >= i
  };
  void compile_xml_tools(const std::vector<ToolSpec>& tools);
  Step step_xml_params(GrammarState& s, GrammarFrame& f, std::uint8_t c) const;
  Step step_xml_text(GrammarState& s, GrammarFrame& f, std::uint8_t c) const;
  std::uint32_t xml_frame_rest_bytes(const GrammarFrame& f) const;
  StringRoom xml_text_room(const GrammarFrame& f) const;
  std::uint32_t xml_choice_rest_bytes(const GrammarFrame& params, std::size_t i) const;
  // The shortest arguments of tool `i` (XML: its required parameters and </function>).
  std::uint32_t args_min_bytes(std::size_t i) const;
  bool can_start(std::int32_t node, std::uint8_t c, int budget) const;
  // json_schema_completion.cpp: the shortest texts of values, computed once after compiling.
  void compute_min_bytes();
  std::uint32_t value_min_bytes(std::int32_t node) const;
  std::uint32_t start_min_bytes(std::int32_t node, std::uint8_t c) const;
  std::uint32_t frame_rest_bytes(const GrammarFrame& f) const;
  std::uint32_t choice_rest_bytes(const GrammarFrame& lit, const GrammarFrame& parent) const;
  std::uint32_t object_rest_bytes(const GrammarFrame& f) const;
  bool push(GrammarState& s, const GrammarFrame& f) const;
  void pop(GrammarState& s, bool report, std::uint16_t chosen) const;

  std::vector<GrammarNode> nodes_;
  std::vector<std::int32_t> tool_roots_;
  std::vector<std::string> name_literals_;
  std::array<std::vector<std::string>, 3> syntax_literals_;  // {prefix}, {middle}, {suffix}
  std::vector<std::string> any_literals_;                    // true, false, null
  std::uint32_t tools_min_bytes_ = kGrammarUnreachable;      // min over tools: name+middle+args
  ToolCallSyntax syntax_;
  bool xml_ = false;
  std::vector<XmlTool> xml_tools_;  // [tools] when xml_
  std::vector<std::string> xml_raw_close_{"\n"};
  std::vector<std::string> xml_value_close_{"\n</parameter>\n"};
};

}  // namespace akv
