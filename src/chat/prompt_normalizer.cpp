#include "chat/prompt_normalizer.h"

#include <utility>

namespace akv {

namespace {

bool is_billing_block(const ContentBlock& b) {
  return b.type == BlockType::Text && std::string_view(b.text).starts_with(kBillingHeaderPrefix);
}

void drop_billing_header(std::vector<ContentBlock>& system) {
  std::size_t n_drop = 0;
  while (n_drop < system.size() && is_billing_block(system[n_drop])) ++n_drop;
  system.erase(system.begin(), system.begin() + static_cast<std::ptrdiff_t>(n_drop));
}

// Appends `msg` to `out`, merging it into the last message when the roles match.
void append_merged(std::vector<ChatMessage>& out, ChatMessage msg) {
  if (!out.empty() && out.back().role == msg.role) {
    auto& blocks = out.back().blocks;
    for (auto& b : msg.blocks) blocks.push_back(std::move(b));
    return;
  }
  msg.content_was_string = false;
  out.push_back(std::move(msg));
}

ChatMessage fold_system_message(const ChatMessage& m) {
  ChatMessage user;
  user.role = ChatRole::User;
  const std::string text = join_text_blocks(m.blocks);
  if (!text.empty())
    user.blocks.push_back({.type = BlockType::Text, .text = wrap_system_reminder(text)});
  return user;
}

ChatMessage without_thinking(const ChatMessage& m) {
  ChatMessage out;
  out.role = m.role;
  for (const auto& b : m.blocks)
    if (b.type != BlockType::Thinking) out.blocks.push_back(b);
  return out;
}

}  // namespace

std::string join_text_blocks(const std::vector<ContentBlock>& blocks) {
  std::string out;
  bool first = true;
  for (const auto& b : blocks) {
    if (b.type != BlockType::Text && b.type != BlockType::Image) continue;
    if (b.text.empty()) continue;
    if (!first) out += "\n\n";
    out += b.text;
    first = false;
  }
  return out;
}

std::string wrap_system_reminder(std::string_view text) {
  std::string out = "<system-reminder>\n";
  out += text;
  out += "\n</system-reminder>";
  return out;
}

ChatRequest normalize_prompt(const ChatRequest& request, bool keep_thinking) {
  ChatRequest out = request;
  drop_billing_header(out.system);
  out.messages.clear();

  std::vector<ChatMessage> staged;  // rules 2-4, before dropping empties and merging
  staged.reserve(request.messages.size());
  for (const auto& m : request.messages) {
    switch (m.role) {
      case ChatRole::System:
        staged.push_back(fold_system_message(m));
        break;
      case ChatRole::Assistant:
        staged.push_back(keep_thinking ? m : without_thinking(m));
        break;
      case ChatRole::Tool: {
        ChatMessage user = m;
        user.role = ChatRole::User;
        staged.push_back(std::move(user));
        break;
      }
      case ChatRole::User:
        staged.push_back(m);
        break;
    }
  }

  for (std::size_t i = 0; i < staged.size(); ++i) {
    const bool is_final_prefill = i + 1 == staged.size() && staged[i].role == ChatRole::Assistant;
    if (staged[i].blocks.empty() && !is_final_prefill) continue;
    append_merged(out.messages, std::move(staged[i]));
  }
  return out;
}

}  // namespace akv
