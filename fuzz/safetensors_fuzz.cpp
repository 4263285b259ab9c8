// libFuzzer entry for the safetensors header parser: any bytes must either parse or throw
// akv::Error, never crash or read out of bounds (run under ASan + UBSan).
#include <cstddef>
#include <cstdint>
#include <span>

#include "base/error.h"
#include "tensor/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto tensors = akv::parse_safetensors(std::span(data, size), "fuzz");
    for (const akv::TensorInfo& t : tensors) {
      // Touch the first and last byte of every tensor: ASan flags any span outside the input.
      if (!t.bytes.empty()) {
        volatile std::uint8_t sink = t.bytes.front() ^ t.bytes.back();
        (void)sink;
      }
    }
  } catch (const akv::Error&) {
  }
  return 0;
}
