// Test data access with on-demand .xz decompression; tokenizers are loaded once per binary.
#include "testdata.h"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include <unistd.h>

#include "base/mapped_file.h"

namespace akv::test {

namespace fs = std::filesystem;

namespace {

// `plain` itself, else its .xz decompressed to `unpacked` (once), else `plain` for the loader
// to report.
std::string plain_or_unpacked(const fs::path& plain, const fs::path& unpacked) {
  if (fs::exists(plain)) return plain.string();
  fs::path compressed = plain;
  compressed += ".xz";
  if (!fs::exists(compressed)) return plain.string();
  if (!fs::exists(unpacked)) {
    fs::create_directories(unpacked.parent_path());
    fs::path tmp = unpacked;
    tmp += ".tmp" + std::to_string(::getpid());
    std::string cmd = "xz -dkc '" + compressed.string() + "' > '" + tmp.string() + "'";
    if (std::system(cmd.c_str()) != 0) return plain.string();
    fs::rename(tmp, unpacked);
  }
  return unpacked.string();
}

}  // namespace

std::string testdata_path(const std::string& relative) {
  return plain_or_unpacked(fs::path(AGENTKV_TESTDATA) / relative, fs::path(AGENTKV_TESTDATA_UNPACKED) / relative);
}

std::string gguf_fixture_path(const std::string& name) {
  return plain_or_unpacked(fs::path(AGENTKV_TOKENIZER_GGUF_FIXTURES) / name,
                           fs::path(AGENTKV_TESTDATA_UNPACKED) / "tokenizer-gguf" / name);
}

const Tokenizer& shared_tokenizer(const std::string& name, const std::string& json_name) {
  static std::mutex mu;
  static std::map<std::string, Tokenizer> cache;
  std::lock_guard<std::mutex> lock(mu);
  std::string key = name + "/" + json_name;
  auto it = cache.find(key);
  if (it == cache.end()) {
    std::string dir = "tokenizers/" + name + "/";
    std::string config = testdata_path(dir + "tokenizer_config.json");
    if (!fs::exists(config)) config.clear();
    it = cache.emplace(key, Tokenizer::load_files_or_throw(testdata_path(dir + json_name), config)).first;
  }
  return it->second;
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file_or_throw(path)); }

}  // namespace akv::test
