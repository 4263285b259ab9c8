// Private to the JSON Schema grammar's .cpp files (compiler, recognizer, completion costs): the
// recognizer's frame kinds and phases, and the schema compiler's entry point.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/json_schema_grammar.h"

namespace akv::grammar {

inline constexpr int kMaxSchemaDepth = 24;          // $ref recursion and nesting; anyOf hops
inline constexpr std::uint32_t kMaxIntDigits = 16;  // exact in a double (and in JavaScript)
inline constexpr std::uint32_t kMaxFracDigits = 16;
inline constexpr std::uint32_t kMaxExpDigits = 2;  // 1e99 at most: no overflow to infinity

enum FrameKind : std::uint8_t { kRoot, kValue, kObject, kArray, kStr, kNum, kLit, kXmlParams, kXmlText };
// kXmlParams (Qwen3-Coder XML calls): 0: next <parameter=...> or </function>; 1: its value; 2:
// the value's closing text. kXmlText: a string parameter's text up to its </parameter>.
enum XmlParamsPhase : std::uint8_t { kXmlNext, kXmlValue, kXmlClose };
inline constexpr std::string_view kXmlParamEnd = "</parameter>";
inline constexpr std::string_view kXmlFunctionEnd = "</function>";
// kRoot's phase counts the parts begun: prefix, name, middle, arguments, suffix; 5: complete.
inline constexpr std::uint8_t kRootComplete = 5;
enum ObjectPhase : std::uint8_t {
  kObjOpen,
  kObjColon,
  kObjValueStart,
  kObjAfterValue,
  kObjAfterComma
};
enum ArrayPhase : std::uint8_t { kArrOpen, kArrAfterValue, kArrAfterComma };
enum NumPhase : std::uint8_t {
  kNumStart,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumE,
  kNumESign,
  kNumExp
};

inline bool is_digit(std::uint8_t c) {
  return c >= '0' && c <= '9';
}

// Appends the nodes of `schema` (resolving $ref against `schema` itself) and returns its root
// node. Never throws on odd schemas: what it does not understand becomes Any.
std::int32_t compile_json_schema(const nlohmann::ordered_json& schema,
                                 std::vector<GrammarNode>& nodes);

}  // namespace akv::grammar
