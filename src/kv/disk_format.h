// The on-disk containers of the disk tier (little-endian, versioned). Pure functions over
// bytes; the files themselves are disk_store.h's business.
//
// Block file  blocks/<key hex>.kvb: a 128-byte header, then the encoded payload.
//   magic "AKVBLOCK" | u32 version | u32 header bytes (128) | fingerprint | key | parent key |
//   keyed tokens hash (four Hash128) | u32 codec | u32 tokens per block | u64 payload bytes |
//   u64 XXH3-64 of the payload | u64 XXH3-64 of the header bytes before it | zero padding.
// State block (hybrid models' recurrent-state snapshot at the end of a KV block), the same file
//   and header with version 2 and the codec field holding its state codec's id (state_codec.h:
//   "STAT" exact f32, "STBF" bf16): key = the keyer's state_key, parent = the key of the KV
//   block it ends on, tokens hash = the keyed hash of the whole prefix; the payload is the state
//   in that codec. Version 1 readers leave such files alone; a state codec id this build does
//   not know (a newer writer's) is FileCheck::UnknownCodec: never used, never deleted.
// Manifest    agents/<keyed hash of tenant and agent>.agent: a 48-byte header, then a body.
//   magic "AKVAGENT" | u32 version | u32 0 | fingerprint | u64 body bytes | u64 XXH3-64 of body;
//   body: tenant, agent (u32 length + bytes each), u8 pinned, i64 tokens, u64 requests, hits,
//   restores, i64 last use (unix ms), u32 blocks, then the chain's keys; version 2 (written when
//   the agent has state blocks) adds u32 states, then their keys.
// No token ids or text are stored: blocks are named by keyed hashes (block_key.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kv/agent_index.h"
#include "kv/block_codec.h"
#include "kv/block_key.h"
#include "kv/state_codec.h"

namespace akv {

inline constexpr std::uint32_t kDiskFormatVersion = 1;
inline constexpr std::uint32_t kStateFormatVersion = 2;  // state blocks; manifests naming them
inline constexpr std::size_t kBlockHeaderBytes = 128;
inline constexpr std::size_t kManifestHeaderBytes = 48;

enum class BlockKind { Kv, State };

struct BlockHeader {
  BlockKind kind = BlockKind::Kv;
  Hash128 fingerprint;
  Hash128 key;
  Hash128 parent;
  Hash128 tokens_hash;
  SpillCodec codec = SpillCodec::Native;       // Native for state blocks
  StateCodec state_codec = StateCodec::Exact;  // state blocks
  std::uint32_t codec_id = 0;  // the codec field as stored (parse_block_header; for messages)
  std::uint32_t n_tokens = 0;
  std::uint64_t payload_bytes = 0;
  std::uint64_t payload_checksum = 0;
};

enum class FileCheck { Ok, Corrupt, BadVersion, ForeignModel, UnknownCodec };

// XXH3-64 of a payload (the vector unit picked at run time: AVX2 or AVX-512 where the CPU has
// them; the same value on every machine).
std::uint64_t payload_checksum(std::span<const std::byte> payload);

// payload_checksum of bytes given piece by piece, in order: equal to payload_checksum of the
// pieces joined. A reader checksums each piece it read while the piece is still in the cache.
class PayloadChecksum {
 public:
  PayloadChecksum();
  void update(std::span<const std::byte> piece);
  std::uint64_t digest() const;

 private:
  alignas(64) std::array<std::byte, 640> state_;  // an XXH3_state_t
};

std::array<std::byte, kBlockHeaderBytes> encode_block_header(const BlockHeader& h);
// Checks magic, version and the header checksum; ForeignModel when the fingerprint differs. A
// state block comes back with kind State, codec Native and its state codec (UnknownCodec: an id
// this build does not know; the rest of `out` is filled).
FileCheck parse_block_header(std::span<const std::byte> bytes, const Hash128& fingerprint,
                             BlockHeader& out);

// What a block file (or the remote tier's value, the same bytes) must be to be loaded.
struct BlockExpect {
  Hash128 fingerprint, key, parent, tokens_hash;
  SpillCodec codec = SpillCodec::Native;  // Native for state blocks
  StateCodec state_codec = StateCodec::Exact;  // state blocks
  std::uint64_t payload_bytes = 0;
  BlockKind kind = BlockKind::Kv;
};
// The payload of a whole block file when its header, size, key, parent, tokens hash, codec (state
// codec for a state block) and payload checksum (and the kind) all agree with `want`; empty otherwise. ForeignModel/BadVersion are not
// told apart here: the caller only loads. `payload_sum`: the payload's checksum when the caller
// computed it as it read the file (else it is computed here).
std::span<const std::byte> verified_block_payload(std::span<const std::byte> file, const BlockExpect& want,
                                                  std::optional<std::uint64_t> payload_sum = std::nullopt);

std::vector<std::byte> encode_manifest(const Hash128& fingerprint, const AgentRecord& record);
// Checks everything (header, body checksum, lengths); ForeignModel when the fingerprint differs.
FileCheck parse_manifest(std::span<const std::byte> bytes, const Hash128& fingerprint,
                         AgentRecord& out);

}  // namespace akv
