// PhaseClock and ScopedMs: laps are consecutive (they add up to the time since the start) and a
// scope adds its own duration.
#include "base/phase_clock.h"

#include <gtest/gtest.h>

#include <thread>

namespace akv {
namespace {

TEST(PhaseClock, LapsAddUpToTheTimeSinceTheStart) {
  const auto start = PhaseClock::Clock::now();
  PhaseClock clock(start);
  double a = 0, b = 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  clock.lap_into(a);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  b = clock.lap_ms();
  const double total = std::chrono::duration<double, std::milli>(clock.last() - start).count();
  EXPECT_GE(a, 3.0);
  EXPECT_GE(b, 2.0);
  EXPECT_NEAR(a + b, total, 1e-9);
  EXPECT_GE(clock.lap_ms(), 0.0);
}

TEST(ScopedMs, AddsItsLifetime) {
  double into = 1.0;
  {
    const ScopedMs t(into);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GE(into, 3.0);
  EXPECT_LT(into, 1000.0);
}

}  // namespace
}  // namespace akv
