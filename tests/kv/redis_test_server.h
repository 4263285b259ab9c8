// A redis-server of the test's own on a free loopback port (no persistence), stopped by the
// destructor; stop() and start() again on the same port for the "Redis restarted" tests.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "kv/redis_client.h"

namespace akv::test {

class RedisTestServer {
 public:
  RedisTestServer() : port_(free_port()) { start(); }
  ~RedisTestServer() { stop(); }
  RedisTestServer(const RedisTestServer&) = delete;
  RedisTestServer& operator=(const RedisTestServer&) = delete;

  int port() const { return port_; }
  RedisUrl url() const {
    RedisUrl u;
    u.host = "127.0.0.1";
    u.port = port_;
    return u;
  }
  std::string url_text() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  void start() {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int null_fd = ::open("/dev/null", O_WRONLY);
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
      const std::string port = std::to_string(port_);
      ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200; ++i) {
      std::string error;
      if (RedisConnection::connect_or_null(url(), 200, error) != nullptr) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_)
        throw std::runtime_error("redis-server did not start (is the Debian package redis-server installed?)");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("redis-server did not answer");
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    ::close(fd);
    return ntohs(a.sin_port);
  }
  int port_;
  pid_t pid_ = -1;
};

}  // namespace akv::test
