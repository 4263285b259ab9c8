// A Hugging Face model named on the command line: ORG/REPO[:QUANT][@REVISION].
// Parsing only; nothing here touches the network or the disk.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace akv {

struct HubRef {
  std::string repo_id;   // "ORG/REPO"
  std::string quant;     // "Q4_K_M" (one GGUF quantization), "" : safetensors or the default GGUF
  std::string revision;  // branch, tag or commit; "main" when not given
};

// Throws Error{InvalidArgument} naming `text` when it is not ORG/REPO[:QUANT][@REVISION].
HubRef parse_hub_ref(std::string_view text);

// True when `text` could only mean a hub model: not an existing path, and of the form above.
bool looks_like_hub_ref(std::string_view text);

}  // namespace akv
