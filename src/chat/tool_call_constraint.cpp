#include "chat/tool_call_constraint.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "base/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace akv {

namespace {

// Call markers a tokenizer may mark special but a forced call must be able to write.
constexpr std::string_view kMarkerTokens[] = {"<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>",
                                              "<|channel|>", "<|constrain|>", "<|message|>", "<|call|>"};

bool is_marker(std::string_view text) {
  return std::find(std::begin(kMarkerTokens), std::end(kMarkerTokens), text) !=
         std::end(kMarkerTokens);
}

// Raw bytes of one token: SentencePiece pieces ("▁" = space, <0xHH> = one byte) or byte-level
// BPE pieces (GPT-2 table); added tokens are their text.
std::string token_bytes(const std::string& text, bool sentencepiece) {
  if (sentencepiece) {
    if (text.size() == 6 && text.starts_with("<0x") && text.back() == '>') {
      return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
    }
    std::string out;
    for (std::size_t i = 0; i < text.size();) {
      if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
        out += ' ';
        i += 3;
      } else {
        out += text[i++];
      }
    }
    return out;
  }
  std::string out;
  if (!tok::append_byte_level_decoded(out, text)) return text;
  return out;
}

// The number of characters when `b` is whole UTF-8 characters (RFC 3629) with no '"', '\\' or
// control byte; 0 otherwise.
std::size_t count_string_chars(std::string_view b) {
  std::size_t n_chars = 0;
  for (std::size_t i = 0; i < b.size();) {
    const auto c = static_cast<unsigned char>(b[i++]);
    if (c < 0x20 || c == '"' || c == '\\') return 0;
    ++n_chars;
    int n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80)
      n = 0;
    else if (c >= 0xC2 && c <= 0xDF)
      n = 1;
    else if (c == 0xE0)
      n = 2, lo = 0xA0;
    else if (c == 0xED)
      n = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF)
      n = 2;
    else if (c == 0xF0)
      n = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3)
      n = 3;
    else if (c == 0xF4)
      n = 3, hi = 0x8F;
    else
      return 0;
    for (int k = 0; k < n; ++k, ++i) {
      if (i >= b.size()) return 0;
      const auto d = static_cast<unsigned char>(b[i]);
      if (d < lo || d > hi) return 0;
      lo = 0x80, hi = 0xBF;
    }
  }
  return n_chars;
}

void copy_state(GrammarState& dst, const GrammarState& src) {
  dst.depth = src.depth;
  dst.dead = src.dead;
  std::copy_n(src.frames.begin(), src.depth, dst.frames.begin());
}

}  // namespace

VocabTrie::VocabTrie(const std::vector<std::string>& bytes, std::vector<std::int32_t> ids)
    : token_ids_(std::move(ids)) {
  std::sort(token_ids_.begin(), token_ids_.end(), [&](std::int32_t a, std::int32_t b) {
    return bytes[a] != bytes[b] ? bytes[a] < bytes[b] : a < b;
  });
  std::vector<std::uint32_t> path;  // path[k]: node of the current string's prefix of length k+1
  const std::string* prev = nullptr;
  for (std::uint32_t t = 0; t < token_ids_.size(); ++t) {
    const std::string& s = bytes[token_ids_[t]];
    max_depth_ = std::max(max_depth_, s.size());
    std::size_t common = 0;
    if (prev) {
      const std::size_t limit = std::min({prev->size(), s.size(), path.size()});
      while (common < limit && (*prev)[common] == s[common]) ++common;
    }
    const std::vector<std::uint32_t> old_path = path;
    path.resize(common);
    for (std::size_t k = common; k < s.size(); ++k) {
      const auto id = static_cast<std::uint32_t>(nodes_.size());
      nodes_.push_back(Node{.byte = static_cast<std::uint8_t>(s[k])});
      if (k == common && k < old_path.size())
        nodes_[old_path[k]].next_sibling = id;  // a later sibling
      if (k > 0) nodes_[path[k - 1]].has_child = true;
      path.push_back(id);
    }
    Node& end = nodes_[path[s.size() - 1]];
    if (end.token_end == end.token_begin) end.token_begin = t;
    end.token_end = t + 1;
    prev = &s;
  }
}

ConstraintVocab::ConstraintVocab(const Tokenizer& tokenizer) {
  const std::int32_t n = tokenizer.vocab_size();
  const bool sentencepiece = tokenizer.find_token("<0x0A>").has_value();
  bytes_.resize(n);
  string_chars_.assign(n, 0);
  std::vector<std::int32_t> all, breaking, xml_breaking;
  xml_text_chars_.assign(n, 0);
  std::array<bool, 256> single_byte{};
  for (std::int32_t id = 0; id < n; ++id) {
    const std::string* text = tokenizer.token_text(id);
    if (text == nullptr || text->empty()) continue;
    if (tokenizer.is_special(id) && !is_marker(*text)) continue;
    bytes_[id] = token_bytes(*text, sentencepiece && !tokenizer.is_special(id));
    all.push_back(id);
    if (bytes_[id].size() == 1) single_byte[static_cast<std::uint8_t>(bytes_[id][0])] = true;
    if (const std::size_t chars = count_string_chars(bytes_[id]); chars > 0)
      string_chars_[id] = static_cast<std::uint16_t>(std::min<std::size_t>(chars, 0xFFFF));
    else
      breaking.push_back(id);
    if (string_chars_[id] != 0 && bytes_[id].find('<') == std::string::npos)
      xml_text_chars_[id] = string_chars_[id];
    else
      xml_breaking.push_back(id);
  }
  has_byte_tokens_ = single_byte['\n'];
  for (int c = 0x20; c < 0x7F; ++c) has_byte_tokens_ &= single_byte[c];
  if (tokenizer.eos_id() >= 0) eos_ids_.push_back(tokenizer.eos_id());
  all_ = VocabTrie(bytes_, std::move(all));
  string_breaking_ = VocabTrie(bytes_, std::move(breaking));
  xml_text_breaking_ = VocabTrie(bytes_, std::move(xml_breaking));
}

ToolCallConstraint::ToolCallConstraint(std::shared_ptr<const ConstraintVocab> vocab,
                                       std::shared_ptr<const ToolCallGrammar> grammar,
                                       std::int32_t max_tokens)
    : vocab_(std::move(vocab)),
      grammar_(std::move(grammar)),
      state_(grammar_->initial_state()),
      max_tokens_(std::max(max_tokens, 0)) {
  walk_stack_.resize(vocab_->all().max_depth() + 2);
}

void ToolCallConstraint::Scan::consider(std::int32_t id, std::uint32_t bytes_after) {
  if (!check_budget || bytes_after <= limit_bytes) {
    if (allowed) (*allowed)[id] = 1;
    ++n_allowed;
  }
  if (bytes_after < best_bytes || (bytes_after == best_bytes && id < best_id)) {
    best_bytes = bytes_after;
    best_id = id;
  }
}

void ToolCallConstraint::walk(const VocabTrie& trie, const GrammarState& state, Scan& scan) const {
  if (trie.nodes().empty()) return;
  copy_state(walk_stack_[0], state);
  walk_children(trie, 0, 0, scan);
}

// Visits the sibling chain starting at `first`, whose parent's state is walk_stack_[depth];
// descends only where the grammar accepts the byte.
void ToolCallConstraint::walk_children(const VocabTrie& trie, std::uint32_t first,
                                       std::uint32_t depth, Scan& scan) const {
  const auto& nodes = trie.nodes();
  const auto& ids = trie.token_ids();
  for (std::uint32_t i = first;; i = nodes[i].next_sibling) {
    const VocabTrie::Node& node = nodes[i];
    GrammarState& s = walk_stack_[depth + 1];
    copy_state(s, walk_stack_[depth]);
    if (grammar_->advance_or_spoil(s, node.byte)) {
      if (node.token_end > node.token_begin) {
        const std::uint32_t after = scan.check_budget ? grammar_->shortest_completion_bytes(s) : 0;
        for (std::uint32_t t = node.token_begin; t < node.token_end; ++t)
          scan.consider(ids[t], after);
      }
      if (node.has_child) walk_children(trie, i + 1, depth + 1, scan);
    }
    if (node.next_sibling == 0) break;
  }
}

// Inside a free string the string-safe tokens need no walk: within the room left they keep the
// string open and shorten its completion by the characters minLength still needs.
void ToolCallConstraint::scan(const GrammarState& state, Scan& scan) const {
  const ToolCallGrammar::StringRoom room = grammar_->free_string_room(state);
  if (!room.inside) return walk(vocab_->all(), state, scan);
  const auto& chars = room.xml ? vocab_->xml_text_chars() : vocab_->string_chars();
  const auto n = static_cast<std::int32_t>(chars.size());
  if (!scan.check_budget) {
    std::vector<std::uint8_t>& allowed = *scan.allowed;
    const std::uint32_t left = room.chars_left;
    std::int32_t n_allowed = 0;
    for (std::int32_t id = 0; id < n; ++id) {
      allowed[id] = chars[id] != 0 && chars[id] <= left;
      n_allowed += allowed[id];
    }
    scan.n_allowed += n_allowed;
  } else {
    const std::uint32_t now = grammar_->shortest_completion_bytes(state);
    for (std::int32_t id = 0; id < n; ++id) {
      const std::uint32_t k = chars[id];
      if (k == 0 || k > room.chars_left) continue;
      scan.consider(id, now - std::min(k, room.chars_needed));
    }
  }
  walk(room.xml ? vocab_->xml_text_breaking() : vocab_->string_breaking(), state, scan);
}

void ToolCallConstraint::allowed(std::vector<std::uint8_t>& allowed) const {
  allowed.assign(vocab_->vocab_size(), 0);
  if (grammar_->complete(state_) || state_.dead) {
    for (auto id : vocab_->eos_ids()) allowed[id] = 1;
    return;
  }
  Scan s{.allowed = &allowed,
         .check_budget = max_tokens_ > 0,
         .limit_bytes = std::int64_t{max_tokens_} - n_accepted_ - 1};
  scan(state_, s);
  if (s.n_allowed == 0 && s.best_id >= 0) allowed[s.best_id] = 1;  // the budget started short
  if (s.n_allowed == 0 && s.best_id < 0)
    for (auto id : vocab_->eos_ids()) allowed[id] = 1;  // dead end: let the sequence stop
}

std::int32_t ToolCallConstraint::shortest_completion_tokens() const {
  GrammarState state = state_;
  for (std::int32_t n = 0; n < 1 << 16; ++n) {
    if (grammar_->complete(state)) return n;
    Scan s{.check_budget = true, .limit_bytes = -1};  // allows nothing, finds the best
    scan(state, s);
    if (s.best_id < 0 || s.best_bytes >= kGrammarUnreachable ||
        !grammar_->advance(state, vocab_->bytes(s.best_id)))
      return kNoCompletion;
  }
  return kNoCompletion;
}

void ToolCallConstraint::mask(std::span<float> logits) {
  allowed(scratch_);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const std::size_t n = std::min(logits.size(), scratch_.size());
  for (std::size_t i = 0; i < n; ++i)
    if (!scratch_[i]) logits[i] = neg_inf;
  for (std::size_t i = n; i < logits.size(); ++i) logits[i] = neg_inf;
}

void ToolCallConstraint::accept(std::int32_t token) {
  ++n_accepted_;
  if (state_.dead || grammar_->complete(state_)) return;
  if (token < 0 || token >= vocab_->vocab_size() || vocab_->bytes(token).empty() ||
      !grammar_->advance(state_, vocab_->bytes(token))) {
    state_.dead = true;
    return;
  }
  text_ += vocab_->bytes(token);
}

bool ToolCallConstraint::done() const {
  return grammar_->complete(state_);
}

std::unique_ptr<ToolCallConstraint> make_forced_call_constraint(
    const ChatRequest& request, ToolCallFormat format, std::shared_ptr<const ConstraintVocab> vocab,
    std::int32_t max_tokens) {
  const ToolChoice& choice = request.tool_choice;
  if (request.tools.empty() || choice.type == ToolChoiceType::Auto ||
      choice.type == ToolChoiceType::None)
    return nullptr;
  std::vector<ToolSpec> tools;
  if (choice.type == ToolChoiceType::Tool) {
    for (const auto& t : request.tools)
      if (t.name == choice.name) tools.push_back(t);
    if (tools.empty())
      throw Error(ErrorKind::InvalidArgument,
                  "tool_choice names tool '" + choice.name + "', which is not in tools");
  } else {
    tools = request.tools;
  }
  auto grammar = std::make_shared<const ToolCallGrammar>(tools, format);
  return std::make_unique<ToolCallConstraint>(std::move(vocab), std::move(grammar), max_tokens);
}

}  // namespace akv
