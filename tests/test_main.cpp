// main() of every GoogleTest binary: like gtest_main, except that a run in which every test
// skipped itself (no GPU, an instruction set the CPU lacks) exits with kSkipped, which ctest
// reports as "Skipped" (SKIP_RETURN_CODE). A failure is still a failure, and a run that
// selected no test at all fails.
#include <gtest/gtest.h>

#include <cstdio>

namespace {
constexpr int kSkipped = 77;
}

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (rc != 0 || testing::GTEST_FLAG(list_tests)) return rc;
  const testing::UnitTest& run = *testing::UnitTest::GetInstance();
  if (run.test_to_run_count() == 0) {
    std::fprintf(stderr, "no test selected\n");
    return 1;
  }
  if (run.successful_test_count() == 0 && run.skipped_test_count() > 0) return kSkipped;
  return 0;
}
