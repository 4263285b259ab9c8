// A connection to one Redis server through hiredis (the remote tier's only way to Redis): the
// `--kv-remote` URL's parts, connecting (AUTH, SELECT) with a timeout, and pipelined commands.
// Not the remote tier's logic (remote_store.h). One connection per thread: not thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct redisContext;
struct redisReply;

namespace akv {

struct RedisUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;      // Redis 6 ACL user; empty: AUTH with the password alone
  std::string password;  // empty: no AUTH
};

// redis://[[user]:password@]HOST[:PORT][/DB]. rediss:// (TLS) is refused with Error{Unsupported}
// naming the way to TLS: Debian's hiredis 0.14 has none, so a local TLS proxy takes plain
// connections (deploy/redis-tls-proxy.cfg, docs/fleet.md). Throws Error{InvalidArgument} naming
// `flag` for a bad URL.
RedisUrl parse_redis_url(const std::string& url, const char* flag);
// The password in the file at `path`: its first line, without the line end (a file as
// `--kv-remote-password-file` takes it). Throws Error{InvalidArgument} naming `flag` and the
// file when it cannot be read or the line is empty.
std::string load_redis_password(const std::string& path, const char* flag);

struct RedisReplyDeleter {
  void operator()(redisReply* r) const;
};
using RedisReply = std::unique_ptr<redisReply, RedisReplyDeleter>;

class RedisConnection {
 public:
  // Connects, authenticates and selects the database within `timeout_ms`; each command then
  // waits at most `timeout_ms`. Null with `error` set when any step fails.
  static std::unique_ptr<RedisConnection> connect_or_null(const RedisUrl& url, int timeout_ms,
                                                          std::string& error);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Queues one command (binary-safe arguments) for the next round trip.
  void append(std::span<const std::string_view> args);
  void append(std::initializer_list<std::string_view> args) {
    append(std::span<const std::string_view>(args.begin(), args.size()));
  }
  // The next queued command's reply (sends what is queued first). Null when the connection
  // failed (timeout, reset, protocol error): it is broken() from then on, error() says why. A
  // Redis error reply is a reply (type REDIS_REPLY_ERROR), not a failure.
  RedisReply next();
  enum class BulkRead { Filled, Other, Failed };
  // The next reply, when it is a bulk string of exactly head.size() + tail.size() bytes, read
  // from the socket straight into `head` and then `tail` (Filled: no copy through hiredis's
  // buffer, no allocation; the kernel's copy is the only one). Any other reply (an empty or
  // missing value, another size, an error, an array) comes back in `other` (Other), parsed by
  // hiredis as next() does. Failed: the connection failed, as next() fails. For block values.
  BulkRead next_bulk_into(std::span<std::byte> head, std::span<std::byte> tail, RedisReply& other);
  bool broken() const;
  std::string error() const;

 private:
  explicit RedisConnection(redisContext* c) : c_(c) {}
  // Reads from the socket until `out` is full; false (the connection broken, error_ set) on an
  // error, the command timeout or the server closing it.
  bool read_exactly(std::span<std::byte> out);
  bool fail(const std::string& why);  // marks the connection broken; returns false
  redisContext* c_;
  std::string error_;
};

// Reply inspection; all false/empty on a null reply or another type.
bool reply_is_ok(const redisReply* r);      // status "OK"
bool reply_is_error(const redisReply* r);
std::string_view reply_string(const redisReply* r);  // string (or status) bytes
long long reply_integer(const redisReply* r, long long otherwise = -1);

}  // namespace akv
