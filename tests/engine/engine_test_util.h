// Test helpers shared by the engine tests that run real models: an event collector that checks
// the event order of every request, and the greedy tokens of a prompt run alone.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cpu/reference_backend.h"
#include "engine/request.h"
#include "models/model.h"
#include "models/sequence_runner.h"

namespace akv::test {

// A gtest name for a fixture directory named as in ../shared/testdata ('-' is not allowed there).
inline std::string fixture_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

using Ids = std::vector<std::int32_t>;

// Collects every request's events; wait() blocks until a request has finished.
class Collector {
 public:
  struct Result {
    Ids tokens;
    std::vector<float> logprobs;  // of each token (NaN where the backend picked a greedy id)
    std::vector<std::vector<TokenLogprob>> top;
    bool finished = false;
    bool started = false;
    Usage started_usage;  // from the Started event
    FinishReason reason = FinishReason::Stop;
    Usage usage;
    std::string error;
  };
  EventCallback callback() {
    return [this](const EngineEvent& e) {
      std::lock_guard lock(mu_);
      Result& r = results_[e.request];
      if (e.kind == EventKind::Started) {
        EXPECT_FALSE(r.started) << "two Started events";
        EXPECT_TRUE(r.tokens.empty()) << "Started after a token";
        r.started = true;
        r.started_usage = e.usage;
      } else if (e.kind == EventKind::Token) {
        EXPECT_TRUE(r.started) << "a token before Started";
        r.tokens.push_back(e.token);
        r.logprobs.push_back(e.logprob);
        r.top.push_back(e.top_logprobs);
      } else if (e.kind == EventKind::Error) {
        r.error = e.error;
      } else {
        EXPECT_FALSE(r.finished) << "two Finished events";
        r.finished = true;
        r.reason = e.finish_reason;
        r.usage = e.usage;
        cv_.notify_all();
      }
    };
  }
  Result wait(RequestId id) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return results_[id].finished; });
    const Result& r = results_[id];
    if (!r.tokens.empty()) {
      EXPECT_EQ(r.started_usage.prompt_tokens, r.usage.prompt_tokens);
      EXPECT_EQ(r.started_usage.cached_tokens, r.usage.cached_tokens);
    }
    return results_[id];
  }
  std::size_t n_tokens(RequestId id) {
    std::lock_guard lock(mu_);
    return results_[id].tokens.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<RequestId, Result> results_;
};

// Greedy tokens of `prompt` run alone, the plain way.
// A directory under the system temp dir, unique per process and instance, removed at both ends.
struct ScratchDir {
  ScratchDir()
      : path((std::filesystem::temp_directory_path() /
              ("akv_engine_" + std::to_string(::getpid()) + "_" + std::to_string(serial++)))
                 .string()) {
    std::filesystem::remove_all(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  static inline int serial = 0;
  std::string path;
};

inline Ids greedy_alone(const std::string& dir, const Ids& prompt, int n, DType kv_dtype = DType::F32) {
  ReferenceBackend backend;
  auto model = load_model(dir, backend);
  SequenceRunner runner(*model, backend, static_cast<std::int64_t>(prompt.size()) + n, kv_dtype);
  Ids out;
  std::span<const float> logits = runner.append(prompt);
  for (int i = 0; i < n; ++i) {
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    out.push_back(static_cast<std::int32_t>(best));
    if (i + 1 < n) logits = runner.append(std::span<const std::int32_t>(&out.back(), 1));
  }
  return out;
}

}  // namespace akv::test
