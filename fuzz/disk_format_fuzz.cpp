// libFuzzer target for the disk tier's file readers (kv/disk_format.h): block file headers and
// agent manifests. Any bytes must parse or be refused (Corrupt, BadVersion, ForeignModel),
// never crash or read out of bounds; what parses must re-encode to the same record.
// The first input byte picks the reader; modes 1 and 3 fill in valid checksums (and the
// expected fingerprint) so that mutations reach the fields behind them.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "base/check.h"
#include "kv/disk_format.h"

namespace {

const akv::Hash128 kFingerprint{0x0123456789abcdefull, 0xfedcba9876543210ull};

std::span<const std::byte> bytes_of(const std::vector<std::uint8_t>& v) {
  return std::as_bytes(std::span(v.data(), v.size()));
}

// Block header: what parses re-encodes to the same 112 bytes (the rest is padding).
void block_header(std::vector<std::uint8_t> in, bool fix_checksum) {
  if (fix_checksum && in.size() >= akv::kBlockHeaderBytes) {
    std::memcpy(in.data() + 16, &kFingerprint.hi, 8);  // the fingerprint follows magic, version, size
    std::memcpy(in.data() + 24, &kFingerprint.lo, 8);
    const std::uint64_t sum = XXH3_64bits(in.data(), 104);
    std::memcpy(in.data() + 104, &sum, 8);
  }
  akv::BlockHeader h;
  if (akv::parse_block_header(bytes_of(in), kFingerprint, h) != akv::FileCheck::Ok) return;
  const auto again = akv::encode_block_header(h);
  AKV_CHECK(std::memcmp(again.data(), in.data(), 112) == 0, "a parsed block header re-encodes differently");
}

// Manifest: what parses re-encodes and parses back to the same record.
void manifest(std::vector<std::uint8_t> in, bool build_header) {
  if (build_header) {  // the input is the body: put a valid header in front
    std::vector<std::uint8_t> file(akv::kManifestHeaderBytes);
    std::memcpy(file.data(), "AKVAGENT", 8);
    const std::uint32_t version = akv::kDiskFormatVersion;
    std::memcpy(file.data() + 8, &version, 4);
    std::memcpy(file.data() + 16, &kFingerprint.hi, 8);
    std::memcpy(file.data() + 24, &kFingerprint.lo, 8);
    const std::uint64_t n = in.size(), sum = XXH3_64bits(in.data(), in.size());
    std::memcpy(file.data() + 32, &n, 8);
    std::memcpy(file.data() + 40, &sum, 8);
    file.insert(file.end(), in.begin(), in.end());
    in = std::move(file);
  }
  akv::AgentRecord rec;
  if (akv::parse_manifest(bytes_of(in), kFingerprint, rec) != akv::FileCheck::Ok) return;
  const std::vector<std::byte> again = akv::encode_manifest(kFingerprint, rec);
  akv::AgentRecord back;
  AKV_CHECK(akv::parse_manifest(again, kFingerprint, back) == akv::FileCheck::Ok, "a re-encoded manifest is refused");
  AKV_CHECK(back.tenant == rec.tenant && back.agent == rec.agent && back.chain == rec.chain &&
                back.n_tokens == rec.n_tokens && back.n_requests == rec.n_requests && back.hits == rec.hits &&
                back.restores == rec.restores && back.last_use_ms == rec.last_use_ms && back.pinned == rec.pinned,
            "a manifest does not survive re-encoding");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::vector<std::uint8_t> rest(data + 1, data + size);
  switch (data[0] % 4) {
    case 0: block_header(std::move(rest), false); break;
    case 1: block_header(std::move(rest), true); break;
    case 2: manifest(std::move(rest), false); break;
    case 3: manifest(std::move(rest), true); break;
  }
  return 0;
}
