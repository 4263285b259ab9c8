// Which files of a hub repository a model needs: config, tokenizer and template files, then
// either the safetensors checkpoint or the GGUF file(s) of one quantization. Works on file
// names only (the repository listing), so it is the same online and from the cache.
#pragma once

#include <string>
#include <vector>

namespace akv {

struct FileSelection {
  std::vector<std::string> files;  // repository paths to fetch, small files first
  std::string index_file;          // "model.safetensors.index.json" when the shards come from it
  std::string quant;               // the GGUF quantization chosen ("" : safetensors)
};

// `names`: every file path of the repository. `quant`: the GGUF quantization asked for ("" :
// safetensors when present, else Q4_K_M, else the only quantization). Throws Error{NotFound}
// when the quantization is absent (naming the ones present) or the repository holds no model
// weights we read.
FileSelection select_model_files(const std::vector<std::string>& names, const std::string& quant);

// The shard file names an index's weight_map names (sorted, unique). Throws Error{BadFormat}.
std::vector<std::string> shards_of_index(const std::string& index_json, const std::string& index_path);

// The quantizations among the repository's GGUF files ("Q4_K_M", "Q8_0", "F16", ...), sorted.
std::vector<std::string> gguf_quants(const std::vector<std::string>& names);

}  // namespace akv
