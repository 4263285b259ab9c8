// `agentkv pull ORG/REPO[:QUANT][@REVISION]`: fetch a model into the huggingface_hub cache and
// print its directory (usable as --model DIR).
#pragma once

#include <string>

namespace akv {

int run_pull(const std::string& model);

}  // namespace akv
