// Timing of a routine's phases with one steady_clock read per phase edge: cheap enough to stay
// on in the engine step and the request path (~25 ns a read, no allocation, no logging).
// Not thread-safe: one owner per clock.
#pragma once

#include <chrono>

namespace akv {

class PhaseClock {
 public:
  using Clock = std::chrono::steady_clock;
  PhaseClock() : last_(Clock::now()) {}
  explicit PhaseClock(Clock::time_point start) : last_(start) {}

  // Milliseconds since the previous lap (or the start); the next lap counts from now.
  double lap_ms() {
    const Clock::time_point now = Clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    return ms;
  }
  // Adds lap_ms() to `into`.
  void lap_into(double& into) { into += lap_ms(); }
  Clock::time_point last() const { return last_; }

 private:
  Clock::time_point last_;
};

// Adds the milliseconds of its lifetime to `into` (a scope inside a phase, e.g. the KV calls
// within the scheduler).
class ScopedMs {
 public:
  explicit ScopedMs(double& into) : into_(into), start_(PhaseClock::Clock::now()) {}
  ~ScopedMs() {
    into_ += std::chrono::duration<double, std::milli>(PhaseClock::Clock::now() - start_).count();
  }
  ScopedMs(const ScopedMs&) = delete;
  ScopedMs& operator=(const ScopedMs&) = delete;

 private:
  double& into_;
  PhaseClock::Clock::time_point start_;
};

}  // namespace akv
