#include "models/weight_loader.h"

#include <vector>

#include "base/error.h"

namespace akv {

namespace {

void check_float_weight(const TensorInfo& t, const std::string& name) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw Error(ErrorKind::Unsupported, t.file + ": tensor '" + name + "': dtype " +
                                            std::string(dtype_name(t.dtype)) +
                                            " is not supported for weights (F32, BF16, F16)");
}

// get()'s check: a float type, or a quantized matrix of a type the backend's matmul takes.
void check_weight(const TensorInfo& t, const std::string& name, const Backend& backend) {
  if (t.shape.size() == 2 && dtype_is_quantized(t.dtype) && backend.takes_quantized_weight(t.dtype)) return;
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw Error(ErrorKind::Unsupported, t.file + ": tensor '" + name + "': dtype " +
                                            std::string(dtype_name(t.dtype)) +
                                            " is not supported for weights (F32, BF16, F16)");
}

}  // namespace

WeightRef WeightLoader::get(const std::string& name, std::initializer_list<std::int64_t> shape) {
  const std::vector<std::int64_t> want(shape);
  const TensorInfo& t = reader_.get_or_throw(name, want);
  check_weight(t, name, backend_);
  return backend_.upload_weight(t);
}

WeightRef WeightLoader::get_optional(const std::string& name, std::initializer_list<std::int64_t> shape) {
  return has(name) ? get(name, shape) : WeightRef{};
}

WeightRef WeightLoader::get_f32(const std::string& name, std::initializer_list<std::int64_t> shape) {
  const TensorInfo& t = tensor(name, shape);
  check_float_weight(t, name);
  if (t.dtype == DType::F32) return backend_.upload_weight(t);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(t.numel()) * sizeof(float));
  convert_to_f32(t.dtype, t.bytes.data(), reinterpret_cast<float*>(bytes.data()), static_cast<std::size_t>(t.numel()));
  const std::int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
  return upload_repacked(name, DType::F32, rows, t.numel() / rows, std::move(bytes));
}

const TensorInfo& WeightLoader::tensor(const std::string& name, std::initializer_list<std::int64_t> shape) const {
  const std::vector<std::int64_t> want(shape);
  return reader_.get_or_throw(name, want);
}

WeightRef WeightLoader::get_bytes(const std::string& name, std::initializer_list<std::int64_t> shape,
                                  std::size_t row_dims) {
  const TensorInfo& t = tensor(name, shape);
  if (t.dtype != DType::U8)
    throw Error(ErrorKind::BadFormat, t.file + ": tensor '" + name + "': dtype " + std::string(dtype_name(t.dtype)) +
                                          ", expected U8");
  AKV_CHECK(row_dims >= 1 && row_dims < t.shape.size(), "get_bytes: row_dims");
  TensorInfo flat = t;
  std::int64_t rows = 1, cols = 1;
  for (std::size_t i = 0; i < t.shape.size(); ++i) (i < row_dims ? rows : cols) *= t.shape[i];
  flat.shape = {rows, cols};
  return backend_.upload_weight(flat);
}

WeightRef WeightLoader::upload_repacked(const std::string& name, DType dtype, std::int64_t rows, std::int64_t cols,
                                        std::vector<std::uint8_t> bytes) {
  AKV_CHECK(bytes.size() == static_cast<std::size_t>(rows) * dtype_row_bytes(dtype, cols), "upload_repacked: size");
  repacked_.push_back(std::make_unique<std::vector<std::uint8_t>>(std::move(bytes)));
  TensorInfo t;
  t.name = name;
  t.dtype = dtype;
  t.shape = {rows, cols};
  t.bytes = *repacked_.back();
  t.file = label_;
  const WeightRef w = backend_.upload_weight(t);
  // A backend that copied the bytes (a GPU) has no use for them: free them now (a stacked
  // Qwen3-MoE layer is over a GiB); one that points into them (the CPU) keeps them.
  if (w.data != repacked_.back()->data()) repacked_.pop_back();
  return w;
}

WeightRef WeightLoader::upload_view(const std::string& name, DType dtype, std::int64_t rows, std::int64_t cols,
                                    std::span<const std::uint8_t> bytes) {
  AKV_CHECK(bytes.size() == static_cast<std::size_t>(rows) * dtype_row_bytes(dtype, cols), "upload_view: size");
  TensorInfo t;
  t.name = name;
  t.dtype = dtype;
  t.shape = {rows, cols};
  t.bytes = bytes;
  t.file = label_;
  return backend_.upload_weight(t);
}

}  // namespace akv
