#include "server/http_connections.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

namespace akv {

namespace {

using Clock = std::chrono::steady_clock;

int poll_ms(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p{.fd = fd, .events = events, .revents = 0};
  const int ms = static_cast<int>(std::max<std::int64_t>(0, timeout.count()));
  int r;
  do r = poll(&p, 1, ms);
  while (r < 0 && errno == EINTR);
  return r;
}

// Numeric host and port, as cpp-httplib's SocketStream reports them (connection_watch.cpp
// finds the socket of a request by these).
void endpoint(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
  if (addr.ss_family == AF_INET) port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  else if (addr.ss_family == AF_INET6) port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  else return;
  std::array<char, NI_MAXHOST> host{};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host.data(), host.size(), nullptr, 0,
                  NI_NUMERICHOST) == 0)
    ip = host.data();
}

// One request's reads and its reply's writes on a connection. Reads fail once the phase's
// deadline has passed (request line + headers from their first byte; then the body from the
// end of the headers), after `read_idle` of silence, or past `max_header_bytes` of headers:
// cpp-httplib then answers 400 and the connection is closed.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int sock, const ConnectionLimits& limits)
      : sock_(sock), limits_(limits), deadline_(Clock::now() + limits.header_timeout) {}

  // The headers are in: the body's deadline starts.
  void start_body() {
    in_headers_ = false;
    deadline_ = Clock::now() + limits_.body_timeout;
  }
  bool cut() const { return cut_; }

  bool is_readable() const override {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    if (left.count() <= 0) return cut_ = true, false;
    const auto wait = std::min(left, limits_.read_idle);
    if (poll_ms(sock_, POLLIN, wait) > 0) return true;
    // Waited up to the phase's deadline (poll may wake a little before it): a cut, not a read's
    // silence.
    if (wait == left) cut_ = true;
    return false;
  }

  bool is_writable() const override {
    if (poll_ms(sock_, POLLOUT, limits_.write_idle) <= 0) return false;
    // Alive unless the peer has closed: nothing to read, or data that a peek can see.
    if (poll_ms(sock_, POLLIN, std::chrono::milliseconds(0)) == 0) return true;
    char byte;
    return recv(sock_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  ssize_t read(char* ptr, std::size_t size) override {
    if (buffered_ == used_) {
      if (in_headers_ && header_bytes_ >= limits_.max_header_bytes) return cut_ = true, -1;
      if (!is_readable()) return -1;
      const ssize_t n = recv(sock_, buffer_.data(), buffer_.size(), 0);
      if (n <= 0) return n;
      buffered_ = static_cast<std::size_t>(n);
      used_ = 0;
      if (in_headers_) header_bytes_ += buffered_;
    }
    const std::size_t n = std::min(size, buffered_ - used_);
    std::memcpy(ptr, buffer_.data() + used_, n);
    used_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, std::size_t size) override {
    if (!is_writable()) return -1;
    return send(sock_, ptr, size, MSG_NOSIGNAL);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) endpoint(addr, len, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) endpoint(addr, len, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  int sock_;
  const ConnectionLimits& limits_;
  Clock::time_point deadline_;
  bool in_headers_ = true;
  std::size_t header_bytes_ = 0;
  mutable bool cut_ = false;
  std::array<char, 4096> buffer_{};
  std::size_t buffered_ = 0, used_ = 0;
};

// cpp-httplib's thread pool, counting busy workers and the connections waiting for one.
class CountingPool final : public httplib::TaskQueue {
 public:
  CountingPool(int n, ConnectionCounters& counters) : pool_(static_cast<std::size_t>(n)), counters_(counters) {}

  void enqueue(std::function<void()> fn) override {
    counters_.waiting_connections.fetch_add(1);
    pool_.enqueue([this, fn = std::move(fn)] {
      counters_.waiting_connections.fetch_sub(1);
      counters_.busy_workers.fetch_add(1);
      fn();
      counters_.busy_workers.fetch_sub(1);
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  httplib::ThreadPool pool_;
  ConnectionCounters& counters_;
};

}  // namespace

DeadlineHttpServer::DeadlineHttpServer(const ConnectionLimits& limits, ConnectionCounters& counters,
                                       std::function<void()> after_request)
    : limits_(limits), counters_(counters), after_request_(std::move(after_request)) {
  new_task_queue = [this] { return new CountingPool(limits_.workers, counters_); };
  // cpp-httplib sets these as SO_RCVTIMEO / SO_SNDTIMEO on accepted sockets (a send blocks at
  // most write_idle) and names the keep-alive time in replies.
  set_read_timeout(std::chrono::duration_cast<std::chrono::seconds>(limits_.read_idle).count());
  set_write_timeout(std::chrono::duration_cast<std::chrono::seconds>(limits_.write_idle).count());
  set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(limits_.keep_alive).count());
}

// One idle connection per waiting one gives its worker up (not every idle connection at once).
bool DeadlineHttpServer::take_yield() const {
  int yielding = yielding_.load();
  return yielding < counters_.waiting_connections.load() && yielding_.compare_exchange_strong(yielding, yielding + 1);
}

// Waits for the first byte of the next request, checking every 20 ms for a stop and, between
// requests, for a connection waiting for a worker: an idle keep-alive connection then gives
// its worker up (closes), as a client must expect of any idle connection.
bool DeadlineHttpServer::wait_for_request(socket_t sock, bool between_requests, bool& yielded) const {
  const auto until = Clock::now() + limits_.keep_alive;
  while (svr_sock_ != INVALID_SOCKET) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    const int r = poll_ms(sock, POLLIN, std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(20)));
    if (r != 0) return r > 0;
    if (left.count() <= 0) return false;
    if (between_requests && take_yield()) {
      yielded = true;
      return false;
    }
  }
  return false;
}

bool DeadlineHttpServer::process_and_close_socket(socket_t sock) {
  bool ok = false;
  bool yielded = false;
  for (std::size_t left = keep_alive_max_count_; left > 0; --left) {
    if (!wait_for_request(sock, left != keep_alive_max_count_, yielded)) break;
    DeadlineStream stream(sock, limits_);
    bool client_closes = false;
    ok = process_request(stream, /*close_connection=*/left == 1, client_closes,
                         [&stream](httplib::Request&) { stream.start_body(); });
    if (stream.cut()) counters_.cut_requests.fetch_add(1);  // counted before the slot is released
    if (after_request_) after_request_();
    if (!ok || client_closes || stream.cut()) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  if (yielded) yielding_.fetch_sub(1);
  return ok;
}

}  // namespace akv
