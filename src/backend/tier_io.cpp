// Plain host memory for the host tier, and the host-side defaults of Backend::write_kv_blocks and
// start_read_kv_block_encoded.
#include "backend/tier_io.h"

#include <cstdlib>
#include <vector>

#include "backend/backend.h"
#include "base/check.h"

namespace akv {

namespace {

constexpr std::size_t kHostAlign = 4096;

class PlainHostMemory final : public HostMemory {
 public:
  explicit PlainHostMemory(std::size_t bytes)
      : size_(bytes), data_(static_cast<std::byte*>(std::aligned_alloc(
                          kHostAlign, (bytes + kHostAlign - 1) / kHostAlign * kHostAlign))) {
    AKV_CHECK(data_ != nullptr || bytes == 0, "out of host memory");
  }
  ~PlainHostMemory() override { std::free(data_); }
  PlainHostMemory(const PlainHostMemory&) = delete;
  PlainHostMemory& operator=(const PlainHostMemory&) = delete;
  std::span<std::byte> bytes() const override { return {data_, size_}; }

 private:
  std::size_t size_;
  std::byte* data_;
};

}  // namespace

std::unique_ptr<HostMemory> alloc_plain_host(std::size_t bytes) {
  return std::make_unique<PlainHostMemory>(bytes);
}

void Backend::start_read_kv_block_encoded(const KvStorage& kv, std::int32_t block, SpillCodec codec,
                                          std::span<std::byte> host) {
  const BlockShape shape = block_shape_of(kv.layout);
  std::vector<std::byte> raw(shape.raw_bytes());
  read_kv_block(kv, block, raw);
  encode_block(codec, shape, raw, host);
}

std::uint64_t Backend::write_kv_blocks(KvStorage& kv, std::span<const EncodedKvBlock> blocks) {
  const BlockShape shape = block_shape_of(kv.layout);
  std::vector<std::byte> raw;
  for (const EncodedKvBlock& b : blocks) {
    if (codec_is_raw(b.codec, shape.dtype)) {
      write_kv_block(kv, b.block, b.bytes);
      continue;
    }
    raw.resize(shape.raw_bytes());
    decode_block(b.codec, shape, b.bytes, raw);
    write_kv_block(kv, b.block, raw);
  }
  return 0;
}

}  // namespace akv
