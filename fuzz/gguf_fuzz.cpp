// libFuzzer entry for the GGUF parser: any bytes must either parse or throw akv::Error, never
// crash, read out of bounds or allocate without bound (run under ASan + UBSan).
#include <cstddef>
#include <cstdint>
#include <span>

#include "base/error.h"
#include "tensor/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const akv::GgufFileInfo info = akv::parse_gguf(std::span(data, size), "fuzz");
    for (const akv::GgufTensor& t : info.tensors) {
      // Touch the first and last byte of every tensor: ASan flags any span outside the input.
      if (!t.bytes.empty()) {
        volatile std::uint8_t sink = t.bytes.front() ^ t.bytes.back();
        (void)sink;
      }
    }
    // Exercise the typed getters on every key (each either returns or throws Error).
    for (const auto& [key, value] : info.metadata.entries()) {
      try {
        if (value.type == akv::GgufValueType::Array) {
          (void)info.metadata.get_i32_array(key);
        } else {
          (void)info.metadata.get_u32(key);
        }
      } catch (const akv::Error&) {
      }
      try {
        if (value.type == akv::GgufValueType::Array)
          (void)info.metadata.get_f32_array(key);
        else
          (void)info.metadata.get_f32(key);
      } catch (const akv::Error&) {
      }
    }
  } catch (const akv::Error&) {
  }
  return 0;
}
