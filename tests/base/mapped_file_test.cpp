#include "base/mapped_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "base/error.h"

namespace akv {
namespace {

TEST(MappedFile, MapsContents) {
  const std::string path = ::testing::TempDir() + "/mapped_file_test.bin";
  { std::ofstream(path, std::ios::binary) << "hello"; }
  MappedFile f = MappedFile::open_or_throw(path);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.bytes().data()), 5), "hello");
  std::remove(path.c_str());
}

TEST(MappedFile, MissingFileNamesPath) {
  try {
    MappedFile::open_or_throw("/nonexistent/agentkv/file.bin");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/agentkv/file.bin"), std::string::npos);
  }
}

}  // namespace
}  // namespace akv
