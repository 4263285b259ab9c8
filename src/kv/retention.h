// How hard the KV tiers try to keep a block: set by the requests that use it (architecture.md
// §5). A block's retention is the highest of the requests that computed or matched it, so a
// system prompt shared by a main conversation keeps the main conversation's retention when a
// side request reuses it.
//   Low:    side requests (short, tool-less one-offs such as a client's title or quota calls)
//   Normal: ordinary turns
//   High:   pinned agents and prompts with cache_control breakpoints
// Device memory evicts Low before Normal before High (each class least recently used first);
// the host tier weighs a block's cost to get back by its retention (host_store.h).
#pragma once

#include <cstdint>

namespace akv {

enum class Retention : std::uint8_t { Low = 0, Normal = 1, High = 2 };
inline constexpr int kRetentionLevels = 3;

inline constexpr int retention_index(Retention r) {
  return static_cast<int>(r);
}

// The weight the host tier multiplies a block's reload cost by.
inline constexpr double retention_weight(Retention r) {
  switch (r) {
    case Retention::Low:
      return 0.25;
    case Retention::Normal:
      return 1.0;
    case Retention::High:
      return 8.0;
  }
  return 1.0;
}

inline constexpr Retention max_retention(Retention a, Retention b) {
  return retention_index(a) >= retention_index(b) ? a : b;
}

}  // namespace akv
