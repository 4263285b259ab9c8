#include "chat/reply_stream.h"

#include <algorithm>
#include <random>

namespace akv {

namespace {

constexpr std::string_view kThinkClose = "</think>";

}  // namespace

std::string random_call_id() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

std::size_t held_prefix_length(std::string_view s, std::span<const std::string_view> markers) {
  std::size_t best = 0;
  for (auto m : markers)
    for (std::size_t k = std::min(s.size(), m.size() - 1); k > best; --k)
      if (m.starts_with(s.substr(s.size() - k))) {
        best = k;
        break;
      }
  return best;
}

void ReplyTextStream::emit_text(std::vector<OutputEvent>& out, OutputEvent::Kind kind,
                                std::string_view text, bool final) {
  if (skip_ws_) {
    while (!text.empty() && is_reply_ws(text.front())) text.remove_prefix(1);
    if (text.empty()) return;
    skip_ws_ = false;
  }
  std::size_t end = text.size();
  while (end > 0 && is_reply_ws(text[end - 1])) --end;
  if (end == 0) {
    if (!final) pending_ws_ += text;
    return;
  }
  std::string piece = std::move(pending_ws_);
  piece += text.substr(0, end);
  pending_ws_ = final ? std::string() : std::string(text.substr(end));
  if (!out.empty() && out.back().kind == kind)
    out.back().text += piece;
  else
    out.push_back({.kind = kind, .text = std::move(piece)});
}

bool ReplyTextStream::step_think_body(std::vector<OutputEvent>& out, bool final) {
  const std::size_t pos = buf_.find(kThinkClose);
  if (pos != std::string::npos) {
    emit_text(out, OutputEvent::Kind::ThinkingDelta, std::string_view(buf_).substr(0, pos), false);
    pending_ws_.clear();
    buf_.erase(0, pos + kThinkClose.size());
    skip_ws_ = true;
    return true;
  }
  const std::size_t hold = final ? 0 : held_prefix_length(buf_, {kThinkClose});
  emit_text(out, OutputEvent::Kind::ThinkingDelta,
            std::string_view(buf_).substr(0, buf_.size() - hold), final);
  buf_.erase(0, buf_.size() - hold);
  return false;
}

}  // namespace akv
