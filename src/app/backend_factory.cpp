#include "app/backend_factory.h"

#include "backend/cpu/reference_backend.h"
#include "base/error.h"

namespace akv {

std::unique_ptr<Backend> make_backend(const std::string& name, int /*n_threads*/) {
  if (name == "reference" || name == "cpu") return std::make_unique<ReferenceBackend>();
  throw Error(ErrorKind::InvalidArgument, "--backend: unknown backend '" + name + "' (reference, cpu)");
}

}  // namespace akv
