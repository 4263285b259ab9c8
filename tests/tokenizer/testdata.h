// Test helpers: paths into ../shared/testdata, decompressing .xz files on first use into the
// build folder's AGENTKV_TESTDATA_UNPACKED (never into the source tree).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "tokenizer/tokenizer.h"

namespace akv::test {

// Absolute path of `relative` under the test data; for a name ending in .xz that exists
// compressed, the path of its decompressed copy (made with `xz -dkc` if missing).
std::string testdata_path(const std::string& relative);

// The decompressed copy of tests/tokenizer/gguf/<name>.xz (this repository's GGUF fixtures),
// made in the build folder on first use.
std::string gguf_fixture_path(const std::string& name);

// The tokenizer in tokenizers/<name>/ (json_name: tokenizer.json or tokenizer.legacy.json).
const Tokenizer& shared_tokenizer(const std::string& name, const std::string& json_name = "tokenizer.json");

nlohmann::json read_json(const std::string& path);

}  // namespace akv::test
