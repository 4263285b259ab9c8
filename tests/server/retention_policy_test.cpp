// retention_for: side requests Low, cache_control breakpoints High, pinned agents High.
#include "server/retention_policy.h"

#include <gtest/gtest.h>

#include "kv/agent_index.h"

namespace akv {
namespace {

ChatRequest chat(bool tools, std::int64_t max_tokens, bool breakpoint) {
  ChatRequest c;
  c.max_tokens = max_tokens;
  if (tools) c.tools.push_back({.name = "Bash"});
  c.messages.push_back(
      {.role = ChatRole::User, .blocks = {{.text = "hi", .cache_breakpoint = breakpoint}}});
  return c;
}

TEST(RetentionPolicy, SideRequestsAreLowMainConversationsNormalOrHigh) {
  EXPECT_EQ(retention_for(chat(false, 1, false), nullptr, "", ""), Retention::Low);   // quota probe
  EXPECT_EQ(retention_for(chat(false, 512, true), nullptr, "", ""), Retention::Low);  // title call
  EXPECT_EQ(retention_for(chat(false, 0, false), nullptr, "", ""), Retention::Normal);  // no limit
  EXPECT_EQ(retention_for(chat(false, 4096, false), nullptr, "", ""), Retention::Normal);
  EXPECT_EQ(retention_for(chat(true, 1, false), nullptr, "", ""), Retention::Normal);  // has tools
  EXPECT_EQ(retention_for(chat(true, 32000, true), nullptr, "", ""),
            Retention::High);  // breakpoints
}

TEST(RetentionPolicy, APinnedAgentIsHighWhateverItSends) {
  AgentIndex agents;
  agents.record_turn("t", "a", {});
  EXPECT_EQ(retention_for(chat(false, 1, false), &agents, "t", "a"), Retention::Low);
  agents.set_pinned("t", "a", true);
  EXPECT_EQ(retention_for(chat(false, 1, false), &agents, "t", "a"), Retention::High);
  EXPECT_EQ(retention_for(chat(false, 1, false), &agents, "other-tenant", "a"), Retention::Low);
}

}  // namespace
}  // namespace akv
