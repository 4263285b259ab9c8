#include "chat/json_schema_grammar.h"

#include <bit>

#include "base/error.h"
#include "chat/json_schema_internal.h"

namespace akv {

using namespace grammar;

namespace {

bool is_hex(std::uint8_t c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

std::uint64_t low_bits(std::size_t n) {
  return n >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1;
}

constexpr std::size_t kMaxTools = 64;  // name candidates (a 64-bit mask)

}  // namespace

ToolCallSyntax tool_call_syntax(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Llama3Json:
      return {"{\"name\": ", ", \"parameters\": ", "}"};
    case ToolCallFormat::Mistral:
      return {"[TOOL_CALLS][{\"name\": ", ", \"arguments\": ", "}]"};
    case ToolCallFormat::Harmony:
      return {"<|channel|>commentary to=functions.", " <|constrain|>json<|message|>", "<|call|>", false};
    case ToolCallFormat::QwenXml:
      return {"<tool_call>\n<function=", ">\n", "\n</tool_call>", false};
    case ToolCallFormat::Hermes:
    case ToolCallFormat::None:
      break;
  }
  return {"<tool_call>\n{\"name\": ", ", \"arguments\": ", "}\n</tool_call>"};
}

ToolCallGrammar::ToolCallGrammar(const std::vector<ToolSpec>& tools, ToolCallFormat format)
    : syntax_(tool_call_syntax(format)), xml_(format == ToolCallFormat::QwenXml) {
  if (tools.empty())
    throw Error(ErrorKind::InvalidArgument, "a forced tool call needs at least one tool");
  for (const auto& tool : tools) {
    if (name_literals_.size() >= kMaxTools) break;
    std::int32_t root = compile_json_schema(tool.input_schema, nodes_);
    if (nodes_[root].kind != GrammarNodeKind::Object) {  // arguments are always an object
      nodes_.push_back({.kind = GrammarNodeKind::Object, .free_keys = true});
      root = static_cast<std::int32_t>(nodes_.size() - 1);
    }
    tool_roots_.push_back(root);
    name_literals_.push_back(syntax_.quoted_name ? nlohmann::ordered_json(tool.name).dump() : tool.name);
  }
  syntax_literals_ = {std::vector<std::string>{syntax_.prefix},
                      std::vector<std::string>{syntax_.middle},
                      std::vector<std::string>{syntax_.suffix}};
  any_literals_ = {"true", "false", "null"};
  compute_min_bytes();
  if (xml_) {  // the parameters' costs need the nodes' min_bytes; then the tools' again
    compile_xml_tools(tools);
    compute_min_bytes();
  }
}

GrammarState ToolCallGrammar::initial_state() const {
  GrammarState s;
  s.depth = 1;
  s.frames[0] = GrammarFrame{.kind = kRoot};
  return s;
}

bool ToolCallGrammar::complete(const GrammarState& s) const {
  return !s.dead && s.depth == 1 && s.frames[0].kind == kRoot && s.frames[0].phase == kRootComplete;
}

ToolCallGrammar::StringRoom ToolCallGrammar::free_string_room(const GrammarState& s) const {
  if (s.dead || s.depth == 0) return {};
  const GrammarFrame& top = s.frames[s.depth - 1];
  if (top.kind == kXmlText) return xml_text_room(top);
  if (top.kind != kStr || top.phase != 0 || top.aux != 0) return {};
  if (top.node < 0) return {.inside = true, .chars_left = kGrammarUnbounded};
  const GrammarNode& n = nodes_[top.node];
  return {.inside = true,
          .chars_left =
              n.max_length == kGrammarUnbounded ? kGrammarUnbounded : n.max_length - top.count,
          .chars_needed = n.min_length > top.count ? n.min_length - top.count : 0};
}

bool ToolCallGrammar::advance(GrammarState& state, std::string_view bytes) const {
  GrammarState t = state;
  for (char c : bytes)
    if (!advance_or_spoil(t, static_cast<std::uint8_t>(c))) return false;
  state = t;
  return true;
}

bool ToolCallGrammar::advance(GrammarState& state, std::uint8_t byte) const {
  GrammarState t = state;
  if (!advance_or_spoil(t, byte)) return false;
  state = t;
  return true;
}

bool ToolCallGrammar::advance_or_spoil(GrammarState& s, std::uint8_t c) const {
  if (s.dead) return false;
  for (int guard = 0; guard < 4 * kGrammarMaxDepth; ++guard) {
    if (s.depth == 0) return false;
    switch (step_frame(s, c)) {
      case Step::Consumed:
        return true;
      case Step::Reject:
        return false;
      case Step::Reprocess:
        break;
    }
  }
  return false;
}

bool ToolCallGrammar::push(GrammarState& s, const GrammarFrame& f) const {
  if (s.depth >= kGrammarMaxDepth) return false;
  s.frames[s.depth++] = f;
  return true;
}

void ToolCallGrammar::pop(GrammarState& s, bool report, std::uint16_t chosen) const {
  --s.depth;
  if (report && s.depth > 0) {
    s.frames[s.depth - 1].aux = chosen;
    s.frames[s.depth - 1].pos = chosen + 1u;
  }
}

ToolCallGrammar::Step ToolCallGrammar::step_frame(GrammarState& s, std::uint8_t c) const {
  GrammarFrame& f = s.frames[s.depth - 1];
  switch (f.kind) {
    case kRoot:
      return step_root(s, f, c);
    case kValue:
      return step_value(s, f, c);
    case kObject:
      return step_object(s, f, c);
    case kArray:
      return step_array(s, f, c);
    case kLit:
      return step_literal(s, f, c);
    case kStr:
      return step_string(s, f, c);
    case kNum:
      return step_number(s, f, c);
    case kXmlParams:
      return step_xml_params(s, f, c);
    case kXmlText:
      return step_xml_text(s, f, c);
  }
  return Step::Reject;
}

// Digits are counted per part (pos) against the kMax*Digits limits.
ToolCallGrammar::Step ToolCallGrammar::step_number(GrammarState& s, GrammarFrame& f,
                                                   std::uint8_t c) const {
  const bool integer = f.aux != 0;
  const bool digit = is_digit(c);
  auto enter = [&](NumPhase phase, std::uint32_t digits) {
    f.phase = phase;
    f.pos = digits;
    return Step::Consumed;
  };
  auto more = [&](std::uint32_t limit) {
    if (f.pos >= limit) return Step::Reject;
    ++f.pos;
    return Step::Consumed;
  };
  switch (f.phase) {
    case kNumStart:
      if (c == '-') return enter(kNumMinus, 0);
      [[fallthrough]];
    case kNumMinus:
      if (c == '0') return enter(kNumZero, 1);
      if (digit) return enter(kNumInt, 1);
      return Step::Reject;
    case kNumInt:
      if (digit) return more(kMaxIntDigits);
      [[fallthrough]];
    case kNumZero:
      if (!integer && c == '.') return enter(kNumDot, 0);
      if (!integer && (c == 'e' || c == 'E')) return enter(kNumE, 0);
      break;
    case kNumDot:
      if (digit) return enter(kNumFrac, 1);
      return Step::Reject;
    case kNumFrac:
      if (digit) return more(kMaxFracDigits);
      if (c == 'e' || c == 'E') return enter(kNumE, 0);
      break;
    case kNumE:
      if (c == '+' || c == '-') return enter(kNumESign, 0);
      [[fallthrough]];
    case kNumESign:
      if (digit) return enter(kNumExp, 1);
      return Step::Reject;
    case kNumExp:
      if (digit) return more(kMaxExpDigits);
      break;
  }
  if (digit) return Step::Reject;  // e.g. a digit after a leading 0
  pop(s, false, 0);                // the number ended; the byte belongs to the parent
  return Step::Reprocess;
}

// Inside a string: escapes, and UTF-8 as RFC 3629 allows it (what JSON parsers accept), so a
// byte-fallback token cannot leave a broken character. aux: continuation bytes still due;
// pos: (lowest << 8 | highest) allowed value of the next one. \u escapes avoid the surrogate
// range (a lone surrogate does not parse) by not starting with d/D. count: characters begun,
// held to the node's minLength/maxLength.
ToolCallGrammar::Step ToolCallGrammar::step_string(GrammarState& s, GrammarFrame& f,
                                                   std::uint8_t c) const {
  if (f.aux > 0) {
    if (c < (f.pos >> 8) || c > (f.pos & 0xFF)) return Step::Reject;
    --f.aux;
    f.pos = 0x80BF;
    return Step::Consumed;
  }
  if (f.phase == 0) {
    const GrammarNode* n = f.node >= 0 ? &nodes_[f.node] : nullptr;
    if (c == '"') {
      if (n && f.count < n->min_length) return Step::Reject;
      return pop(s, false, 0), Step::Consumed;
    }
    if (c < 0x20 || (n && f.count >= n->max_length)) return Step::Reject;
    ++f.count;
    if (c == '\\') return f.phase = 1, Step::Consumed;
    if (c < 0x80) return Step::Consumed;
    if (c >= 0xC2 && c <= 0xDF)
      f.aux = 1, f.pos = 0x80BF;
    else if (c == 0xE0)
      f.aux = 2, f.pos = 0xA0BF;
    else if (c == 0xED)
      f.aux = 2, f.pos = 0x809F;
    else if (c >= 0xE1 && c <= 0xEF)
      f.aux = 2, f.pos = 0x80BF;
    else if (c == 0xF0)
      f.aux = 3, f.pos = 0x90BF;
    else if (c >= 0xF1 && c <= 0xF3)
      f.aux = 3, f.pos = 0x80BF;
    else if (c == 0xF4)
      f.aux = 3, f.pos = 0x808F;
    else
      return Step::Reject;
    return Step::Consumed;
  }
  if (f.phase == 1) {
    if (c == 'u') return f.phase = 2, Step::Consumed;
    if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
        c == 't')
      return f.phase = 0, Step::Consumed;
    return Step::Reject;
  }
  if (!is_hex(c) || (f.phase == 2 && (c == 'd' || c == 'D'))) return Step::Reject;
  f.phase = f.phase == 5 ? 0 : f.phase + 1;
  return Step::Consumed;
}

ToolCallGrammar::Step ToolCallGrammar::step_root(GrammarState& s, GrammarFrame& f,
                                                 std::uint8_t) const {
  GrammarFrame lit{.kind = kLit, .phase = 0};
  switch (f.phase) {
    case 0:
      lit.literals = &syntax_literals_[0];
      break;
    case 1:
      lit.literals = &name_literals_;
      lit.report = 1;
      break;
    case 2:
      lit.literals = &syntax_literals_[1];
      break;
    case 3: {
      f.phase = 4;
      const GrammarFrame args = xml_ ? GrammarFrame{.node = f.aux, .kind = kXmlParams}
                                     : GrammarFrame{.node = tool_roots_[f.aux], .kind = kValue, .n_ws = 1};
      return push(s, args) ? Step::Reprocess : Step::Reject;
    }
    case 4:
      lit.literals = &syntax_literals_[2];
      break;
    default:
      return Step::Reject;
  }
  lit.mask = low_bits(lit.literals->size());
  ++f.phase;
  return push(s, lit) ? Step::Reprocess : Step::Reject;
}

ToolCallGrammar::Step ToolCallGrammar::step_literal(GrammarState& s, GrammarFrame& f,
                                                    std::uint8_t c) const {
  const auto& lits = *f.literals;
  std::uint64_t next = 0, done = 0;
  for (std::uint64_t m = f.mask; m != 0; m &= m - 1) {
    const int i = std::countr_zero(m);
    const std::string& lit = lits[i];
    if (lit.size() > f.pos && static_cast<std::uint8_t>(lit[f.pos]) == c)
      next |= std::uint64_t{1} << i;
    if (lit.size() == f.pos) done |= std::uint64_t{1} << i;
  }
  if (next != 0) {
    f.mask = next;
    ++f.pos;
    bool all_complete = true;
    for (std::uint64_t m = next; m != 0; m &= m - 1)
      all_complete &= lits[std::countr_zero(m)].size() == f.pos;
    if (all_complete) pop(s, f.report != 0, static_cast<std::uint16_t>(std::countr_zero(next)));
    return Step::Consumed;
  }
  if (done != 0) {
    pop(s, f.report != 0, static_cast<std::uint16_t>(std::countr_zero(done)));
    return Step::Reprocess;
  }
  return Step::Reject;
}

bool ToolCallGrammar::can_start(std::int32_t node, std::uint8_t c, int budget) const {
  if (budget <= 0) return false;
  const GrammarNode* n = node >= 0 ? &nodes_[node] : nullptr;
  const GrammarNodeKind kind = n ? n->kind : GrammarNodeKind::Any;
  switch (kind) {
    case GrammarNodeKind::Any:
      return c == '{' || c == '[' || c == '"' || c == '-' || is_digit(c) || c == 't' || c == 'f' ||
             c == 'n';
    case GrammarNodeKind::Object:
      return c == '{';
    case GrammarNodeKind::Array:
      return c == '[';
    case GrammarNodeKind::String:
      return c == '"';
    case GrammarNodeKind::Number:
    case GrammarNodeKind::Integer:
      return c == '-' || is_digit(c);
    case GrammarNodeKind::Literal:
      for (const auto& lit : n->literals)
        if (!lit.empty() && static_cast<std::uint8_t>(lit[0]) == c) return true;
      return false;
    case GrammarNodeKind::AnyOf:
      for (auto alt : n->alternatives)
        if (can_start(alt, c, budget - 1)) return true;
      return false;
  }
  return false;
}

ToolCallGrammar::Step ToolCallGrammar::step_value(GrammarState& s, GrammarFrame& f,
                                                  std::uint8_t c) const {
  if (c == ' ' && f.n_ws == 0) return f.n_ws = 1, Step::Consumed;
  std::int32_t node = f.node;
  for (int hops = 0; node >= 0 && nodes_[node].kind == GrammarNodeKind::AnyOf; ++hops) {
    if (hops > kMaxSchemaDepth) return Step::Reject;
    std::int32_t chosen = -2;
    for (auto alt : nodes_[node].alternatives)
      if (can_start(alt, c, kMaxSchemaDepth)) {
        chosen = alt;
        break;
      }
    if (chosen == -2) return Step::Reject;
    node = chosen;
  }
  const GrammarNodeKind kind = node >= 0 ? nodes_[node].kind : GrammarNodeKind::Any;
  const bool room = s.depth < kGrammarMaxDepth - 2;  // nested containers need a frame more
  GrammarFrame next{.node = node};
  switch (kind) {
    case GrammarNodeKind::Any:
      if (c == '{' && room) return f = GrammarFrame{.node = -1, .kind = kObject}, Step::Consumed;
      if (c == '[' && room) return f = GrammarFrame{.node = -1, .kind = kArray}, Step::Consumed;
      if (c == '"') return f = GrammarFrame{.kind = kStr}, Step::Consumed;
      if (c == '-' || is_digit(c)) return f = GrammarFrame{.kind = kNum}, Step::Reprocess;
      if (c == 't' || c == 'f' || c == 'n')
        return f = GrammarFrame{.literals = &any_literals_, .mask = low_bits(3), .kind = kLit},
               Step::Reprocess;
      return Step::Reject;
    case GrammarNodeKind::Object:
      if (c != '{' || !room) return Step::Reject;
      next.kind = kObject;
      f = next;
      return Step::Consumed;
    case GrammarNodeKind::Array:
      if (c != '[' || !room) return Step::Reject;
      next.kind = kArray;
      f = next;
      return Step::Consumed;
    case GrammarNodeKind::String:
      if (c != '"') return Step::Reject;
      f = GrammarFrame{.node = node, .kind = kStr};
      return Step::Consumed;
    case GrammarNodeKind::Number:
    case GrammarNodeKind::Integer:
      f = GrammarFrame{.aux = static_cast<std::uint16_t>(kind == GrammarNodeKind::Integer),
                       .kind = kNum};
      return Step::Reprocess;
    case GrammarNodeKind::Literal:
      f = GrammarFrame{.literals = &nodes_[node].literals,
                       .mask = low_bits(nodes_[node].literals.size()),
                       .kind = kLit};
      return Step::Reprocess;
    case GrammarNodeKind::AnyOf:
      break;
  }
  return Step::Reject;
}

ToolCallGrammar::Step ToolCallGrammar::step_object(GrammarState& s, GrammarFrame& f,
                                                   std::uint8_t c) const {
  const GrammarNode* n = f.node >= 0 ? &nodes_[f.node] : nullptr;
  const bool free = n == nullptr || n->free_keys;
  const std::size_t n_props = n ? n->key_literals.size() : 0;
  auto required_left = [&] {
    if (free) return false;
    for (std::size_t i = f.pos; i < n_props; ++i)
      if (n->required[i]) return true;
    return false;
  };
  const bool may_space = c == ' ' && f.n_ws == 0;
  switch (f.phase) {
    case kObjOpen:
    case kObjAfterComma:
      if (may_space) return f.n_ws = 1, Step::Consumed;
      if (c == '}' && f.phase == kObjOpen && !required_left())
        return pop(s, false, 0), Step::Consumed;
      if (c != '"') return Step::Reject;
      f.phase = kObjColon;
      f.n_ws = 0;
      if (free) return push(s, GrammarFrame{.kind = kStr}) ? Step::Consumed : Step::Reject;
      {
        if (f.pos >= n_props) return Step::Reject;
        std::size_t last = f.pos;
        while (last < n_props && !n->required[last]) ++last;
        if (last == n_props) last = n_props - 1;
        const std::uint64_t mask = low_bits(last + 1) & ~low_bits(f.pos);
        GrammarFrame key{.literals = &n->key_literals, .mask = mask, .kind = kLit, .report = 1};
        return push(s, key) ? Step::Reprocess : Step::Reject;
      }
    case kObjColon:
      if (c != ':') return Step::Reject;
      f.phase = kObjValueStart;
      return Step::Consumed;
    case kObjValueStart: {
      f.phase = kObjAfterValue;
      f.n_ws = 0;
      const std::int32_t value_node = free ? -1 : n->property_nodes[f.aux];
      return push(s, GrammarFrame{.node = value_node, .kind = kValue}) ? Step::Reprocess
                                                                       : Step::Reject;
    }
    case kObjAfterValue:
      if (may_space) return f.n_ws = 1, Step::Consumed;
      if (c == ',' && (free || f.pos < n_props)) {
        f.phase = kObjAfterComma;
        f.n_ws = 0;
        return Step::Consumed;
      }
      if (c == '}' && !required_left()) return pop(s, false, 0), Step::Consumed;
      return Step::Reject;
  }
  return Step::Reject;
}

// count: items begun, held to the node's minItems/maxItems.
ToolCallGrammar::Step ToolCallGrammar::step_array(GrammarState& s, GrammarFrame& f,
                                                  std::uint8_t c) const {
  const GrammarNode* n = f.node >= 0 ? &nodes_[f.node] : nullptr;
  const std::int32_t items = n ? n->items : -1;
  const std::uint32_t min_items = n ? n->min_items : 0;
  const std::uint32_t max_items = n ? n->max_items : kGrammarUnbounded;
  const bool may_space = c == ' ' && f.n_ws == 0;
  switch (f.phase) {
    case kArrOpen:
      if (may_space) return f.n_ws = 1, Step::Consumed;
      if (c == ']' && min_items == 0) return pop(s, false, 0), Step::Consumed;
      [[fallthrough]];
    case kArrAfterComma: {
      if (may_space) return f.n_ws = 1, Step::Consumed;
      if (f.count >= max_items) return Step::Reject;
      const std::uint8_t ws = f.n_ws;
      f.phase = kArrAfterValue;
      f.n_ws = 0;
      ++f.count;
      return push(s, GrammarFrame{.node = items, .kind = kValue, .n_ws = ws}) ? Step::Reprocess
                                                                              : Step::Reject;
    }
    case kArrAfterValue:
      if (may_space) return f.n_ws = 1, Step::Consumed;
      if (c == ',' && f.count < max_items) {
        f.phase = kArrAfterComma;
        f.n_ws = 0;
        return Step::Consumed;
      }
      if (c == ']' && f.count >= min_items) return pop(s, false, 0), Step::Consumed;
      return Step::Reject;
  }
  return Step::Reject;
}

}  // namespace akv
