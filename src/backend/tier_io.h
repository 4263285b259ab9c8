// What the KV tiers need from a backend besides single-block copies: host memory for the host
// tier's slots (Backend::alloc_host) and restores of many blocks from their encoded host form
// (Backend::write_kv_blocks). Here so that kv/ reaches them through backend/ interfaces only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "backend/kv_codec.h"

namespace akv {

// A range of host memory owned by a backend (freed with this object).
class HostMemory {
 public:
  virtual ~HostMemory() = default;
  virtual std::span<std::byte> bytes() const = 0;
};

// Plain (pageable) host memory, 4096-byte aligned, uninitialised: Backend::alloc_host's default.
std::unique_ptr<HostMemory> alloc_plain_host(std::size_t bytes);

// One block to restore: the device block to fill and its encoded bytes in host memory.
struct EncodedKvBlock {
  std::int32_t block = 0;
  SpillCodec codec = SpillCodec::Native;
  std::span<const std::byte> bytes;  // encoded_bytes(codec, block_shape_of(kv.layout))
};

}  // namespace akv
