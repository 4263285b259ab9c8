// ToolCallGrammar for Qwen3-Coder's XML calls: after "<tool_call>\n<function=NAME>\n" the
// parameters in schema order (required ones never skipped), each
//   <parameter=K>\nVALUE\n</parameter>\n
// then "</function>\n</tool_call>". A parameter QwenXmlCallParser reads as a string
// (qwen_xml_value_is_string) is raw text that never contains "</parameter>" (held to the
// schema's minLength/maxLength, newlines not counted towards minLength since the parser drops a
// trailing one), or one of a string enum's values; any other parameter is a JSON value of its
// schema (the parser's JSON reading of it then has the schema's type). Costs follow the same
// rule as json_schema_completion.cpp: a byte along a shortest completion lowers it by one.
#include <algorithm>

#include "chat/json_schema_internal.h"
#include "chat/qwen_xml_call_parser.h"

namespace akv {

using namespace grammar;

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::size_t kMaxXmlParams = 63;  // the opener mask holds them and </function>

std::uint32_t saturate(std::uint64_t v) {
  return v >= kGrammarUnreachable ? kGrammarUnreachable : static_cast<std::uint32_t>(v);
}

std::uint64_t low_bits(std::size_t n) {
  return n >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1;
}

// Raw text frames keep the UTF-8 continuation range in mask's low 16 bits and the characters
// counted towards minLength (all but newlines) in its high 32.
std::uint32_t text_min_count(const GrammarFrame& f) {
  return static_cast<std::uint32_t>(f.mask >> 32);
}
void set_text_state(GrammarFrame& f, std::uint32_t min_count, std::uint32_t range) {
  f.mask = (std::uint64_t{min_count} << 32) | range;
}

}  // namespace

void ToolCallGrammar::compile_xml_tools(const std::vector<ToolSpec>& tools) {
  for (std::size_t t = 0; t < tool_roots_.size(); ++t) {
    const GrammarNode& root = nodes_[tool_roots_[t]];
    const ojson& schema = tools[t].input_schema;
    const ojson* props =
        schema.is_object() && schema.contains("properties") && schema["properties"].is_object()
            ? &schema["properties"]
            : nullptr;
    XmlTool x;
    const std::size_t n = root.free_keys ? 0 : std::min(root.key_literals.size(), kMaxXmlParams);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string key = ojson::parse(root.key_literals[i]).get<std::string>();
      const ojson* ps = props && props->contains(key) ? &(*props)[key] : nullptr;
      XmlParam p;
      p.required = root.required[i];
      p.raw = qwen_xml_value_is_string(ps, &schema);
      const std::int32_t node = root.property_nodes[i];
      if (!p.raw) {
        p.node = node;
        p.value_min = value_min_bytes(node);
        p.close = &xml_value_close_;
      } else {
        const GrammarNode* value = node >= 0 ? &nodes_[node] : nullptr;
        // An enum or const: the parser reads its string members back as they are.
        const bool literal = value && value->kind == GrammarNodeKind::Literal;
        if (literal)
          for (const std::string& lit : value->literals) {
            const ojson v = ojson::parse(lit, nullptr, false);
            if (v.is_string() && v.get<std::string>().find(kXmlParamEnd) == std::string::npos)
              p.raw_literals.push_back(v.get<std::string>());
          }
        if (!p.raw_literals.empty()) {
          p.value_min = kGrammarUnreachable;
          for (const std::string& lit : p.raw_literals)
            p.value_min = std::min(p.value_min, saturate(lit.size()));
          p.close = &xml_value_close_;
        } else {
          p.raw_literals.clear();
          p.node = value && value->kind == GrammarNodeKind::String ? node : -1;
          p.value_min = saturate(std::uint64_t{value && p.node >= 0 ? value->min_length : 0u} +
                                 kXmlParamEnd.size());
          p.close = &xml_raw_close_;
        }
      }
      x.openers.push_back("<parameter=" + key + ">\n");
      x.params.push_back(std::move(p));
    }
    x.openers.push_back(std::string(kXmlFunctionEnd));
    x.required_rest.assign(n + 1, 0);
    for (std::size_t i = n; i-- > 0;) {
      const XmlParam& p = x.params[i];
      const std::uint64_t bytes =
          x.openers[i].size() + std::uint64_t{p.value_min} + (*p.close)[0].size();
      x.required_rest[i] = saturate(x.required_rest[i + 1] + (p.required ? bytes : 0));
    }
    xml_tools_.push_back(std::move(x));
  }
}

// f.node: the tool; f.pos: the next parameter that may come; f.aux: the one chosen.
ToolCallGrammar::Step ToolCallGrammar::step_xml_params(GrammarState& s, GrammarFrame& f,
                                                       std::uint8_t) const {
  const XmlTool& tool = xml_tools_[static_cast<std::size_t>(f.node)];
  const std::size_t n = tool.params.size();
  switch (f.phase) {
    case kXmlNext: {
      // The parameters up to the next required one; </function> once none is required.
      std::size_t last = f.pos;
      while (last < n && !tool.params[last].required) ++last;
      const std::uint64_t mask = low_bits(last + 1) & ~low_bits(f.pos);
      f.phase = kXmlValue;
      return push(s,
                  GrammarFrame{.literals = &tool.openers, .mask = mask, .kind = kLit, .report = 1})
                 ? Step::Reprocess
                 : Step::Reject;
    }
    case kXmlValue: {
      if (f.aux == n) return pop(s, false, 0), Step::Reprocess;  // </function> was written
      const XmlParam& p = tool.params[f.aux];
      f.phase = kXmlClose;
      GrammarFrame value{.node = p.node, .kind = kValue};
      if (!p.raw_literals.empty())
        value = GrammarFrame{
            .literals = &p.raw_literals, .mask = low_bits(p.raw_literals.size()), .kind = kLit};
      else if (p.raw)
        value = GrammarFrame{.mask = 0x80BF, .node = p.node, .kind = kXmlText};
      return push(s, value) ? Step::Reprocess : Step::Reject;
    }
    case kXmlClose: {
      const XmlParam& p = tool.params[f.aux];
      f.phase = kXmlNext;
      return push(s, GrammarFrame{.literals = p.close, .mask = 1, .kind = kLit}) ? Step::Reprocess
                                                                                 : Step::Reject;
    }
  }
  return Step::Reject;
}

// Raw text up to "</parameter>". pos: bytes of it matched (held: text if the match breaks);
// count: characters of text (maxLength); aux: UTF-8 continuation bytes due; phase 1: a newline
// held at maxLength.
ToolCallGrammar::Step ToolCallGrammar::step_xml_text(GrammarState& s, GrammarFrame& f,
                                                     std::uint8_t c) const {
  const GrammarNode* n = f.node >= 0 ? &nodes_[f.node] : nullptr;
  const std::uint32_t max = n ? n->max_length : kGrammarUnbounded;
  const std::uint32_t min = n ? n->min_length : 0;
  std::uint32_t min_count = text_min_count(f);
  if (f.aux > 0) {
    const auto range = static_cast<std::uint32_t>(f.mask & 0xFFFF);
    if (c < (range >> 8) || c > (range & 0xFF)) return Step::Reject;
    --f.aux;
    set_text_state(f, min_count, 0x80BF);
    return Step::Consumed;
  }
  if (f.pos > 0) {
    if (c == static_cast<std::uint8_t>(kXmlParamEnd[f.pos])) {
      if (f.pos + 1 < kXmlParamEnd.size()) return ++f.pos, Step::Consumed;
      if (min_count < min) return Step::Reject;
      return pop(s, false, 0), Step::Consumed;
    }
    // The held bytes were text (ASCII, no newline); a held newline past maxLength cannot be.
    if (f.phase != 0 || std::uint64_t{f.count} + f.pos > max) return Step::Reject;
    f.count += f.pos;
    min_count += f.pos;
    f.pos = 0;
  }
  if (c == '<') {
    set_text_state(f, min_count, 0x80BF);
    return f.pos = 1, Step::Consumed;
  }
  if (f.phase != 0) return Step::Reject;  // a held newline: only </parameter> may follow
  // At maxLength a newline may still come: the one before </parameter>, which the parser drops.
  if (c == '\n' && f.count >= max) return f.phase = 1, Step::Consumed;
  if ((c < 0x20 && c != '\n' && c != '\t') || f.count >= max) return Step::Reject;
  ++f.count;
  if (c != '\n') ++min_count;
  std::uint32_t range = 0x80BF;
  if (c >= 0x80) {
    if (c >= 0xC2 && c <= 0xDF)
      f.aux = 1;
    else if (c == 0xE0)
      f.aux = 2, range = 0xA0BF;
    else if (c == 0xED)
      f.aux = 2, range = 0x809F;
    else if (c >= 0xE1 && c <= 0xEF)
      f.aux = 2;
    else if (c == 0xF0)
      f.aux = 3, range = 0x90BF;
    else if (c >= 0xF1 && c <= 0xF3)
      f.aux = 3;
    else if (c == 0xF4)
      f.aux = 3, range = 0x808F;
    else
      return Step::Reject;
  }
  set_text_state(f, min_count, range);
  return Step::Consumed;
}

ToolCallGrammar::StringRoom ToolCallGrammar::xml_text_room(const GrammarFrame& f) const {
  if (f.pos != 0 || f.aux != 0 || f.phase != 0) return {};
  const GrammarNode* n = f.node >= 0 ? &nodes_[f.node] : nullptr;
  const std::uint32_t min_count = text_min_count(f);
  return {.inside = true,
          .chars_left = !n || n->max_length == kGrammarUnbounded ? kGrammarUnbounded
                                                                 : n->max_length - f.count,
          .chars_needed = n && n->min_length > min_count ? n->min_length - min_count : 0,
          .xml = true};
}

std::uint32_t ToolCallGrammar::xml_frame_rest_bytes(const GrammarFrame& f) const {
  if (f.kind == kXmlText) {
    const std::uint32_t min = f.node >= 0 ? nodes_[f.node].min_length : 0;
    // Held bytes count as text once the match breaks; a '<' then starts it again, so they
    // shorten what minLength still needs without costing a byte.
    const std::uint64_t have = std::uint64_t{text_min_count(f)} + f.pos;
    const std::uint64_t need = min > have ? min - have : 0;
    if (f.aux > 0) return saturate(f.aux + need + kXmlParamEnd.size());
    if (f.pos > 0 && text_min_count(f) >= min) return saturate(kXmlParamEnd.size() - f.pos);
    return saturate(need + kXmlParamEnd.size());
  }
  const XmlTool& tool = xml_tools_[static_cast<std::size_t>(f.node)];
  const std::uint64_t end = kXmlFunctionEnd.size();
  switch (f.phase) {
    case kXmlNext:
      return saturate(tool.required_rest[f.pos] + end);
    case kXmlValue:
      if (f.aux == tool.params.size()) return 0;
      return xml_choice_rest_bytes(f, f.aux);
    case kXmlClose:
      return saturate((*tool.params[f.aux].close)[0].size() +
                      std::uint64_t{tool.required_rest[f.pos]} + end);
  }
  return kGrammarUnreachable;
}

// What follows opener `i` of the parameters frame `params`: its value, closing text, the
// required parameters after it and </function> (nothing after </function> itself).
std::uint32_t ToolCallGrammar::xml_choice_rest_bytes(const GrammarFrame& params,
                                                     std::size_t i) const {
  const XmlTool& tool = xml_tools_[static_cast<std::size_t>(params.node)];
  if (i >= tool.params.size()) return 0;
  const XmlParam& p = tool.params[i];
  return saturate(std::uint64_t{p.value_min} + (*p.close)[0].size() + tool.required_rest[i + 1] +
                  kXmlFunctionEnd.size());
}

}  // namespace akv
