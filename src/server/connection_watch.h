// Notices that a request's client has gone away, which cpp-httplib 0.11 never tells a handler (it
// only fails a write): a non-streaming reply writes once, at the end, and a streaming one writes
// nothing while its prompt is prefilled. run_generation polls it between engine events.
#pragma once

#include <functional>
#include <optional>

namespace httplib {
struct Request;
}  // namespace httplib

namespace akv {

class ConnectionWatch {
 public:
  // The request's socket, found among this process's descriptors by the request's local and
  // remote address and port (O(open descriptors), once per request); nullopt when it cannot be
  // found, and then nothing is watched. The descriptor stays the request's while its handler
  // runs, because cpp-httplib closes it only after the handler returns. Linux only.
  static std::optional<ConnectionWatch> find(const httplib::Request& req);

  // Whether the peer has closed or reset the connection: one poll and, when bytes are waiting,
  // a peek (bytes of a pipelined next request mean it is still there). A client that half-closes
  // its sending side after the request counts as gone, as Go's net/http takes it. Any thread.
  bool client_gone() const;

 private:
  explicit ConnectionWatch(int fd) : fd_(fd) {}
  int fd_;
};

// For GenerationJob::client_gone: whether the request's client has gone (empty when its socket
// cannot be found). Valid while the request's handler and its content provider run.
std::function<bool()> client_gone_check(const httplib::Request& req);

}  // namespace akv
