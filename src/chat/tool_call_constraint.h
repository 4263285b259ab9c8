// Forced tool calls (tool_choice any/tool, OpenAI required/named): a TokenConstraint that lets
// the sampler pick only tokens keeping the output inside ToolCallGrammar, and end-of-sequence
// only once the call is complete. ConstraintVocab (per model, built once) holds every token's
// bytes in a trie, so each step walks only the token prefixes the grammar can still accept.
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
  // [vocab_size] 1 where the token is whole UTF-8 characters that may stand in a JSON string.
  const std::vector<std::uint8_t>& string_safe() const { return string_safe_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<std::int32_t> eos_ids_;
  VocabTrie all_;
  VocabTrie string_breaking_;
  std::vector<std::uint8_t> string_safe_;
};

class ToolCallConstraint final : public TokenConstraint {
 public:
  // Shares the model's vocab and this request's grammar. One per request; not thread-safe
  // (the engine thread calls mask/accept/done).
  ToolCallConstraint(std::shared_ptr<const ConstraintVocab> vocab,
                     std::shared_ptr<const ToolCallGrammar> grammar);

  // allowed[id] = 1 for each token that may come next ([vocab_size]). Cost: the trie walk over
  // viable prefixes (inside a free string: the string-breaking tokens only).
  void allowed(std::vector<std::uint8_t>& allowed) const;

  void mask(std::span<float> logits) override;
  void accept(std::int32_t token) override;
  bool done() const override;

  // The bytes accepted so far (for tests and logs).
  const std::string& text() const { return text_; }

 private:
  void walk(const VocabTrie& trie, std::vector<std::uint8_t>& allowed) const;
  void walk_children(const VocabTrie& trie, std::uint32_t first, std::uint32_t depth,
                     std::vector<std::uint8_t>& allowed) const;

  std::shared_ptr<const ConstraintVocab> vocab_;
  std::shared_ptr<const ToolCallGrammar> grammar_;
  GrammarState state_;
  std::string text_;
  std::vector<std::uint8_t> scratch_;             // allowed() output for mask()
  mutable std::vector<GrammarState> walk_stack_;  // [max token length + 1]
};

// The constraint a request needs, or nullptr when it forces no call (tool_choice auto or none,
// or no tools). tool_choice any: one call of any tool; tool: that one. Throws
// Error(InvalidArgument) naming the tool when tool_choice names a tool not in request.tools.
std::unique_ptr<ToolCallConstraint> make_forced_call_constraint(
    const ChatRequest& request, ToolCallFormat format,
    std::shared_ptr<const ConstraintVocab> vocab);

}  // namespace akv
