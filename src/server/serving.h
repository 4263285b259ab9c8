// What the HTTP handlers share: the engine, the tokenizer and prompt builder of the served
// model, the options, and the admission counter. Built by app/, read-only after start-up
// except for the counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/latency_histogram.h"
#include "chat/chat_request.h"
#include "chat/prompt_builder.h"
#include "chat/tool_call_constraint.h"
#include "engine/engine.h"
#include "server/agent_history.h"
#include "server/connection_counters.h"
#include "server/prepare_timing.h"
#include "tokenizer/tokenizer.h"

namespace akv {

class RemoteStore;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> api_keys;    // empty: no auth (then bind to loopback unless told)
  std::string served_model_name = "agentkv";
  bool strict_model = false;            // 404 for a model id other than served_model_name
  int max_queue = 64;                   // generation requests in flight before 529/429
  // HTTP workers beyond max_queue: /health, /metrics, count_tokens, the agents API, 529/429
  // answers and clients still sending their request never wait for a generation to end.
  int reserved_http_workers = 16;
  int header_timeout_s = 10;            // request line + headers, from their first byte
  int body_timeout_s = 30;              // the body, from the end of the headers
  std::size_t max_body_bytes = 32u << 20;
  int ping_interval_ms = 5000;          // SSE keep-alive while waiting for tokens
  std::int64_t created_unix = 0;        // model "created" time for /v1/models
  // What a request's left-out sampling fields take: the API's defaults, or (serve's default,
  // --sampling-defaults model) the model's generation_config.json over them.
  SamplingOptions sampling_defaults{};
};

// Agent memory as the agents API sees it (any may be null: off / no such tier).
struct AgentMemoryRefs {
  AgentIndex* agents = nullptr;
  HostStore* host = nullptr;
  DiskStore* disk = nullptr;
  RemoteStore* remote = nullptr;  // the remote tier under the disk (--kv-remote)
  std::int64_t device_block_bytes = 0;
  std::string disk_unavailable{};  // why --kv-dir could not be used (the disk tier is off); "" otherwise
};

// Ready from the start (the port opens once the model is loaded); a drain (POST /admin/drain,
// SIGUSR1: app/drain.h) moves to Draining at once and to Drained once its streams ended and its
// spills reached the disk and remote tiers. /health answers 503 unless Ready.
enum class ServeState { Ready, Draining, Drained };

struct ServingContext {
  Engine& engine;
  const Tokenizer& tokenizer;
  const PromptBuilder& prompts;
  ServerOptions options;
  std::vector<std::int32_t> stop_token_ids;  // end-of-turn ids of the model and its template
  std::shared_ptr<const ConstraintVocab> constraint_vocab;  // for forced tool calls
  AgentMemoryRefs memory;
  std::atomic<int> in_flight{0};
  ConnectionCounters connections;
  AgentHistory history{};  // recent turns per agent (the dashboard)
  LatencyHistogram ttft{};  // submit -> first token of every finished request (/metrics)
  PrepareStats prepare{};   // received -> submit of every submitted chat request, by phase (/metrics)
  std::atomic<ServeState> state{ServeState::Ready};
  std::function<void()> start_drain{};  // POST /admin/drain; null: not offered (404)
};

// Holds one admission slot for the lifetime of a generation; `ok()` is false when the queue is
// full (the handler answers 529 / 429). The HTTP front takes it when a generation request's
// headers arrive, so clients still sending their body count against --max-queue too.
class AdmissionSlot {
 public:
  explicit AdmissionSlot(ServingContext& ctx) : ctx_(ctx) {
    ok_ = ctx_.in_flight.fetch_add(1) < ctx_.options.max_queue;
  }
  ~AdmissionSlot() { ctx_.in_flight.fetch_sub(1); }
  AdmissionSlot(const AdmissionSlot&) = delete;
  AdmissionSlot& operator=(const AdmissionSlot&) = delete;
  bool ok() const { return ok_; }

 private:
  ServingContext& ctx_;
  bool ok_;
};

// The slot the HTTP front took for this worker thread's request when its headers arrived (a
// generation route), or a new one where none was taken. Throws Error{ResourceExhausted} (529 /
// 429) when the queue was full. Call after validating the body: a bad request is a 400 first.
std::shared_ptr<AdmissionSlot> claim_admission_slot(ServingContext& ctx);

}  // namespace akv
