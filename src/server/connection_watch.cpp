#include "server/connection_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include <httplib.h>

namespace akv {

namespace {

// Numeric host and port of a socket address, as cpp-httplib writes them into Request.
bool endpoint(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
  char h[NI_MAXHOST];
  char p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof(h), p, sizeof(p),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(p);
  return true;
}

bool is_request_socket(int fd, const httplib::Request& req) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  std::string host;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !endpoint(addr, len, host, port) ||
      port != req.remote_port || host != req.remote_addr)
    return false;
  len = sizeof(addr);
  return getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && endpoint(addr, len, host, port) &&
         port == req.local_port && host == req.local_addr;
}

}  // namespace

std::optional<ConnectionWatch> ConnectionWatch::find(const httplib::Request& req) {
  if (req.remote_port <= 0 || req.local_port <= 0) return std::nullopt;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  std::optional<ConnectionWatch> found;
  const int own = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    if (is_request_socket(static_cast<int>(fd), req)) {
      found = ConnectionWatch(static_cast<int>(fd));
      break;
    }
  }
  closedir(dir);
  return found;
}

bool ConnectionWatch::client_gone() const {
  pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

std::function<bool()> client_gone_check(const httplib::Request& req) {
  const std::optional<ConnectionWatch> watch = ConnectionWatch::find(req);
  if (!watch) return {};
  return [watch = *watch] { return watch.client_gone(); };
}

}  // namespace akv
