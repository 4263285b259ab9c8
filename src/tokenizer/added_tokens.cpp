// Added-token parsing and matching (HF AddedVocabulary semantics).
#include "tokenizer/added_tokens.h"

#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/unicode.h"

namespace akv::tok {
namespace {

int32_t last_code_point(std::string_view text) {
  if (text.empty()) return -1;
  size_t start = text.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return utf8_next(text, start);
}

bool is_word_char(int32_t cp) { return cp >= 0 && (is_alphanumeric(cp) || cp == '_'); }

// Start of the whitespace run that ends `text`.
size_t whitespace_run_start(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t next = start;
    int32_t cp = utf8_next(text, next);
    if (cp < 0 || !is_whitespace(cp)) break;
    end = start;
  }
  return end;
}

// Length of the whitespace run that starts `text`.
size_t whitespace_run_len(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    int32_t cp = utf8_next(text, next);
    if (cp < 0 || !is_whitespace(cp)) break;
    pos = next;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view text, int32_t token_index) {
  if (text.empty()) return;
  if (terminal.empty()) terminal.push_back(-1);
  int32_t node = 0;
  for (unsigned char b : text) {
    uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
    auto it = edges.find(key);
    if (it == edges.end()) {
      int32_t child = static_cast<int32_t>(terminal.size());
      terminal.push_back(-1);
      edges.emplace(key, child);
      node = child;
    } else {
      node = it->second;
    }
  }
  if (terminal[node] < 0) terminal[node] = token_index;  // first token with this text wins
  first_byte[static_cast<unsigned char>(text[0])] = true;
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  if (terminal.empty() || !first_byte[static_cast<unsigned char>(text[pos])]) return best;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == edges.end()) break;
    node = it->second;
    if (terminal[node] >= 0) best = {terminal[node], i + 1 - pos};
  }
  return best;
}

AddedVocabulary AddedVocabulary::parse_or_throw(const Json& j, const Normalizer* normalizer,
                                                const std::string& where) {
  AddedVocabulary v;
  if (j.is_null()) return v;
  if (!j.is_array()) throw_bad_field(where, "expected an array");
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& e = j[i];
    std::string at = where + "[" + std::to_string(i) + "]";
    if (!e.is_object()) throw_bad_field(at, "expected an object");
    AddedToken t;
    auto id = e.find("id");
    if (id == e.end() || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() > (1 << 30))
      throw_bad_field(at + ".id", "missing or not a non-negative integer");
    t.id = static_cast<int32_t>(id->get<int64_t>());
    t.content = json_string(e, "content", at);
    if (t.content.empty()) throw_bad_field(at + ".content", "empty token");
    t.special = json_bool_or(e, "special", false);
    t.lstrip = json_bool_or(e, "lstrip", false);
    t.rstrip = json_bool_or(e, "rstrip", false);
    t.single_word = json_bool_or(e, "single_word", false);
    t.normalized = json_bool_or(e, "normalized", !t.special);
    v.add(std::move(t), normalizer);
  }
  return v;
}

AddedVocabulary AddedVocabulary::build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  AddedVocabulary v;
  for (AddedToken& t : tokens) v.add(std::move(t), normalizer);
  return v;
}

void AddedVocabulary::add(AddedToken t, const Normalizer* normalizer) {
  auto index = static_cast<int32_t>(tokens_.size());
  by_id_[t.id] = tokens_.size();
  by_content_.emplace(t.content, t.id);
  if (t.normalized) {
    std::string text = t.content;
    if (normalizer != nullptr) normalizer->apply(text);
    normalized_trie_.insert(text, index);
  } else {
    raw_trie_.insert(t.content, index);
  }
  tokens_.push_back(std::move(t));
}

void AddedVocabulary::split(std::string_view text, bool normalized_tokens, std::vector<AddedSplit>& out) const {
  const Trie& trie = normalized_tokens ? normalized_trie_ : raw_trie_;
  size_t done = 0;  // end of the last emitted piece
  size_t pos = 0;
  while (pos < text.size()) {
    auto [index, len] = trie.longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[index];
    size_t start = pos, stop = pos + len;
    if (t.single_word) {
      bool left_ok = start == 0 || !is_word_char(last_code_point(text.substr(0, start)));
      size_t next = stop;
      bool right_ok = stop == text.size() || !is_word_char(utf8_next(text, next));
      if (!left_ok || !right_ok) {
        pos = stop;
        continue;
      }
    }
    if (t.lstrip) start = std::max(whitespace_run_start(text.substr(0, start)), done);
    if (t.rstrip) stop += whitespace_run_len(text.substr(stop));
    if (start > done) out.push_back({-1, done, start});
    out.push_back({t.id, start, stop});
    done = stop;
    pos = stop;
  }
  if (done < text.size()) out.push_back({-1, done, text.size()});
}

std::optional<int32_t> AddedVocabulary::find(std::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace akv::tok
