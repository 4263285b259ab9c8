// Normalizer parsing and application (HF tokenizers semantics).
#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include "tokenizer/json_util.h"

namespace akv::tok {

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.data() + pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.data() + pos, text.size() - pos);
  return out;
}

std::string regex_replace_all(std::string_view text, const Regex& regex, std::string_view to) {
  std::vector<std::pair<size_t, size_t>> matches;
  regex.find_all(text, matches);
  std::string out;
  size_t pos = 0;
  for (auto [begin, end] : matches) {
    out.append(text.data() + pos, begin - pos);
    out.append(to);
    pos = end;
  }
  out.append(text.data() + pos, text.size() - pos);
  return out;
}

namespace {

std::string strip_whitespace(std::string_view text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      int32_t cp = utf8_next(text, next);
      if (cp < 0 || !is_whitespace(cp)) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t next = start;
      int32_t cp = utf8_next(text, next);
      if (cp < 0 || !is_whitespace(cp)) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::string strip_accents(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = pos;
    int32_t cp = utf8_next(text, pos);
    if (cp >= 0 && utf8proc_category(cp) == UTF8PROC_CATEGORY_MN) continue;
    out.append(text.data() + start, pos - start);
  }
  return out;
}

}  // namespace

void Normalizer::apply(std::string& text) const {
  switch (kind) {
    case Kind::Unicode: text = normalize_unicode(text, form); break;
    case Kind::Lowercase: text = to_lower(text); break;
    case Kind::Replace:
      text = regex ? regex_replace_all(text, *regex, content) : replace_all(text, pattern, content);
      break;
    case Kind::Prepend:
      if (!text.empty()) text.insert(0, content);
      break;
    case Kind::Strip: text = strip_whitespace(text, strip_left, strip_right); break;
    case Kind::StripAccents: text = strip_accents(text); break;
    case Kind::Sequence:
      for (const Normalizer& child : children) child.apply(text);
      break;
  }
}

Normalizer parse_normalizer(const Json& j, const std::string& where) {
  std::string type = json_type(j, where);
  Normalizer n;
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    n.kind = Normalizer::Kind::Unicode;
    n.form = type == "NFC" ? NormalForm::Nfc : type == "NFD" ? NormalForm::Nfd
           : type == "NFKC" ? NormalForm::Nfkc : NormalForm::Nfkd;
  } else if (type == "Lowercase") {
    n.kind = Normalizer::Kind::Lowercase;
  } else if (type == "Replace") {
    n.kind = Normalizer::Kind::Replace;
    PatternSpec p = json_pattern(j, where);
    if (p.is_regex) n.regex = Regex::compile_or_throw(p.text, where + ".pattern.Regex");
    else if (p.text.empty()) throw_bad_field(where + ".pattern.String", "empty pattern");
    else n.pattern = p.text;
    n.content = json_string(j, "content", where);
  } else if (type == "Prepend") {
    n.kind = Normalizer::Kind::Prepend;
    n.content = json_string(j, "prepend", where);
  } else if (type == "Strip") {
    n.kind = Normalizer::Kind::Strip;
    n.strip_left = json_bool_or(j, "strip_left", true);
    n.strip_right = json_bool_or(j, "strip_right", true);
  } else if (type == "StripAccents") {
    n.kind = Normalizer::Kind::StripAccents;
  } else if (type == "Sequence") {
    n.kind = Normalizer::Kind::Sequence;
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) throw_bad_field(where + ".normalizers", "missing or not an array");
    for (size_t i = 0; i < it->size(); ++i)
      n.children.push_back(parse_normalizer((*it)[i], where + ".normalizers[" + std::to_string(i) + "]"));
  } else {
    throw Error(ErrorKind::Unsupported, where + ": normalizer type '" + type + "' is not supported");
  }
  return n;
}

}  // namespace akv::tok
