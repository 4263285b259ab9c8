// Pre-tokenizer parsing and application (HF tokenizers split semantics).
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <functional>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/unicode.h"

namespace akv::tok {
namespace {

struct Segment {
  size_t begin, end;
  bool is_match;
};

// Covers [0, size) with the matches and the gaps between them.
void add_gaps(const std::vector<std::pair<size_t, size_t>>& matches, size_t size, std::vector<Segment>& out) {
  size_t prev = 0;
  for (auto [begin, end] : matches) {
    if (begin > prev) out.push_back({prev, begin, false});
    out.push_back({begin, end, true});
    prev = end;
  }
  if (prev < size) out.push_back({prev, size, false});
}

template <typename Pred>
void char_segments(std::string_view text, Pred pred, std::vector<Segment>& out) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = pos;
    int32_t cp = utf8_next(text, pos);
    if (cp >= 0 && pred(cp)) {
      out.push_back({start, pos, true});
    } else if (!out.empty() && !out.back().is_match && out.back().end == start) {
      out.back().end = pos;
    } else {
      out.push_back({start, pos, false});
    }
  }
}

// Applies a split behavior to segments; returns the kept [begin, end) ranges.
std::vector<std::pair<size_t, size_t>> apply_behavior(std::vector<Segment>& segs, SplitBehavior behavior,
                                                      bool invert) {
  if (invert)
    for (Segment& s : segs) s.is_match = !s.is_match;
  std::vector<std::pair<size_t, size_t>> out;
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const Segment& s : segs)
        if (!s.is_match) out.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::Isolated:
      for (const Segment& s : segs) out.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.is_match && prev_match && !out.empty()) out.back().second = s.end;
        else out.emplace_back(s.begin, s.end);
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.is_match && !prev_match && !out.empty()) out.back().second = s.end;
        else out.emplace_back(s.begin, s.end);
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool next_match = false;
      for (size_t i = segs.size(); i-- > 0;) {
        const Segment& s = segs[i];
        if (s.is_match && !next_match && !out.empty()) out.back().first = s.begin;
        else out.emplace_back(s.begin, s.end);
        next_match = s.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

void split_pieces(std::vector<PreToken>& pieces, SplitBehavior behavior, bool invert,
                  const std::function<void(std::string_view, std::vector<Segment>&)>& find) {
  std::vector<PreToken> out;
  out.reserve(pieces.size());
  std::vector<Segment> segs;
  for (PreToken& piece : pieces) {
    segs.clear();
    find(piece.text, segs);
    for (auto [begin, end] : apply_behavior(segs, behavior, invert)) {
      if (end == begin) continue;
      out.push_back({piece.text.substr(begin, end - begin), piece.at_start && begin == 0});
    }
  }
  pieces = std::move(out);
}

void regex_segments(const Regex& regex, std::string_view text, std::vector<Segment>& segs) {
  std::vector<std::pair<size_t, size_t>> matches;
  regex.find_all(text, matches);
  add_gaps(matches, text.size(), segs);
}

void literal_segments(std::string_view literal, std::string_view text, std::vector<Segment>& segs) {
  std::vector<std::pair<size_t, size_t>> matches;
  if (!literal.empty()) {
    for (size_t pos = text.find(literal); pos != std::string_view::npos; pos = text.find(literal, pos)) {
      matches.emplace_back(pos, pos + literal.size());
      pos += literal.size();
    }
  }
  add_gaps(matches, text.size(), segs);
}

void apply_byte_level(const PreTokenizer& p, std::vector<PreToken>& pieces) {
  if (p.add_prefix_space)
    for (PreToken& piece : pieces)
      if (piece.text.empty() || piece.text[0] != ' ') piece.text = ' ' + piece.text;  // not insert(0): GCC 12 -O3 -Wrestrict
  if (p.use_regex)
    split_pieces(pieces, SplitBehavior::Isolated, false,
                 [&](std::string_view t, std::vector<Segment>& s) { regex_segments(*p.regex, t, s); });
  std::string mapped;
  for (PreToken& piece : pieces) {
    mapped.clear();
    append_byte_level(mapped, piece.text);
    piece.text.swap(mapped);
  }
}

void apply_metaspace(const PreTokenizer& p, std::vector<PreToken>& pieces) {
  for (PreToken& piece : pieces) {
    std::string text;
    text.reserve(piece.text.size() + 3);
    for (char c : piece.text) {
      if (c == ' ') text += p.replacement;
      else text += c;
    }
    bool prepend = p.prepend_scheme == PreTokenizer::PrependScheme::Always ||
                   (p.prepend_scheme == PreTokenizer::PrependScheme::First && piece.at_start);
    if (prepend && text.compare(0, p.replacement.size(), p.replacement) != 0) text.insert(0, p.replacement);
    piece.text = std::move(text);
  }
  if (p.split)
    split_pieces(pieces, SplitBehavior::MergedWithNext, false,
                 [&](std::string_view t, std::vector<Segment>& s) { literal_segments(p.replacement, t, s); });
}

}  // namespace

void PreTokenizer::apply(std::vector<PreToken>& pieces) const {
  using K = Kind;
  switch (kind) {
    case K::ByteLevel: apply_byte_level(*this, pieces); break;
    case K::Split:
      split_pieces(pieces, behavior, invert, [&](std::string_view t, std::vector<Segment>& s) {
        if (regex) regex_segments(*regex, t, s);
        else literal_segments(literal, t, s);
      });
      break;
    case K::Metaspace: apply_metaspace(*this, pieces); break;
    case K::Digits:
      split_pieces(pieces, individual_digits ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false,
                   [](std::string_view t, std::vector<Segment>& s) { char_segments(t, is_numeric, s); });
      break;
    case K::Whitespace:  // keep the matches of \w+|[^\w\s]+, drop the rest
      split_pieces(pieces, SplitBehavior::Removed, true,
                   [&](std::string_view t, std::vector<Segment>& s) { regex_segments(*regex, t, s); });
      break;
    case K::WhitespaceSplit:
      split_pieces(pieces, SplitBehavior::Removed, false,
                   [](std::string_view t, std::vector<Segment>& s) { char_segments(t, is_whitespace, s); });
      break;
    case K::Punctuation:
      split_pieces(pieces, behavior, false,
                   [](std::string_view t, std::vector<Segment>& s) { char_segments(t, is_punctuation, s); });
      break;
    case K::Bert:
      split_pieces(pieces, SplitBehavior::Removed, false,
                   [](std::string_view t, std::vector<Segment>& s) { char_segments(t, is_whitespace, s); });
      split_pieces(pieces, SplitBehavior::Isolated, false,
                   [](std::string_view t, std::vector<Segment>& s) { char_segments(t, is_punctuation, s); });
      break;
    case K::Sequence:
      for (const PreTokenizer& child : children) child.apply(pieces);
      break;
  }
}

namespace {

SplitBehavior parse_behavior(const Json& j, const std::string& where) {
  std::string b = json_string_or(j, "behavior", "Isolated");
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  throw_bad_field(where + ".behavior", "unknown split behavior '" + b + "'");
}

}  // namespace

PreTokenizer parse_pre_tokenizer(const Json& j, const std::string& where) {
  std::string type = json_type(j, where);
  PreTokenizer p;
  using K = PreTokenizer::Kind;
  if (type == "ByteLevel") {
    p.kind = K::ByteLevel;
    p.add_prefix_space = json_bool_or(j, "add_prefix_space", true);
    p.use_regex = json_bool_or(j, "use_regex", true);
    if (p.use_regex) p.regex = Regex::compile_or_throw(kGpt2Pattern, where);
  } else if (type == "Split") {
    p.kind = K::Split;
    PatternSpec spec = json_pattern(j, where);
    if (spec.is_regex) p.regex = Regex::compile_or_throw(spec.text, where + ".pattern.Regex");
    else p.literal = spec.text;
    p.behavior = parse_behavior(j, where);
    p.invert = json_bool_or(j, "invert", false);
  } else if (type == "Metaspace") {
    p.kind = K::Metaspace;
    p.replacement = json_string_or(j, "replacement", p.replacement);
    if (p.replacement.empty()) throw_bad_field(where + ".replacement", "empty replacement");
    std::string scheme = json_string_or(j, "prepend_scheme", "");
    if (scheme.empty()) scheme = json_bool_or(j, "add_prefix_space", true) ? "always" : "never";
    if (scheme == "always") p.prepend_scheme = PreTokenizer::PrependScheme::Always;
    else if (scheme == "first") p.prepend_scheme = PreTokenizer::PrependScheme::First;
    else if (scheme == "never") p.prepend_scheme = PreTokenizer::PrependScheme::Never;
    else throw_bad_field(where + ".prepend_scheme", "unknown prepend scheme '" + scheme + "'");
    p.split = json_bool_or(j, "split", true);
  } else if (type == "Digits") {
    p.kind = K::Digits;
    p.individual_digits = json_bool_or(j, "individual_digits", false);
  } else if (type == "Whitespace") {
    p.kind = K::Whitespace;
    p.regex = Regex::compile_or_throw(R"(\w+|[^\w\s]+)", where);
  } else if (type == "WhitespaceSplit") {
    p.kind = K::WhitespaceSplit;
  } else if (type == "Punctuation") {
    p.kind = K::Punctuation;
    p.behavior = parse_behavior(j, where);
  } else if (type == "BertPreTokenizer") {
    p.kind = K::Bert;
  } else if (type == "Sequence") {
    p.kind = K::Sequence;
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) throw_bad_field(where + ".pretokenizers", "missing or not an array");
    for (size_t i = 0; i < it->size(); ++i)
      p.children.push_back(parse_pre_tokenizer((*it)[i], where + ".pretokenizers[" + std::to_string(i) + "]"));
  } else {
    throw Error(ErrorKind::Unsupported, where + ": pre_tokenizer type '" + type + "' is not supported");
  }
  return p;
}

}  // namespace akv::tok
