#include "kv/disk_format.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's size, for PayloadChecksum
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>  // XXH3 with AVX2/AVX-512 when the CPU has them (libxxhash picks)
#endif
#include <new>

#include <cstring>
#include <optional>
#include <string>

namespace akv {

namespace {

constexpr char kBlockMagic[8] = {'A', 'K', 'V', 'B', 'L', 'O', 'C', 'K'};
constexpr char kManifestMagic[8] = {'A', 'K', 'V', 'A', 'G', 'E', 'N', 'T'};

class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out) {}
  // resize + memcpy, not insert(end, p, p + n): GCC 12 at -O3 cannot see the bound of the
  // inlined range insert after a reserve and warns (-Wstringop-overflow, a false positive).
  void raw(const void* p, std::size_t n) {
    if (n == 0) return;
    const std::size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, p, n);
  }
  template <typename T>
  void put(T v) {
    raw(&v, sizeof v);
  }  // little-endian hosts only (x86-64, aarch64)
  void put(const Hash128& h) {
    put(h.hi);
    put(h.lo);
  }
  void str(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size()));
    raw(s.data(), s.size());
  }

 private:
  std::vector<std::byte>& out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  bool raw(void* p, std::size_t n) {
    if (n > in_.size() - at_) return ok_ = false;
    std::memcpy(p, in_.data() + at_, n);
    at_ += n;
    return true;
  }
  template <typename T>
  T get() {
    T v{};
    raw(&v, sizeof v);
    return v;
  }
  Hash128 hash() {
    Hash128 h;
    h.hi = get<std::uint64_t>();
    h.lo = get<std::uint64_t>();
    return h;
  }
  std::string str(std::size_t max_len) {
    const auto n = get<std::uint32_t>();
    if (!ok_ || n > max_len) {
      ok_ = false;
      return {};
    }
    std::string s(n, '\0');
    raw(s.data(), n);
    return s;
  }
  bool ok() const { return ok_; }
  std::size_t at() const { return at_; }

 private:
  std::span<const std::byte> in_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace

std::uint64_t payload_checksum(std::span<const std::byte> payload) {
#if defined(__x86_64__)
  return XXH3_64bits_dispatch(payload.data(), payload.size());
#else
  return XXH3_64bits(payload.data(), payload.size());
#endif
}

static_assert(sizeof(XXH3_state_t) <= 640 && alignof(XXH3_state_t) <= 64, "PayloadChecksum's state");

PayloadChecksum::PayloadChecksum() {
  XXH3_64bits_reset(new (state_.data()) XXH3_state_t);
}

void PayloadChecksum::update(std::span<const std::byte> piece) {
  auto* state = std::launder(reinterpret_cast<XXH3_state_t*>(state_.data()));
#if defined(__x86_64__)
  XXH3_64bits_update_dispatch(state, piece.data(), piece.size());
#else
  XXH3_64bits_update(state, piece.data(), piece.size());
#endif
}

std::uint64_t PayloadChecksum::digest() const {
  return XXH3_64bits_digest(std::launder(reinterpret_cast<const XXH3_state_t*>(state_.data())));
}

std::array<std::byte, kBlockHeaderBytes> encode_block_header(const BlockHeader& h) {
  std::vector<std::byte> v;
  v.reserve(kBlockHeaderBytes);
  Writer w(v);
  const bool state = h.kind == BlockKind::State;
  w.raw(kBlockMagic, sizeof kBlockMagic);
  w.put(state ? kStateFormatVersion : kDiskFormatVersion);
  w.put(static_cast<std::uint32_t>(kBlockHeaderBytes));
  w.put(h.fingerprint);
  w.put(h.key);
  w.put(h.parent);
  w.put(h.tokens_hash);
  w.put(state ? state_codec_id(h.state_codec) : static_cast<std::uint32_t>(h.codec));
  w.put(h.n_tokens);
  w.put(h.payload_bytes);
  w.put(h.payload_checksum);
  w.put(XXH3_64bits(v.data(), v.size()));
  std::array<std::byte, kBlockHeaderBytes> out{};
  std::memcpy(out.data(), v.data(), v.size());
  return out;
}

FileCheck parse_block_header(std::span<const std::byte> bytes, const Hash128& fingerprint,
                             BlockHeader& out) {
  if (bytes.size() < kBlockHeaderBytes) return FileCheck::Corrupt;
  Reader r(bytes.subspan(0, kBlockHeaderBytes));
  char magic[8];
  r.raw(magic, sizeof magic);
  if (std::memcmp(magic, kBlockMagic, sizeof magic) != 0) return FileCheck::Corrupt;
  const auto version = r.get<std::uint32_t>();
  if (version != kDiskFormatVersion && version != kStateFormatVersion) return FileCheck::BadVersion;
  if (r.get<std::uint32_t>() != kBlockHeaderBytes) return FileCheck::Corrupt;
  out.kind = version == kStateFormatVersion ? BlockKind::State : BlockKind::Kv;
  out.fingerprint = r.hash();
  out.key = r.hash();
  out.parent = r.hash();
  out.tokens_hash = r.hash();
  const auto codec = r.get<std::uint32_t>();
  out.codec_id = codec;
  out.n_tokens = r.get<std::uint32_t>();
  out.payload_bytes = r.get<std::uint64_t>();
  out.payload_checksum = r.get<std::uint64_t>();
  const std::size_t covered = r.at();
  const auto header_sum = r.get<std::uint64_t>();
  if (!r.ok() || header_sum != XXH3_64bits(bytes.data(), covered)) return FileCheck::Corrupt;
  // The fingerprint covers the codec: a codec id this build no longer knows (a retired layout)
  // is another model's file, kept; an unknown id under our fingerprint is damage.
  if (out.fingerprint != fingerprint) return FileCheck::ForeignModel;
  // A state codec is not in the fingerprint (a store is read under any --kv-state-codec): an
  // unknown one under our fingerprint is a newer writer's, not damage.
  if (out.kind == BlockKind::State) {
    out.codec = SpillCodec::Native;
    const std::optional<StateCodec> state_codec = state_codec_from_id(codec);
    if (!state_codec) return FileCheck::UnknownCodec;
    out.state_codec = *state_codec;
    return FileCheck::Ok;
  }
  const std::optional<SpillCodec> known = spill_codec_from_id(codec);
  if (!known) return FileCheck::Corrupt;
  out.codec = *known;
  return FileCheck::Ok;
}

std::span<const std::byte> verified_block_payload(std::span<const std::byte> file, const BlockExpect& want,
                                                  std::optional<std::uint64_t> payload_sum) {
  BlockHeader h;
  if (parse_block_header(file, want.fingerprint, h) != FileCheck::Ok) return {};
  if (h.kind != want.kind || h.key != want.key || h.parent != want.parent ||
      h.tokens_hash != want.tokens_hash ||
      h.codec != want.codec || h.state_codec != want.state_codec || h.payload_bytes != want.payload_bytes ||
      file.size() != kBlockHeaderBytes + want.payload_bytes)
    return {};
  const std::span<const std::byte> body = file.subspan(kBlockHeaderBytes);
  if ((payload_sum ? *payload_sum : payload_checksum(body)) != h.payload_checksum) return {};
  return body;
}

std::vector<std::byte> encode_manifest(const Hash128& fingerprint, const AgentRecord& rec) {
  std::vector<std::byte> body;
  Writer b(body);
  b.str(rec.tenant);
  b.str(rec.agent);
  b.put(static_cast<std::uint8_t>(rec.pinned ? 1 : 0));
  b.put(rec.n_tokens);
  b.put(rec.n_requests);
  b.put(rec.hits);
  b.put(rec.restores);
  b.put(rec.last_use_ms);
  b.put(static_cast<std::uint32_t>(rec.chain.size()));
  for (const Hash128& k : rec.chain) b.put(k);
  const bool with_states = !rec.states.empty();
  if (with_states) {
    b.put(static_cast<std::uint32_t>(rec.states.size()));
    for (const Hash128& k : rec.states) b.put(k);
  }

  std::vector<std::byte> out;
  out.reserve(kManifestHeaderBytes + body.size());
  Writer w(out);
  w.raw(kManifestMagic, sizeof kManifestMagic);
  w.put(with_states ? kStateFormatVersion : kDiskFormatVersion);
  w.put(std::uint32_t{0});
  w.put(fingerprint);
  w.put(static_cast<std::uint64_t>(body.size()));
  w.put(XXH3_64bits(body.data(), body.size()));
  w.raw(body.data(), body.size());
  return out;
}

FileCheck parse_manifest(std::span<const std::byte> bytes, const Hash128& fingerprint,
                         AgentRecord& out) {
  Reader h(bytes);
  char magic[8];
  h.raw(magic, sizeof magic);
  if (!h.ok() || std::memcmp(magic, kManifestMagic, sizeof magic) != 0) return FileCheck::Corrupt;
  const auto version = h.get<std::uint32_t>();
  if (version != kDiskFormatVersion && version != kStateFormatVersion) return FileCheck::BadVersion;
  h.get<std::uint32_t>();
  const Hash128 fp = h.hash();
  const auto body_bytes = h.get<std::uint64_t>();
  const auto body_sum = h.get<std::uint64_t>();
  if (!h.ok() || body_bytes != bytes.size() - kManifestHeaderBytes) return FileCheck::Corrupt;
  const auto body = bytes.subspan(kManifestHeaderBytes);
  if (XXH3_64bits(body.data(), body.size()) != body_sum) return FileCheck::Corrupt;
  if (fp != fingerprint) return FileCheck::ForeignModel;
  Reader b(body);
  out = AgentRecord{};
  out.tenant = b.str(256);
  out.agent = b.str(256);
  out.pinned = b.get<std::uint8_t>() != 0;
  out.n_tokens = b.get<std::int64_t>();
  out.n_requests = b.get<std::uint64_t>();
  out.hits = b.get<std::uint64_t>();
  out.restores = b.get<std::uint64_t>();
  out.last_use_ms = b.get<std::int64_t>();
  const auto n = b.get<std::uint32_t>();
  const std::size_t chain_bytes = static_cast<std::size_t>(n) * 16;
  if (!b.ok() || chain_bytes > body.size() - b.at() ||
      (version == kDiskFormatVersion && chain_bytes != body.size() - b.at()))
    return FileCheck::Corrupt;
  out.chain.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) out.chain.push_back(b.hash());
  if (version == kStateFormatVersion) {
    const auto n_states = b.get<std::uint32_t>();
    if (!b.ok() || static_cast<std::size_t>(n_states) * 16 != body.size() - b.at())
      return FileCheck::Corrupt;
    for (std::uint32_t i = 0; i < n_states; ++i) out.states.push_back(b.hash());
  }
  return b.ok() ? FileCheck::Ok : FileCheck::Corrupt;
}

}  // namespace akv
