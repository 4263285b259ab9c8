// Test helpers for the chat template fidelity tests: paths into ../shared/testdata (with .xz
// files decompressed once into the build tree), JSON loading and the pinned strftime_now date.
#pragma once

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"

namespace akv::test {

// Path of `rel` under the test data; `rel` or `rel.xz` (decompressed with `xz -dkc` into
// AGENTKV_TESTDATA_UNPACKED). Throws Error(NotFound) when neither exists.
inline std::string testdata_file(const std::string& rel) {
  namespace fs = std::filesystem;
  const fs::path plain = fs::path(AGENTKV_TESTDATA) / rel;
  if (fs::exists(plain)) return plain.string();
  const fs::path packed = fs::path(AGENTKV_TESTDATA) / (rel + ".xz");
  if (!fs::exists(packed)) throw Error(ErrorKind::NotFound, "test data missing: " + rel);
  const fs::path out = fs::path(AGENTKV_TESTDATA_UNPACKED) / rel;
  if (!fs::exists(out)) {
    fs::create_directories(out.parent_path());
    const fs::path tmp = out.string() + ".tmp";
    const std::string cmd = "xz -dkc '" + packed.string() + "' > '" + tmp.string() + "'";
    if (std::system(cmd.c_str()) != 0) throw Error(ErrorKind::Io, "cannot run: " + cmd);
    fs::rename(tmp, out);
  }
  return out.string();
}

inline nlohmann::ordered_json load_testdata_json(const std::string& rel) {
  return nlohmann::ordered_json::parse(read_file_or_throw(testdata_file(rel)));
}

// 2024-07-26 12:00 local time: the date transformers' goldens pinned strftime_now to.
inline std::chrono::system_clock::time_point pinned_clock() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return std::chrono::system_clock::from_time_t(std::mktime(&tm));
}

}  // namespace akv::test
