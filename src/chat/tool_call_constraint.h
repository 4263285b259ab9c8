// Forced tool calls (tool_choice any/tool, OpenAI required/named): a TokenConstraint that lets
// the sampler pick only tokens keeping the output inside ToolCallGrammar, and end-of-sequence
// only once the call is complete. With a token budget (the request's max_tokens) it also keeps
// the call finishable in time. ConstraintVocab (per model, built once) holds every token's bytes
// in a trie, so each step walks only the token prefixes the grammar can still accept.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/token_constraint.h"
#include "chat/chat_request.h"
#include "chat/json_schema_grammar.h"

namespace akv {

class Tokenizer;

// Prefix trie over a set of byte strings, in preorder: a node's first child is the next node.
class VocabTrie {
 public:
  struct Node {
    std::uint32_t next_sibling = 0;  // 0: none (node 0 is never a sibling)
    std::uint32_t token_begin = 0;   // [token_begin, token_end) in token_ids()
    std::uint32_t token_end = 0;
    std::uint8_t byte = 0;
    bool has_child = false;
  };
  VocabTrie() = default;
  // `ids` with their non-empty byte strings `bytes[id]`.
  VocabTrie(const std::vector<std::string>& bytes, std::vector<std::int32_t> ids);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<std::int32_t>& token_ids() const { return token_ids_; }
  std::size_t max_depth() const { return max_depth_; }

 private:
  std::vector<Node> nodes_;
  std::vector<std::int32_t> token_ids_;  // sorted by bytes
  std::size_t max_depth_ = 0;
};

// The model's tokens as raw bytes, for constraints. Special tokens are left out (never allowed)
// except end-of-sequence and the tool-call markers (<tool_call>, [TOOL_CALLS], ...), which some
// tokenizers mark special. Expensive (~0.1-0.5 s for 150K tokens); build once per model and
// share. Immutable afterwards: safe to use from any thread.
class ConstraintVocab {
 public:
  explicit ConstraintVocab(const Tokenizer& tokenizer);

  std::int32_t vocab_size() const { return static_cast<std::int32_t>(bytes_.size()); }
  const std::string& bytes(std::int32_t id) const { return bytes_[id]; }
  const std::vector<std::int32_t>& eos_ids() const { return eos_ids_; }
  const VocabTrie& all() const { return all_; }
  // Tokens holding '"', '\\', a control byte or broken UTF-8: inside a string only these
  // need simulating.
  const VocabTrie& string_breaking() const { return string_breaking_; }
  // [vocab_size] the number of characters of a token made of whole UTF-8 characters that may
  // stand in a JSON string (capped at 65535); 0 for every other token.
  const std::vector<std::uint16_t>& string_chars() const { return string_chars_; }
  // The same for the raw text of a Qwen XML string parameter: string_chars() without the
  // tokens holding '<' (which may begin </parameter>); xml_text_breaking() holds the rest.
  const std::vector<std::uint16_t>& xml_text_chars() const { return xml_text_chars_; }
  const VocabTrie& xml_text_breaking() const { return xml_text_breaking_; }
  // Every printable ASCII byte and '\n' is a token of its own (byte-level BPE, SentencePiece
  // byte fallback): then any shortest completion of B bytes fits in B tokens.
  bool has_byte_tokens() const { return has_byte_tokens_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<std::int32_t> eos_ids_;
  VocabTrie all_;
  VocabTrie string_breaking_;
  std::vector<std::uint16_t> string_chars_;
  VocabTrie xml_text_breaking_;
  std::vector<std::uint16_t> xml_text_chars_;
  bool has_byte_tokens_ = false;
};

// The budget rule: with R tokens left, a token is allowed only if the shortest completion after
// it (in bytes, ToolCallGrammar::shortest_completion_bytes) is at most R - 1. Where the vocab has
// a token for every byte (ConstraintVocab::has_byte_tokens), a state with a completion of B <= R
// bytes always has such a token (the next byte of that completion), so a call that starts within
// budget finishes within it. When no token passes (the budget started too small), the single
// most progressing token is allowed (fewest bytes left after it, then lowest id): the path
// shortest_completion_tokens() measures.
class ToolCallConstraint final : public TokenConstraint {
 public:
  static constexpr std::int32_t kNoCompletion = 0x7FFFFFFF;

  // Shares the model's vocab and this request's grammar. `max_tokens`: the tokens the request
  // may generate (0: no budget). One per request; not thread-safe (the engine thread calls
  // mask/accept/done).
  ToolCallConstraint(std::shared_ptr<const ConstraintVocab> vocab,
                     std::shared_ptr<const ToolCallGrammar> grammar, std::int32_t max_tokens);

  // allowed[id] = 1 for each token that may come next ([vocab_size]). Cost: the trie walk over
  // viable prefixes (inside a free string: a pass over string_chars() and the string-breaking
  // tokens), plus one shortest_completion_bytes per viable token end when budgeted.
  void allowed(std::vector<std::uint8_t>& allowed) const;

  void mask(std::span<float> logits) override;
  void accept(std::int32_t token) override;
  bool done() const override;

  // Tokens the call takes from the current state when each step takes the most progressing
  // token; a budget at least this large always ends in a complete call. kNoCompletion when the
  // grammar cannot complete. Cost: one vocab walk per token (a few ms); call once, up front.
  std::int32_t shortest_completion_tokens() const;
  std::uint32_t shortest_completion_bytes() const {
    return grammar_->shortest_completion_bytes(state_);
  }

  // The bytes accepted so far (for tests and logs).
  const std::string& text() const { return text_; }

 private:
  // One pass over the tokens viable from a state: marks those within `limit` (when checking
  // the budget; all of them otherwise) and remembers the most progressing one.
  struct Scan {
    std::vector<std::uint8_t>* allowed = nullptr;
    bool check_budget = false;
    std::int64_t limit_bytes = 0;  // the most completion bytes an allowed token may leave
    std::int32_t n_allowed = 0;
    std::uint32_t best_bytes = kGrammarUnreachable + 1;
    std::int32_t best_id = -1;
    void consider(std::int32_t id, std::uint32_t bytes_after);
  };
  void scan(const GrammarState& state, Scan& scan) const;
  void walk(const VocabTrie& trie, const GrammarState& state, Scan& scan) const;
  void walk_children(const VocabTrie& trie, std::uint32_t first, std::uint32_t depth,
                     Scan& scan) const;

  std::shared_ptr<const ConstraintVocab> vocab_;
  std::shared_ptr<const ToolCallGrammar> grammar_;
  GrammarState state_;
  std::int32_t max_tokens_ = 0;
  std::int32_t n_accepted_ = 0;
  std::string text_;
  std::vector<std::uint8_t> scratch_;             // allowed() output for mask()
  mutable std::vector<GrammarState> walk_stack_;  // [max token length + 1]
};

// The constraint a request needs, or nullptr when it forces no call (tool_choice auto or none,
// or no tools). tool_choice any: one call of any tool; tool: that one. `max_tokens`: the
// request's generation budget after clamping (0: none). Throws Error(InvalidArgument) naming the
// tool when tool_choice names a tool not in request.tools. The caller should reject a budget
// below shortest_completion_tokens().
std::unique_ptr<ToolCallConstraint> make_forced_call_constraint(
    const ChatRequest& request, ToolCallFormat format, std::shared_ptr<const ConstraintVocab> vocab,
    std::int32_t max_tokens);

}  // namespace akv
