#include "server/generation.h"

#include <algorithm>
#include <memory>

#include "server/event_queue.h"
#include "server/stop_matcher.h"

namespace akv {

namespace {

// Forwards to the client's sink and keeps a copy of the reply's blocks.
class TeeSink final : public OutputSink {
 public:
  TeeSink(OutputSink& client, bool omit_thinking) : client_(client), omit_thinking_(omit_thinking) {}
  bool start(const ReplyUsage& u) override { return client_.start(u); }
  bool text(std::string_view d) override { return copy_.text(d) && client_.text(d); }
  bool thinking(std::string_view d) override { return omit_thinking_ || (copy_.thinking(d) && client_.thinking(d)); }
  bool tool_start(const std::string& id, const std::string& name) override {
    return copy_.tool_start(id, name) && client_.tool_start(id, name);
  }
  bool tool_args(std::string_view f) override { return copy_.tool_args(f) && client_.tool_args(f); }
  bool tool_end() override { return client_.tool_end(); }
  bool finish(const ReplyFinish& f) override { return client_.finish(f); }
  bool ping() override { return client_.ping(); }
  const std::vector<OutputBlock>& blocks() const { return copy_.blocks(); }

 private:
  OutputSink& client_;
  const bool omit_thinking_;
  CollectingSink copy_;
};

// Collects the reply and reports the client gone when asked.
class WatchedSink final : public OutputSink {
 public:
  WatchedSink(CollectingSink& inner, std::function<bool()> client_gone)
      : inner_(inner), client_gone_(std::move(client_gone)) {}
  bool start(const ReplyUsage& u) override { return inner_.start(u) && alive(); }
  bool text(std::string_view d) override { return inner_.text(d) && alive(); }
  bool thinking(std::string_view d) override { return inner_.thinking(d) && alive(); }
  bool tool_start(const std::string& id, const std::string& name) override {
    return inner_.tool_start(id, name) && alive();
  }
  bool tool_args(std::string_view f) override { return inner_.tool_args(f) && alive(); }
  bool tool_end() override { return inner_.tool_end() && alive(); }
  bool finish(const ReplyFinish& f) override { return inner_.finish(f); }
  bool ping() override { return alive(); }

 private:
  bool alive() const { return !client_gone_ || !client_gone_(); }
  CollectingSink& inner_;
  std::function<bool()> client_gone_;
};

class PlainOutputParser final : public OutputParser {
 public:
  bool feed(std::string_view text, OutputSink& sink) override { return sink.text(text); }
  bool finish(OutputSink&) override { return true; }
  bool saw_tool_call() const override { return false; }
};

// Pipeline state for one request on the HTTP thread.
class Driver {
 public:
  Driver(const Tokenizer& tokenizer, GenerationJob& job, OutputSink& sink)
      : detok_(tokenizer, /*skip_special_tokens=*/!job.keep_special_tokens), stops_(job.stop_sequences), job_(job), sink_(sink) {
    if (!job_.parser) job_.parser = make_plain_output_parser();
  }

  // Returns false when output must stop (client gone, or a stop sequence matched).
  bool on_token(std::int32_t token) {
    ++n_tokens_;
    if (std::find(job_.request.stop_token_ids.begin(), job_.request.stop_token_ids.end(), token) !=
        job_.request.stop_token_ids.end())
      return true;  // an end-of-turn token: not text
    ids_.push_back(token);
    return emit(detok_.feed(token));
  }

  // End of the token stream: flush held-back text and the parser.
  void drain() {
    if (stopped_) return;
    if (!emit(detok_.flush())) return;
    const std::string held = stops_.flush();
    if (!held.empty() && !job_.parser->feed(held, sink_)) client_gone_ = true;
    if (!client_gone_ && !job_.parser->finish(sink_)) client_gone_ = true;
  }

  bool client_gone() const { return client_gone_; }
  bool stop_matched() const { return stop_match_.has_value(); }
  const std::string& stop_sequence() const { return *stop_match_; }
  bool saw_tool_call() const { return job_.parser->saw_tool_call(); }
  const std::vector<std::int32_t>& ids() const { return ids_; }
  std::int32_t n_tokens() const { return n_tokens_; }

 private:
  bool emit(const std::string& text) {
    if (stopped_) return false;
    if (text.empty()) return true;
    StopMatcher::Result r = stops_.feed(text);
    if (!r.text.empty() && !job_.parser->feed(r.text, sink_)) {
      client_gone_ = true;
      stopped_ = true;
      return false;
    }
    if (r.matched) {
      stop_match_ = r.matched;
      stopped_ = true;
      if (!job_.parser->finish(sink_)) client_gone_ = true;
      return false;
    }
    return true;
  }

  IncrementalDetokenizer detok_;
  StopMatcher stops_;
  GenerationJob& job_;
  OutputSink& sink_;
  std::vector<std::int32_t> ids_;  // generated ids, end-of-turn token excluded
  std::optional<std::string> stop_match_;
  std::int32_t n_tokens_ = 0;
  bool stopped_ = false;
  bool client_gone_ = false;
};

ReplyUsage reply_usage(const Usage& u) {
  return {.prompt_tokens = u.prompt_tokens, .cached_tokens = u.cached_tokens, .output_tokens = u.generated_tokens};
}

}  // namespace

std::unique_ptr<OutputParser> make_plain_output_parser() { return std::make_unique<PlainOutputParser>(); }

namespace {

ReplyFinish generate(Engine& engine, const Tokenizer& tokenizer, GenerationJob job, OutputSink& client) {
  TeeSink sink(client, job.omit_thinking);
  using Clock = std::chrono::steady_clock;
  const auto t_submit = Clock::now();
  std::optional<Clock::time_point> t_first, t_last;
  auto queue = std::make_shared<EventQueue>();
  Driver driver(tokenizer, job, sink);
  ReplyUsage usage{.prompt_tokens = static_cast<std::int64_t>(job.request.prompt.size())};
  const RequestId id = engine.submit(job.request, [queue](const EngineEvent& e) { queue->push(e); });
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  ReplyFinish finish;
  if (job.received) {
    finish.timing.prepare_ms = ms(t_submit - *job.received);
    finish.timing.prepare = job.prepare;
    finish.timing.prepare.wait_ms = std::max(0.0, finish.timing.prepare_ms - job.prepare.sum_ms());
    if (job.prepare_stats != nullptr) job.prepare_stats->observe(finish.timing.prepare_ms, finish.timing.prepare);
  }

  bool started = false;
  bool cancelled = false;
  bool client_left = false;  // found by a failed start or ping (the driver notices its own)
  auto cancel_once = [&] {
    if (!cancelled) engine.cancel(id);
    cancelled = true;
  };
  auto leave = [&] {
    client_left = true;
    cancel_once();
  };
  // Between events: poll the client every kClientPollInterval, ping after ping_interval.
  const auto wait = job.client_gone ? std::min(job.ping_interval, kClientPollInterval)
                                    : job.ping_interval;
  auto last_sign = Clock::now();  // of the engine or a ping
  for (;;) {
    std::optional<EngineEvent> e = queue->pop_for(wait);
    if (!e) {
      if (cancelled) continue;
      if (job.client_gone && job.client_gone()) {
        leave();
      } else if (Clock::now() - last_sign >= job.ping_interval) {
        last_sign = Clock::now();
        if (!sink.ping()) leave();
      }
      continue;
    }
    last_sign = Clock::now();
    if (e->kind == EventKind::Started) {
      usage.cached_tokens = e->usage.cached_tokens;
      if (!started && !sink.start(usage)) leave();
      started = true;
      continue;
    }
    if (e->kind == EventKind::Token) {
      t_last = Clock::now();
      if (!t_first) t_first = t_last;
      if (!started) {
        started = true;
        if (!sink.start(usage)) leave();
      }
      if (!cancelled && !driver.on_token(e->token)) cancel_once();
      continue;
    }
    if (e->kind == EventKind::Error) {
      finish.error_message = e->error;
      continue;
    }
    // Finished: the last event.
    usage = reply_usage(e->usage);
    break;
  }
  usage.output_tokens = driver.n_tokens();
  if (t_first) {
    finish.timing.ttft_ms = ms(*t_first - t_submit);
    finish.timing.decode_ms = ms(*t_last - *t_first);
  }
  if (client_left || driver.client_gone()) {
    finish.reason = StopReason::Cancelled;
    finish.usage = usage;
    return finish;
  }
  if (!started) sink.start(usage);
  driver.drain();
  finish.usage = usage;
  if (!finish.error_message.empty()) finish.reason = StopReason::Error;
  else if (driver.stop_matched()) {
    finish.reason = StopReason::StopSequence;
    finish.stop_sequence = driver.stop_sequence();
  } else if (driver.saw_tool_call()) finish.reason = StopReason::ToolUse;
  else if (usage.output_tokens >= job.request.max_tokens) finish.reason = StopReason::MaxTokens;
  else finish.reason = StopReason::EndTurn;
  // Only a turn the model ended itself is remembered: text cut by a stop sequence or max_tokens
  // differs from what the client will send back.
  if (job.on_complete && (finish.reason == StopReason::EndTurn || finish.reason == StopReason::ToolUse))
    job.on_complete(sink.blocks(), tokenizer.decode(driver.ids(), /*skip_special_tokens=*/false), job.request.prompt,
                    driver.ids());
  if (finish.reason != StopReason::Error && finish.reason != StopReason::Cancelled) sink.finish(finish);
  return finish;
}

}  // namespace

ReplyFinish run_generation(Engine& engine, const Tokenizer& tokenizer, GenerationJob job, OutputSink& client) {
  const auto on_finish = std::move(job.on_finish);
  const ReplyFinish finish = generate(engine, tokenizer, std::move(job), client);
  if (on_finish) on_finish(finish);
  return finish;
}

ReplyFinish run_generation_collected(Engine& engine, const Tokenizer& tokenizer, GenerationJob job,
                                     CollectingSink& sink, std::function<bool()> client_gone) {
  job.client_gone = client_gone;
  WatchedSink watched(sink, std::move(client_gone));
  return run_generation(engine, tokenizer, std::move(job), watched);
}

}  // namespace akv
