#include "chat/harmony_parser.h"

#include <array>

#include "chat/json_depth.h"
#include "chat/reply_stream.h"

namespace akv {

namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kCall = "<|call|>";
constexpr std::string_view kReturn = "<|return|>";
constexpr std::string_view kFunctions = "functions.";
constexpr std::size_t kMaxNameBytes = 256;

// What ends a body: a terminator (consumed) or the next message's header (kept).
constexpr std::array<std::string_view, 5> kBodyEnds = {kEnd, kCall, kReturn, kStart, kChannel};
// What cuts a header short (it holds <|channel|> and <|constrain|> itself).
constexpr std::array<std::string_view, 4> kHeaderBreaks = {kEnd, kCall, kReturn, kStart};
// How a header may begin.
constexpr std::array<std::string_view, 4> kHeaderStarts = {kStart, kChannel, " to=", "to="};

bool is_ws(char c) { return is_reply_ws(c); }

bool is_terminator(std::string_view m) { return m == kEnd || m == kCall || m == kReturn; }

// The earliest of `markers` in s at or after `from`: {position, marker}; npos when none.
template <std::size_t N>
std::pair<std::size_t, std::string_view> find_first(std::string_view s, const std::array<std::string_view, N>& markers,
                                                    std::size_t from = 0) {
  std::pair<std::size_t, std::string_view> best{std::string_view::npos, {}};
  for (auto m : markers) {
    const std::size_t pos = s.find(m, from);
    if (pos < best.first) best = {pos, m};
  }
  return best;
}

struct Header {
  std::string role, channel, recipient, content_type;
};

// A word of a header: up to a blank or the next marker.
std::string_view take_word(std::string_view& h) {
  std::size_t n = 0;
  while (n < h.size() && !is_ws(h[n]) && h[n] != '<') ++n;
  const std::string_view w = h.substr(0, n);
  h.remove_prefix(n);
  return w;
}

// [<|start|>ROLE] then, in any order, <|channel|>C, to=R, <|constrain|>T or a bare word T after
// the channel (the template's "commentary json"). nullopt without a role, channel or recipient,
// or with anything else in it.
std::optional<Header> parse_header(std::string_view h) {
  Header out;
  if (h.starts_with(kStart)) {
    h.remove_prefix(kStart.size());
    out.role = take_word(h);
  }
  while (!h.empty()) {
    if (is_ws(h.front())) {
      h.remove_prefix(1);
    } else if (h.starts_with(kChannel)) {
      h.remove_prefix(kChannel.size());
      out.channel = take_word(h);
    } else if (h.starts_with("to=")) {
      h.remove_prefix(3);
      out.recipient = take_word(h);
    } else if (h.starts_with(kConstrain)) {
      h.remove_prefix(kConstrain.size());
      out.content_type = take_word(h);
    } else if (h.front() != '<' && !out.channel.empty() && out.content_type.empty()) {
      out.content_type = take_word(h);
    } else {
      return std::nullopt;
    }
  }
  if (out.role.empty() && out.channel.empty() && out.recipient.empty()) return std::nullopt;
  return out;
}

void push_delta(std::vector<OutputEvent>& out, OutputEvent::Kind kind, std::string_view text) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == kind)
    out.back().text += text;
  else
    out.push_back({.kind = kind, .text = std::string(text)});
}

// Watches the depth of the arguments JSON (the scanner's own stack is unbounded).
struct DepthListener final : JsonListener {
  std::size_t max_depth = 0;
  void on_key(std::size_t, std::size_t, std::size_t) override {}
  void on_value_begin(std::size_t, std::size_t depth, char first) override {
    if (first == '{' || first == '[') max_depth = std::max(max_depth, depth + 1);
  }
  void on_value_end(std::size_t, std::size_t) override {}
};

}  // namespace

HarmonyParser::HarmonyParser(HarmonyParserOptions options) : options_(std::move(options)) {
  if (!options_.make_call_id) options_.make_call_id = random_call_id;
}

std::vector<OutputEvent> HarmonyParser::feed(std::string_view delta) {
  std::vector<OutputEvent> out;
  if (finished_) return out;
  buf_ += delta;
  step(out, /*final=*/false);
  return out;
}

std::vector<OutputEvent> HarmonyParser::finish() {
  std::vector<OutputEvent> out;
  if (finished_) return out;
  step(out, /*final=*/true);
  if (mode_ != Mode::Header) end_body(out);
  finished_ = true;
  return out;
}

void HarmonyParser::step(std::vector<OutputEvent>& out, bool final) {
  for (;;) {
    const bool progressed = mode_ == Mode::Header ? step_header(out, final) : step_body(out, final);
    if (!progressed) break;
  }
}

bool HarmonyParser::step_header(std::vector<OutputEvent>& out, bool final) {
  std::size_t lead = 0;  // blanks between messages are dropped
  while (lead < buf_.size() && is_ws(buf_[lead])) ++lead;
  const std::string_view rest = std::string_view(buf_).substr(lead);
  if (rest.empty()) {
    if (final) buf_.clear();
    return false;
  }
  bool may_start = false, starts = false;
  for (auto s : kHeaderStarts) {
    starts |= rest.starts_with(s);
    may_start |= s.starts_with(rest.substr(0, s.size()));
  }
  if (!starts && may_start && !final) return false;
  if (!starts) {  // text outside any message: kept as text up to the next header
    mode_ = Mode::Text;
    header_.clear();
    return true;
  }
  const std::size_t message = rest.find(kMessage);
  const auto [broken_at, breaker] = find_first(rest, kHeaderBreaks, 1);
  const bool too_long = (message == std::string_view::npos ? rest.size() : message) > kMaxHarmonyHeaderBytes;
  if (message != std::string_view::npos && message < broken_at && !too_long) {
    const std::string_view header = rest.substr(0, message);
    if (const auto parsed = parse_header(header)) {
      header_ = std::string(header) + std::string(kMessage);
      buf_.erase(0, lead + message + kMessage.size());  // `header` and `rest` dangle from here
      open_body(parsed->channel, parsed->recipient);
      return true;
    }
  }
  // Not a header: what was meant as one is text, up to where the next message may start (or
  // through its <|message|>, when what came before it is no header).
  std::size_t end = broken_at;
  if (message != std::string_view::npos && !too_long) end = std::min(end, message + kMessage.size());
  if (end == std::string_view::npos) {
    if (!final && !too_long) return false;  // the header may still end
    end = rest.size();
  }
  push_delta(out, OutputEvent::Kind::TextDelta, rest.substr(0, end));
  const std::size_t drop = end == broken_at && is_terminator(breaker) ? breaker.size() : 0;
  buf_.erase(0, lead + std::min(end + drop, rest.size()));
  return true;
}

void HarmonyParser::open_body(const std::string& channel, const std::string& recipient) {
  if (!recipient.empty() && options_.parse_calls && n_calls_ < kMaxHarmonyCalls) {
    std::string_view name = recipient;
    if (name.starts_with(kFunctions)) name.remove_prefix(kFunctions.size());
    if (!name.empty() && name.size() <= kMaxNameBytes) {
      call_name_ = name;
      mode_ = Mode::CallStart;
      return;
    }
  }
  if (!recipient.empty()) {  // a call that is not taken as one: its header and body are text
    mode_ = Mode::Text;
    return;
  }
  header_.clear();
  mode_ = channel == "analysis" ? Mode::Thinking : Mode::Text;
}

bool HarmonyParser::step_body(std::vector<OutputEvent>& out, bool final) {
  const auto [pos, marker] = find_first(std::string_view(buf_), kBodyEnds);
  if (pos != std::string::npos) {
    body_bytes(out, std::string_view(buf_).substr(0, pos));
    buf_.erase(0, pos + (is_terminator(marker) ? marker.size() : 0));
    end_body(out);
    return true;
  }
  const std::size_t hold = final ? 0 : held_prefix_length(std::string_view(buf_), kBodyEnds);
  body_bytes(out, std::string_view(buf_).substr(0, buf_.size() - hold));
  buf_.erase(0, buf_.size() - hold);
  return false;
}

void HarmonyParser::body_bytes(std::vector<OutputEvent>& out, std::string_view bytes) {
  while (!bytes.empty()) {
    switch (mode_) {
      case Mode::Header:
        return;
      case Mode::Text:
        if (!header_.empty()) {  // a recipient's message that is not a call: kept as text
          push_delta(out, OutputEvent::Kind::TextDelta, header_);
          header_.clear();
        }
        push_delta(out, OutputEvent::Kind::TextDelta, bytes);
        return;
      case Mode::Thinking:
        push_delta(out, OutputEvent::Kind::ThinkingDelta, bytes);
        return;
      case Mode::CallRest: {  // after the arguments: blanks dropped, anything else is text
        std::size_t i = 0;
        while (i < bytes.size() && is_ws(bytes[i])) ++i;
        bytes.remove_prefix(i);
        if (bytes.empty()) return;
        header_.clear();
        mode_ = Mode::Text;
        break;
      }
      case Mode::CallStart: {
        std::size_t i = 0;
        while (i < bytes.size() && is_ws(bytes[i])) ++i;
        header_ += bytes.substr(0, i);
        bytes.remove_prefix(i);
        if (bytes.empty()) return;
        if (bytes.front() != '{') {  // not a JSON object: the message is text
          mode_ = Mode::Text;
          break;
        }
        out.push_back({.kind = OutputEvent::Kind::ToolCallStart, .name = call_name_, .id = options_.make_call_id()});
        ++n_calls_;
        header_.clear();
        args_.clear();
        args_sent_ = args_safe_ = 0;
        scan_ = JsonScanner();
        mode_ = Mode::CallArgs;
        break;
      }
      case Mode::CallArgs: {
        DepthListener depth;
        std::size_t used = 0;
        for (; used < bytes.size(); ++used) {
          const auto status = scan_.feed(bytes[used], args_.size() + used, &depth);
          if (status == JsonScanner::Status::Error || depth.max_depth > static_cast<std::size_t>(kMaxJsonDepth)) {
            args_ += bytes.substr(0, used + 1);
            bytes.remove_prefix(used + 1);
            // What follows the last closable point is text, the byte that broke the JSON included.
            const std::string rest = args_.substr(args_safe_);
            cut_call(out);
            mode_ = Mode::Text;
            push_delta(out, OutputEvent::Kind::TextDelta, rest);
            used = 0;
            break;
          }
          if (scan_.closable()) args_safe_ = args_.size() + used + 1;
          if (status == JsonScanner::Status::Done) {
            ++used;
            break;
          }
        }
        if (mode_ != Mode::CallArgs) break;
        args_ += bytes.substr(0, used);
        bytes.remove_prefix(used);
        if (args_safe_ > args_sent_) {
          push_delta(out, OutputEvent::Kind::ToolCallArgsDelta, std::string_view(args_).substr(args_sent_, args_safe_ - args_sent_));
          args_sent_ = args_safe_;
        }
        if (scan_.status() == JsonScanner::Status::Done) {
          out.push_back({.kind = OutputEvent::Kind::ToolCallEnd});
          mode_ = Mode::CallRest;
        }
        break;
      }
    }
  }
}

void HarmonyParser::cut_call(std::vector<OutputEvent>& out) {
  if (args_safe_ > args_sent_) {
    push_delta(out, OutputEvent::Kind::ToolCallArgsDelta, std::string_view(args_).substr(args_sent_, args_safe_ - args_sent_));
    args_sent_ = args_safe_;
  }
  // Re-scan what was sent to close it (the scanner itself may sit past the closable point).
  JsonScanner sent;
  for (std::size_t i = 0; i < args_sent_; ++i) sent.feed(args_[i], i, nullptr);
  push_delta(out, OutputEvent::Kind::ToolCallArgsDelta, args_sent_ == 0 ? std::string("{}") : sent.closing_suffix());
  out.push_back({.kind = OutputEvent::Kind::ToolCallEnd});
  ++n_cut_calls_;
}

void HarmonyParser::end_body(std::vector<OutputEvent>& out) {
  if (mode_ == Mode::CallStart || mode_ == Mode::Text) {  // a call header with no body: text
    push_delta(out, OutputEvent::Kind::TextDelta, header_);
  } else if (mode_ == Mode::CallArgs) {
    const std::string rest = args_.substr(args_safe_);
    cut_call(out);
    push_delta(out, OutputEvent::Kind::TextDelta, rest);
  }
  header_.clear();
  mode_ = Mode::Header;
}

std::vector<HarmonyMessage> parse_harmony_prefix(std::string_view text, std::size_t max_messages) {
  std::vector<HarmonyMessage> out;
  std::size_t at = 0;
  while (at < text.size() && out.size() < max_messages) {
    const std::string_view rest = text.substr(at);
    bool starts = false;
    for (auto s : kHeaderStarts) starts |= rest.starts_with(s);
    if (!starts) break;
    const std::size_t message = rest.find(kMessage);
    if (message == std::string_view::npos || find_first(rest, kHeaderBreaks, 1).first < message) break;
    const auto header = parse_header(rest.substr(0, message));
    if (!header) break;
    const std::string_view body = rest.substr(message + kMessage.size());
    const auto [end, marker] = find_first(body, kBodyEnds);
    HarmonyMessage m{.role = header->role,
                     .channel = header->channel,
                     .recipient = header->recipient,
                     .content_type = header->content_type,
                     .content = std::string(body.substr(0, end)),
                     .end = {},
                     .end_pos = text.size()};
    if (end != std::string_view::npos) {
      if (is_terminator(marker)) m.end = marker;
      m.end_pos = at + message + kMessage.size() + end + m.end.size();
    }
    at = m.end_pos;
    out.push_back(std::move(m));
  }
  return out;
}

std::optional<std::vector<HarmonyMessage>> parse_harmony_messages(std::string_view text, std::size_t max_messages) {
  std::vector<HarmonyMessage> out = parse_harmony_prefix(text, max_messages + 1);
  const std::size_t parsed = out.empty() ? 0 : out.back().end_pos;
  if (out.size() > max_messages || parsed != text.size()) return std::nullopt;
  return out;
}

}  // namespace akv
