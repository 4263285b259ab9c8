#include "server/stop_matcher.h"

#include <gtest/gtest.h>

namespace akv {
namespace {

// Feeds `text` split into pieces of `step` bytes; returns (emitted text, matched stop).
std::pair<std::string, std::string> run(std::vector<std::string> stops, const std::string& text, std::size_t step) {
  StopMatcher m(std::move(stops));
  std::string out;
  for (std::size_t i = 0; i < text.size(); i += step) {
    StopMatcher::Result r = m.feed(text.substr(i, step));
    out += r.text;
    if (r.matched) return {out, *r.matched};
  }
  return {out + m.flush(), ""};
}

TEST(StopMatcher, MatchIsNeverEmittedAtAnySplit) {
  for (std::size_t step = 1; step <= 12; ++step) {
    SCOPED_TRACE(step);
    auto [out, matched] = run({"STOP", "\n\nHuman:"}, "hello world STOP and more", step);
    EXPECT_EQ(out, "hello world ");
    EXPECT_EQ(matched, "STOP");
    std::tie(out, matched) = run({"STOP", "\n\nHuman:"}, "a\n\nHum and \n\nHuman: x", step);
    EXPECT_EQ(out, "a\n\nHum and ");
    EXPECT_EQ(matched, "\n\nHuman:");
  }
}

TEST(StopMatcher, PartialPrefixIsReleasedWhenItDiverges) {
  for (std::size_t step = 1; step <= 5; ++step) {
    auto [out, matched] = run({"STOP"}, "STO STOPPER", step);
    EXPECT_EQ(out, "STO ");
    EXPECT_EQ(matched, "STOP");
    std::tie(out, matched) = run({"STOP"}, "ends with ST", step);
    EXPECT_EQ(out, "ends with ST");
    EXPECT_EQ(matched, "");
  }
}

TEST(StopMatcher, EarliestMatchWins) {
  auto [out, matched] = run({"world", "lo w"}, "hello world", 100);
  EXPECT_EQ(out, "hel");
  EXPECT_EQ(matched, "lo w");
}

TEST(StopMatcher, NoStopsPassesEverything) {
  auto [out, matched] = run({}, "anything at all", 3);
  EXPECT_EQ(out, "anything at all");
  EXPECT_EQ(matched, "");
}

}  // namespace
}  // namespace akv
