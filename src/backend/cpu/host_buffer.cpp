#include "backend/cpu/host_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace akv {

HostBuffer::HostBuffer(DType dtype, std::int64_t rows, std::int64_t cols)
    : dtype_(dtype), rows_(rows), cols_(cols) {
  AKV_CHECK(rows >= 0 && cols >= 0, "negative buffer shape");
  std::size_t bytes = static_cast<std::size_t>(rows * cols) * dtype_size(dtype);
  bytes = (bytes + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  data_ = std::aligned_alloc(64, bytes);
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, bytes);
}

HostBuffer::~HostBuffer() { std::free(data_); }

}  // namespace akv
