// TokenConstraint: a per-request restriction on which token may come next (a grammar for a
// forced tool call, ...). The engine's sampler calls it once per decode step; implementations
// live above the engine (chat/) so the engine sees only this interface.
#pragma once

#include <cstdint>
#include <span>

namespace akv {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // Sets logits[id] = -inf for every token that may not come next. `logits` is [vocab_size]
  // of the model (ids past the tokenizer's vocab are always masked). Called on the engine
  // thread before sampling; must not throw or block. Never masks every token: when nothing
  // fits (a grammar dead end) it leaves end-of-sequence open.
  virtual void mask(std::span<float> logits) = 0;

  // Records the token that was sampled (it should have been allowed; a disallowed one puts the
  // constraint in a dead state where only end-of-sequence is allowed).
  virtual void accept(std::int32_t token) = 0;

  // True once the constrained text is complete (only end-of-sequence is allowed now).
  virtual bool done() const = 0;
};

}  // namespace akv
