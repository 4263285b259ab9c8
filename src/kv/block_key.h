// 128-bit keys for KV blocks that leave device memory (host/disk tiers, agent manifests).
// A key chains like the prefix index's: key = H(secret, parent key, the block's token ids),
// rooted at H(secret, model fingerprint, namespace). The secret is per store (kept next to the
// blocks), so a key reveals nothing about the tokens to someone without it, and the fingerprint
// in the root keeps two models' chains apart. A match is verified by recomputing the chain from
// the request's tokens; no token ids are ever stored. Thread-safe (immutable after construction).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace akv {

struct Hash128 {
  std::uint64_t hi = 0;
  std::uint64_t lo = 0;

  friend bool operator==(const Hash128&, const Hash128&) = default;
  bool is_zero() const { return hi == 0 && lo == 0; }
  std::string hex() const;  // 32 lowercase hex digits
  static std::optional<Hash128> from_hex(std::string_view s);
};

struct Hash128Hasher {
  std::size_t operator()(const Hash128& h) const {
    return static_cast<std::size_t>(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull));
  }
};

// XXH3-128 of some bytes (unkeyed): file checksums, fingerprints.
Hash128 hash128(std::span<const std::byte> bytes, std::uint64_t seed = 0);

inline constexpr std::size_t kKeySecretBytes = 192;
using KeySecret = std::array<std::byte, kKeySecretBytes>;

// A fresh secret from the operating system's random source.
KeySecret random_key_secret();

class BlockKeyer {
 public:
  BlockKeyer(const KeySecret& secret, const Hash128& fingerprint)
      : secret_(secret), fingerprint_(fingerprint) {}

  // The root of namespace `ns` (the tenant) for this model.
  Hash128 root(std::string_view ns) const;
  // The key of a block holding `tokens` whose parent (previous block, or root) has `parent`.
  Hash128 next(const Hash128& parent, std::span<const std::int32_t> tokens) const;
  // A keyed hash of the tokens alone, stored beside the key as a second check.
  Hash128 tokens_hash(std::span<const std::int32_t> tokens) const;
  // The key of the recurrent-state snapshot (hybrid models) taken at the end of the block with
  // `block_key`: its own hash domain, so a state block never shares a key with a KV block.
  Hash128 state_key(const Hash128& block_key) const;
  // A keyed hash of (tenant, agent): a file name that does not show the agent id.
  Hash128 agent_hash(std::string_view tenant, std::string_view agent) const;

  const Hash128& fingerprint() const { return fingerprint_; }

 private:
  KeySecret secret_;
  Hash128 fingerprint_;
};

}  // namespace akv
