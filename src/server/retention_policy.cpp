#include "server/retention_policy.h"

#include <algorithm>

#include "kv/agent_index.h"

namespace akv {

namespace {

bool has_breakpoint(const std::vector<ContentBlock>& blocks) {
  return std::any_of(blocks.begin(), blocks.end(),
                     [](const ContentBlock& b) { return b.cache_breakpoint; });
}

bool has_breakpoint(const ChatRequest& chat) {
  return has_breakpoint(chat.system) ||
         std::any_of(chat.messages.begin(), chat.messages.end(),
                     [](const ChatMessage& m) { return has_breakpoint(m.blocks); });
}

}  // namespace

Retention retention_for(const ChatRequest& chat, const AgentIndex* agents, std::string_view tenant,
                        std::string_view agent) {
  if (agents != nullptr && !agent.empty() && agents->is_pinned(tenant, agent))
    return Retention::High;
  const bool side =
      chat.tools.empty() && chat.max_tokens > 0 && chat.max_tokens <= kSideRequestMaxTokens;
  if (side) return Retention::Low;
  return has_breakpoint(chat) ? Retention::High : Retention::Normal;
}

}  // namespace akv
