// Decoder parsing and application.
#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/unicode.h"

namespace akv::tok {
namespace {

constexpr const char* kReplacementChar = "\xEF\xBF\xBD";

void decode_byte_level(std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& t : tokens)
    if (!append_byte_level_decoded(bytes, t)) bytes += t;
  tokens.assign(1, utf8_lossy(bytes));
}

int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    char c = t[i];
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10
          : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    value = value * 16 + d;
  }
  return value;
}

void decode_byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string pending;
  auto flush = [&] {
    if (pending.empty()) return;
    if (utf8_is_valid(pending)) out.push_back(pending);
    else
      for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(kReplacementChar);
    pending.clear();
  };
  for (std::string& t : tokens) {
    int b = parse_byte_token(t);
    if (b >= 0) {
      pending += static_cast<char>(b);
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  tokens = std::move(out);
}

// Strips up to `start` leading and `stop` trailing copies of the character `c`.
void strip_chars(std::string& token, const std::string& c, int start, int stop) {
  size_t begin = 0;
  for (int i = 0; i < start && token.compare(begin, c.size(), c) == 0; ++i) begin += c.size();
  size_t end = token.size();
  for (int i = 0; i < stop && end >= begin + c.size() && token.compare(end - c.size(), c.size(), c) == 0; ++i)
    end -= c.size();
  token = token.substr(begin, end - begin);
}

}  // namespace

void Decoder::apply(std::vector<std::string>& tokens) const {
  switch (kind) {
    case Kind::None: break;
    case Kind::ByteLevel: decode_byte_level(tokens); break;
    case Kind::Metaspace:
      for (size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = replace_all(tokens[i], replacement, " ");
        if (i == 0 && prepend && !tokens[i].empty() && tokens[i][0] == ' ') tokens[i].erase(0, 1);
      }
      break;
    case Kind::ByteFallback: decode_byte_fallback(tokens); break;
    case Kind::Fuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
      break;
    }
    case Kind::Strip:
      for (std::string& t : tokens) strip_chars(t, content, strip_start, strip_stop);
      break;
    case Kind::Replace:
      for (std::string& t : tokens)
        t = regex ? regex_replace_all(t, *regex, content) : replace_all(t, pattern, content);
      break;
    case Kind::BpeSuffix:
      if (pattern.empty()) break;
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_all(tokens[i], pattern, i + 1 == tokens.size() ? "" : " ");
      break;
    case Kind::Sequence:
      for (const Decoder& child : children) child.apply(tokens);
      break;
  }
}

Decoder parse_decoder(const Json& j, const std::string& where) {
  Decoder d;
  if (j.is_null()) return d;
  std::string type = json_type(j, where);
  using K = Decoder::Kind;
  if (type == "ByteLevel") {
    d.kind = K::ByteLevel;
  } else if (type == "Metaspace") {
    d.kind = K::Metaspace;
    d.replacement = json_string_or(j, "replacement", d.replacement);
    std::string scheme = json_string_or(j, "prepend_scheme", "");
    d.prepend = scheme.empty() ? json_bool_or(j, "add_prefix_space", true) : scheme != "never";
  } else if (type == "ByteFallback") {
    d.kind = K::ByteFallback;
  } else if (type == "Fuse") {
    d.kind = K::Fuse;
  } else if (type == "Strip") {
    d.kind = K::Strip;
    d.content = json_string(j, "content", where);
    if (d.content.empty()) throw_bad_field(where + ".content", "empty");
    auto start = j.find("start"), stop = j.find("stop");
    if (start == j.end() || !start->is_number_integer() || stop == j.end() || !stop->is_number_integer())
      throw_bad_field(where, "start/stop missing or not integers");
    d.strip_start = start->get<int>();
    d.strip_stop = stop->get<int>();
  } else if (type == "Replace") {
    d.kind = K::Replace;
    PatternSpec p = json_pattern(j, where);
    if (p.is_regex) d.regex = Regex::compile_or_throw(p.text, where + ".pattern.Regex");
    else if (p.text.empty()) throw_bad_field(where + ".pattern.String", "empty pattern");
    else d.pattern = p.text;
    d.content = json_string(j, "content", where);
  } else if (type == "BPEDecoder") {
    d.kind = K::BpeSuffix;
    d.pattern = json_string_or(j, "suffix", "</w>");
  } else if (type == "Sequence") {
    d.kind = K::Sequence;
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) throw_bad_field(where + ".decoders", "missing or not an array");
    for (size_t i = 0; i < it->size(); ++i)
      d.children.push_back(parse_decoder((*it)[i], where + ".decoders[" + std::to_string(i) + "]"));
  } else {
    throw Error(ErrorKind::Unsupported, where + ": decoder type '" + type + "' is not supported");
  }
  return d;
}

}  // namespace akv::tok
