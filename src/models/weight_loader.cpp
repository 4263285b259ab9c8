#include "models/weight_loader.h"

#include <vector>

#include "base/error.h"

namespace akv {

WeightRef WeightLoader::get(const std::string& name, std::initializer_list<std::int64_t> shape) {
  const std::vector<std::int64_t> want(shape);
  const TensorInfo& t = reader_.get_or_throw(name, want);
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw Error(ErrorKind::Unsupported, t.file + ": tensor '" + name + "': dtype " +
                                            std::string(dtype_name(t.dtype)) +
                                            " is not supported for weights (F32, BF16, F16)");
  return backend_.upload_weight(t);
}

WeightRef WeightLoader::get_optional(const std::string& name, std::initializer_list<std::int64_t> shape) {
  return has(name) ? get(name, shape) : WeightRef{};
}

}  // namespace akv
