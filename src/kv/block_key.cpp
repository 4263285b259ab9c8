#include "kv/block_key.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <sys/random.h>

#include <cstdio>
#include <random>

#include "base/check.h"

namespace akv {

namespace {

Hash128 from_xxh(XXH128_hash_t h) {
  return {h.high64, h.low64};
}

// Keyed XXH3-128 over a list of byte ranges; tags keep the four uses of the secret apart.
class KeyedHash {
 public:
  KeyedHash(const KeySecret& secret, std::uint8_t tag) {
    AKV_CHECK(XXH3_128bits_reset_withSecret(&state_, secret.data(), secret.size()) == XXH_OK,
              "xxh3 reset");
    add(&tag, 1);
  }
  void add(const void* p, std::size_t n) { XXH3_128bits_update(&state_, p, n); }
  void add(const Hash128& h) {
    add(&h.hi, sizeof h.hi);
    add(&h.lo, sizeof h.lo);
  }
  void add(std::string_view s) {
    const std::uint64_t n = s.size();
    add(&n, sizeof n);  // length first, so ("ab","c") and ("a","bc") differ
    add(s.data(), s.size());
  }
  Hash128 digest() { return from_xxh(XXH3_128bits_digest(&state_)); }

 private:
  XXH3_state_t state_;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string Hash128::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

std::optional<Hash128> Hash128::from_hex(std::string_view s) {
  if (s.size() != 32) return std::nullopt;
  Hash128 h;
  for (std::size_t i = 0; i < 32; ++i) {
    const int d = hex_digit(s[i]);
    if (d < 0) return std::nullopt;
    std::uint64_t& part = i < 16 ? h.hi : h.lo;
    part = (part << 4) | static_cast<std::uint64_t>(d);
  }
  return h;
}

Hash128 hash128(std::span<const std::byte> bytes, std::uint64_t seed) {
  return from_xxh(XXH3_128bits_withSeed(bytes.data(), bytes.size(), seed));
}

KeySecret random_key_secret() {
  KeySecret s;
  std::size_t got = 0;
  while (got < s.size()) {
    const ssize_t n = getrandom(s.data() + got, s.size() - got, 0);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got < s.size()) {  // no getrandom: fall back to random_device
    std::random_device rd;
    for (std::size_t i = got; i < s.size(); ++i) s[i] = static_cast<std::byte>(rd());
  }
  return s;
}

Hash128 BlockKeyer::root(std::string_view ns) const {
  KeyedHash h(secret_, 1);
  h.add(fingerprint_);
  h.add(ns);
  return h.digest();
}

Hash128 BlockKeyer::next(const Hash128& parent, std::span<const std::int32_t> tokens) const {
  KeyedHash h(secret_, 2);
  h.add(parent);
  h.add(tokens.data(), tokens.size_bytes());
  return h.digest();
}

Hash128 BlockKeyer::tokens_hash(std::span<const std::int32_t> tokens) const {
  KeyedHash h(secret_, 3);
  h.add(tokens.data(), tokens.size_bytes());
  return h.digest();
}

Hash128 BlockKeyer::state_key(const Hash128& block_key) const {
  KeyedHash h(secret_, 5);
  h.add(block_key);
  return h.digest();
}

Hash128 BlockKeyer::agent_hash(std::string_view tenant, std::string_view agent) const {
  KeyedHash h(secret_, 4);
  h.add(fingerprint_);
  h.add(tenant);
  h.add(agent);
  return h.digest();
}

}  // namespace akv
