#include "models/derived_weights.h"

#include <cstring>

#include "base/error.h"

namespace akv {

WeightRef DerivedWeights::rows_of(const std::string& name,
                                  std::initializer_list<std::int64_t> shape,
                                  std::span<const std::int64_t> rows) {
  const std::vector<std::int64_t> want(shape);
  const TensorInfo& t = reader_.get_or_throw(name, want);
  // A quantized matrix's rows are whole blocks: picked like float rows (a GGUF file's q_proj).
  const bool blocks =
      want.size() == 2 && dtype_is_quantized(t.dtype) && backend_.takes_quantized_weight(t.dtype);
  if (!blocks && t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw Error(ErrorKind::Unsupported, t.file + ": tensor '" + name + "': dtype " +
                                            std::string(dtype_name(t.dtype)) +
                                            " is not supported for weights (F32, BF16, F16)");
  std::int64_t cols = 1;
  for (std::size_t i = 1; i < want.size(); ++i) cols *= want[i];
  const std::size_t row_bytes = dtype_row_bytes(t.dtype, cols);
  std::vector<std::uint8_t>& bytes = bytes_.emplace_back(rows.size() * row_bytes);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    AKV_CHECK(rows[i] >= 0 && rows[i] < want[0], "derived weight row out of range");
    std::memcpy(bytes.data() + i * row_bytes,
                t.bytes.data() + static_cast<std::size_t>(rows[i]) * row_bytes, row_bytes);
  }
  TensorInfo& info = infos_.emplace_back(t);
  info.shape = {static_cast<std::int64_t>(rows.size()), cols};
  info.bytes = bytes;
  return backend_.upload_weight(info);
}

WeightRef DerivedWeights::as_matrix(const std::string& name,
                                    std::initializer_list<std::int64_t> shape) {
  return rows_of(name, shape, row_range(0, *shape.begin()));
}

std::vector<std::int64_t> row_range(std::int64_t begin, std::int64_t n) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) rows[i] = begin + i;
  return rows;
}

}  // namespace akv
