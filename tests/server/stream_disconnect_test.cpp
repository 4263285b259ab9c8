// A streamed request whose client disconnects while its prompt is prefilled is cancelled within
// a few hundred ms, not at the next keep-alive ping (5 s) or the first token (issue 13, item 8).
// In-process: HttpServer on a free port, stories260K on a reference backend slowed to 25 ms a
// step, a 400-token prompt in chunks of 8 (about 50 steps, 1.25 s of prefill), a raw socket as
// the client.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "backend/cpu/reference_backend.h"
#include "chat/prompt_builder.h"
#include "engine/engine.h"
#include "models/model.h"
#include "server/http_server.h"
#include "server/serving.h"
#include "tokenizer/tokenizer.h"

namespace akv {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kStories = std::string(AGENTKV_TESTDATA) + "/models/stories260K/hf";
constexpr auto kStepDelay = std::chrono::milliseconds(25);

// Every forward pass takes kStepDelay longer: a long prefill on a small model.
class SlowBackend final : public ReferenceBackend {
 public:
  void begin_step(const ForwardBatch& batch, const KvStorage& kv, const void* caller) override {
    std::this_thread::sleep_for(kStepDelay);
    ReferenceBackend::begin_step(batch, kv, caller);
  }
};

// Connects to 127.0.0.1:port, sends `request` and reads until the end of the response headers.
// Returns the socket, or -1.
int send_and_read_headers(int port, const std::string& request, std::string& headers) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return -1;
  char buf[512];
  while (headers.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return -1;
    headers.append(buf, static_cast<std::size_t>(n));
  }
  return fd;
}

TEST(StreamDisconnect, AClientThatLeavesDuringALongPrefillIsCancelledWellUnderASecond) {
  SlowBackend backend;
  const Tokenizer tokenizer = Tokenizer::load_or_throw(kStories);
  const PromptBuilder prompts(tokenizer);
  EngineConfig config;
  config.block_size = 16;
  config.n_blocks = 64;
  config.scheduler = {.max_batch_tokens = 8, .max_prefill_chunk = 8, .max_running = 4};
  Engine engine(load_model(kStories, backend), backend, config);
  ServerOptions options;
  options.port = 0;
  options.ping_interval_ms = 5000;
  ServingContext ctx{.engine = engine,
                     .tokenizer = tokenizer,
                     .prompts = prompts,
                     .options = options,
                     .stop_token_ids = {},
                     .constraint_vocab = nullptr,
                     .memory = {},
                     .connections = {}};
  HttpServer server(ctx);
  server.bind();
  std::thread serving([&] { server.run(); });

  std::string prompt = "[1";
  for (int i = 1; i < 400; ++i) prompt += "," + std::to_string(3 + i % 500);
  prompt += "]";
  const std::string body =
      R"({"model":"agentkv","prompt":)" + prompt + R"(,"max_tokens":50,"stream":true})";
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  std::string headers;
  const int fd = send_and_read_headers(server.port(), request, headers);
  ASSERT_GE(fd, 0);
  EXPECT_NE(headers.find("200"), std::string::npos) << headers;
  // Watching the engine's counters (not driving it): the prefill is under way.
  while (engine.metrics().totals.steps < 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::close(fd);
  const auto left = Clock::now();
  while (engine.metrics().totals.requests_finished == 0 &&
         Clock::now() - left < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - left).count();

  const EngineTotals totals = engine.metrics().totals;
  EXPECT_EQ(totals.requests_finished, 1u);
  EXPECT_LT(ms, 500) << "the engine request ended " << ms << " ms after the client left";
  EXPECT_EQ(totals.generated_tokens, 0u) << "the prefill ran to its end";
  EXPECT_LT(totals.steps, 40u);
  std::printf("cancelled %lld ms after the client left, after %llu steps\n",
              static_cast<long long>(ms), static_cast<unsigned long long>(totals.steps));
  server.stop();
  serving.join();
}

}  // namespace
}  // namespace akv
