// The HTTP front: cpp-httplib with a worker pool, routes for the Anthropic, OpenAI and ops
// endpoints, auth, body limits, and one error path that answers every failure in the
// caller's dialect. Handler threads only translate; the engine thread computes.
#pragma once

#include <memory>

#include "server/serving.h"

namespace httplib {
class Server;
}

namespace akv {

class HttpServer {
 public:
  explicit HttpServer(ServingContext& ctx);
  ~HttpServer();

  // Binds host:port (port 0: any free port; see port()). Throws Error{Io} when it cannot.
  void bind();
  int port() const { return port_; }
  // Serves until stop() is called (from another thread or a signal handler's thread).
  void run();
  void stop();

 private:
  void register_routes();

  ServingContext& ctx_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  int listen_fd_ = -1;  // the bound socket, seen through cpp-httplib's socket-options hook
};

}  // namespace akv
