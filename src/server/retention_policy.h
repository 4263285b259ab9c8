// How hard the KV tiers should keep a request's blocks (kv/retention.h), decided at the edge
// from what the request looks like (architecture.md §5):
//   High:   the agent is pinned (POST /v1/agents/{id}/pin), or the prompt marks cache_control
//           breakpoints and is not a side request
//   Low:    a side request: no tools and a max_tokens of at most kSideRequestMaxTokens (a client's
//           title, summary or quota calls), so it never pushes a main conversation out
//   Normal: everything else
#pragma once

#include <cstdint>
#include <string_view>

#include "chat/chat_request.h"
#include "kv/retention.h"

namespace akv {

class AgentIndex;

inline constexpr std::int64_t kSideRequestMaxTokens = 1024;

// `agents` may be null (agent memory off); `tenant`/`agent` identify the caller.
Retention retention_for(const ChatRequest& chat, const AgentIndex* agents, std::string_view tenant,
                        std::string_view agent);

}  // namespace akv
