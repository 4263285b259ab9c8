// Shortest completions for ToolCallGrammar: the fewest bytes that finish the call from a state.
// Each value's shortest text is computed once after compiling; a state's cost then adds up each
// frame's remainder in O(depth). The costs follow the recognizer's rules exactly (first-match
// anyOf, required properties in order, minLength/minItems), so a byte along a shortest
// completion always lowers the cost by one.
#include <algorithm>
#include <bit>

#include "chat/json_schema_internal.h"

namespace akv {

using namespace grammar;

namespace {

std::uint32_t saturate(std::uint64_t v) {
  return v >= kGrammarUnreachable ? kGrammarUnreachable : static_cast<std::uint32_t>(v);
}

constexpr std::uint8_t kValueStartBytes[] = {'{', '[', '"', '-', '0', '1', '2', '3', '4',
                                             '5', '6', '7', '8', '9', 't', 'f', 'n'};

// The shortest Any value starting with `c`: {} [] "" -0 0 true false null.
std::uint32_t any_start_bytes(std::uint8_t c) {
  switch (c) {
    case '{':
    case '[':
    case '"':
    case '-':
      return 2;
    case 't':
    case 'n':
      return 4;
    case 'f':
      return 5;
    default:
      return is_digit(c) ? 1 : kGrammarUnreachable;
  }
}

// `min` items of `item` bytes each, with the commas between them (0 items: 0 bytes).
std::uint64_t items_bytes(std::uint64_t min, std::uint64_t item) {
  return min == 0 ? 0 : min * (item + 1) - 1;
}

}  // namespace

std::uint32_t ToolCallGrammar::value_min_bytes(std::int32_t node) const {
  return node < 0 ? 1 : nodes_[node].min_bytes;
}

// The shortest text of `node` whose first byte is `c`, resolving anyOf as step_value does.
std::uint32_t ToolCallGrammar::start_min_bytes(std::int32_t node, std::uint8_t c) const {
  for (int hops = 0; node >= 0 && nodes_[node].kind == GrammarNodeKind::AnyOf; ++hops) {
    if (hops > kMaxSchemaDepth) return kGrammarUnreachable;
    std::int32_t chosen = -2;
    for (auto alt : nodes_[node].alternatives)
      if (can_start(alt, c, kMaxSchemaDepth)) {
        chosen = alt;
        break;
      }
    if (chosen == -2) return kGrammarUnreachable;
    node = chosen;
  }
  if (node < 0) return any_start_bytes(c);
  const GrammarNode& n = nodes_[node];
  switch (n.kind) {
    case GrammarNodeKind::Any:
      return any_start_bytes(c);
    case GrammarNodeKind::Object:
      return c == '{' ? n.min_bytes : kGrammarUnreachable;
    case GrammarNodeKind::Array:
      return c == '[' ? n.min_bytes : kGrammarUnreachable;
    case GrammarNodeKind::String:
      return c == '"' ? n.min_bytes : kGrammarUnreachable;
    case GrammarNodeKind::Number:
    case GrammarNodeKind::Integer:
      return c == '-' ? 2 : is_digit(c) ? 1 : kGrammarUnreachable;
    case GrammarNodeKind::Literal: {
      std::uint32_t best = kGrammarUnreachable;
      for (const auto& lit : n.literals)
        if (!lit.empty() && static_cast<std::uint8_t>(lit[0]) == c)
          best = std::min(best, saturate(lit.size()));
      return best;
    }
    case GrammarNodeKind::AnyOf:
      break;
  }
  return kGrammarUnreachable;
}

// Nodes only refer to nodes compiled before them ($ref recursion compiles fresh copies down to a
// depth limit), so passes in index order settle quickly; the loop does not rely on it.
void ToolCallGrammar::compute_min_bytes() {
  auto object_parts = [&](GrammarNode& n) {
    const std::size_t n_props = n.key_literals.size();
    n.required_rest_bytes.assign(n_props + 1, 0);
    n.optional_min_bytes.assign(n_props + 1, kGrammarUnreachable);
    for (std::size_t i = n_props; i-- > 0;) {
      const std::uint64_t pair =
          n.key_literals[i].size() + 1 + value_min_bytes(n.property_nodes[i]);
      n.required_rest_bytes[i] =
          saturate(n.required_rest_bytes[i + 1] + (n.required[i] ? 1 + pair : 0));
      n.optional_min_bytes[i] = std::min(n.optional_min_bytes[i + 1], saturate(pair));
    }
  };
  auto shortest = [&](GrammarNode& n) -> std::uint32_t {
    switch (n.kind) {
      case GrammarNodeKind::Any:
      case GrammarNodeKind::Number:
      case GrammarNodeKind::Integer:
        return 1;
      case GrammarNodeKind::Object:
        if (n.free_keys) return 2;
        object_parts(n);
        return saturate(1 + std::max<std::uint64_t>(n.required_rest_bytes[0], 1));
      case GrammarNodeKind::Array:
        return saturate(2 + items_bytes(n.min_items, value_min_bytes(n.items)));
      case GrammarNodeKind::String:
        return saturate(2 + std::uint64_t{n.min_length});
      case GrammarNodeKind::Literal: {
        std::uint32_t best = kGrammarUnreachable;
        for (const auto& lit : n.literals) best = std::min(best, saturate(lit.size()));
        return best;
      }
      case GrammarNodeKind::AnyOf:
        break;
    }
    std::uint32_t best = kGrammarUnreachable;
    const auto node = static_cast<std::int32_t>(&n - nodes_.data());
    for (std::uint8_t c : kValueStartBytes) best = std::min(best, start_min_bytes(node, c));
    return best;
  };
  for (std::size_t round = 0; round <= nodes_.size(); ++round) {
    bool changed = false;
    for (auto& n : nodes_) {
      const std::uint32_t v = shortest(n);
      changed |= v < n.min_bytes;
      n.min_bytes = std::min(n.min_bytes, v);
    }
    if (!changed) break;
  }
  for (auto& n : nodes_)
    if (n.kind == GrammarNodeKind::Object && !n.free_keys) object_parts(n);
  std::uint64_t best = kGrammarUnreachable;
  for (std::size_t i = 0; i < tool_roots_.size(); ++i)
    best = std::min<std::uint64_t>(
        best, name_literals_[i].size() + syntax_.middle.size() + std::uint64_t{args_min_bytes(i)});
  tools_min_bytes_ = saturate(best);
}

std::uint32_t ToolCallGrammar::args_min_bytes(std::size_t i) const {
  if (!xml_) return value_min_bytes(tool_roots_[i]);
  if (i >= xml_tools_.size()) return kGrammarUnreachable;  // before compile_xml_tools
  return saturate(std::uint64_t{xml_tools_[i].required_rest[0]} + kXmlFunctionEnd.size());
}

std::uint32_t ToolCallGrammar::object_rest_bytes(const GrammarFrame& f) const {
  const GrammarNode* n = f.node >= 0 ? &nodes_[f.node] : nullptr;
  if (n == nullptr || n->free_keys) {
    switch (f.phase) {
      case kObjColon:
        return 3;  // :0}
      case kObjValueStart:
        return 2;  // 0}
      case kObjAfterComma:
        return 5;  // "":0}
      default:
        return 1;  // }
    }
  }
  const auto& required = n->required_rest_bytes;
  switch (f.phase) {
    case kObjOpen:
      return std::max<std::uint32_t>(required[0], 1);  // drops the first ',', adds '}'
    case kObjColon:
      return saturate(2 + std::uint64_t{value_min_bytes(n->property_nodes[f.aux])} +
                      required[f.pos]);
    case kObjValueStart:
      return saturate(1 + std::uint64_t{value_min_bytes(n->property_nodes[f.aux])} +
                      required[f.pos]);
    case kObjAfterValue:
      return saturate(1 + std::uint64_t{required[f.pos]});
    case kObjAfterComma:
      return required[f.pos] > 0 ? required[f.pos]
                                 : saturate(1 + std::uint64_t{n->optional_min_bytes[f.pos]});
  }
  return kGrammarUnreachable;
}

// What the frame still has to write once the frame above it (if any) is complete.
std::uint32_t ToolCallGrammar::frame_rest_bytes(const GrammarFrame& f) const {
  switch (f.kind) {
    case kRoot: {
      const std::uint64_t suffix = syntax_.suffix.size();
      switch (f.phase) {
        case 0:
          return saturate(syntax_.prefix.size() + tools_min_bytes_ + suffix);
        case 1:
          return saturate(tools_min_bytes_ + suffix);
        case 2:
          return saturate(syntax_.middle.size() + args_min_bytes(f.aux) + suffix);
        case 3:
          return saturate(args_min_bytes(f.aux) + suffix);
        case 4:
          return saturate(suffix);
        default:
          return 0;
      }
    }
    case kValue:
      return value_min_bytes(f.node);
    case kObject:
      return object_rest_bytes(f);
    case kArray: {
      const GrammarNode* n = f.node >= 0 ? &nodes_[f.node] : nullptr;
      const std::uint64_t item = value_min_bytes(n ? n->items : -1);
      const std::uint64_t min = n ? n->min_items : 0;
      const std::uint64_t left = min > f.count ? min - f.count : 0;
      if (f.phase == kArrOpen) return saturate(1 + items_bytes(min, item));
      if (f.phase == kArrAfterValue) return saturate(1 + left * (item + 1));
      return saturate(1 + items_bytes(std::max<std::uint64_t>(left, 1), item));
    }
    case kStr: {
      const std::uint32_t pending = f.aux > 0      ? f.aux
                                    : f.phase == 1 ? 1
                                    : f.phase >= 2 ? 6 - f.phase
                                                   : 0;
      const std::uint32_t min = f.node >= 0 ? nodes_[f.node].min_length : 0;
      return pending + (min > f.count ? min - f.count : 0) + 1;
    }
    case kNum:
      switch (f.phase) {
        case kNumZero:
        case kNumInt:
        case kNumFrac:
        case kNumExp:
          return 0;
        default:
          return 1;
      }
    case kLit: {
      std::uint32_t best = kGrammarUnreachable;
      for (std::uint64_t m = f.mask; m != 0; m &= m - 1)
        best = std::min(best, saturate((*f.literals)[std::countr_zero(m)].size() - f.pos));
      return best;
    }
    case kXmlParams:
    case kXmlText:
      return xml_frame_rest_bytes(f);
  }
  return kGrammarUnreachable;
}

// A tool name or property key being matched: the rest of the literal plus what its parent
// writes after that choice, minimised over the candidates still possible.
std::uint32_t ToolCallGrammar::choice_rest_bytes(const GrammarFrame& lit,
                                                 const GrammarFrame& parent) const {
  std::uint64_t best = kGrammarUnreachable;
  for (std::uint64_t m = lit.mask; m != 0; m &= m - 1) {
    const int i = std::countr_zero(m);
    std::uint64_t tail = 0;
    if (parent.kind == kRoot) {
      tail = syntax_.middle.size() + args_min_bytes(i) + syntax_.suffix.size();
    } else if (parent.kind == kXmlParams) {
      tail = xml_choice_rest_bytes(parent, static_cast<std::size_t>(i));
    } else {
      const GrammarNode& n = nodes_[parent.node];
      tail = 2 + std::uint64_t{value_min_bytes(n.property_nodes[i])} + n.required_rest_bytes[i + 1];
    }
    best = std::min(best, (*lit.literals)[i].size() - lit.pos + tail);
  }
  return saturate(best);
}

std::uint32_t ToolCallGrammar::shortest_completion_bytes(const GrammarState& s) const {
  if (s.dead) return kGrammarUnreachable;
  std::uint64_t total = 0;
  for (int k = s.depth - 1; k >= 0; --k) {
    const GrammarFrame& f = s.frames[k];
    if (f.kind == kLit && f.report != 0 && k > 0) {
      total += choice_rest_bytes(f, s.frames[k - 1]);
      --k;  // the parent's rest is part of the choice
    } else {
      total += frame_rest_bytes(f);
    }
  }
  return saturate(total);
}

}  // namespace akv
