#include "kv/redis_client.h"

#include <hiredis/hiredis.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

#include "base/error.h"

namespace akv {

namespace {

bool parse_int(std::string_view s, int& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

timeval to_timeval(int ms) {
  return {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
}

// Why recv() returned `got` (<= 0): closed, the command timeout (SO_RCVTIMEO), or errno.
std::string recv_error(ssize_t got) {
  if (got == 0) return "Redis closed the connection";
  return errno == EAGAIN || errno == EWOULDBLOCK ? "timed out waiting for Redis" : std::strerror(errno);
}

}  // namespace

RedisUrl parse_redis_url(const std::string& url, const char* flag) {
  const auto bad = [&](const std::string& why) {
    return Error(ErrorKind::InvalidArgument,
                 std::string(flag) + ": " + why + " in '" + url + "' (expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB])");
  };
  std::string_view rest = url;
  if (rest.starts_with("rediss://"))
    throw Error(ErrorKind::Unsupported,
                std::string(flag) + ": TLS (rediss://) is not supported by this build's hiredis; run the local TLS proxy "
                                    "of deploy/redis-tls-proxy.cfg and give redis://127.0.0.1:ITS-PORT instead "
                                    "(docs/fleet.md, \"TLS to Redis\")");
  if (!rest.starts_with("redis://")) throw bad("not a redis:// URL");
  rest.remove_prefix(8);
  RedisUrl u;
  if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view auth = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    const std::size_t colon = auth.find(':');
    if (colon == std::string_view::npos) {
      u.password = std::string(auth);  // redis://PASSWORD@HOST, as several clients accept
    } else {
      u.user = std::string(auth.substr(0, colon));
      u.password = std::string(auth.substr(colon + 1));
    }
  }
  if (const std::size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!parse_int(db, u.db) || u.db < 0)) throw bad("bad database number");
    rest = rest.substr(0, slash);
  }
  // HOST[:PORT], or [IPv6][:PORT].
  const std::size_t host_end = rest.starts_with('[') ? rest.find(']') : 0;
  if (host_end == std::string_view::npos) throw bad("unclosed [");
  if (const std::size_t colon = rest.find(':', host_end); colon != std::string_view::npos) {
    if (!parse_int(rest.substr(colon + 1), u.port) || u.port <= 0 || u.port > 65535) throw bad("bad port");
    rest = rest.substr(0, colon);
  }
  if (rest.starts_with('[')) rest = rest.substr(1, rest.size() - 2);
  if (rest.empty()) throw bad("no host");
  u.host = std::string(rest);
  return u;
}

std::string load_redis_password(const std::string& path, const char* flag) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line))
    throw Error(ErrorKind::InvalidArgument, std::string(flag) + ": cannot read " + path);
  if (line.ends_with('\r')) line.pop_back();
  if (line.empty()) throw Error(ErrorKind::InvalidArgument, std::string(flag) + ": " + path + " has an empty first line");
  return line;
}

void RedisReplyDeleter::operator()(redisReply* r) const {
  freeReplyObject(r);
}

std::unique_ptr<RedisConnection> RedisConnection::connect_or_null(const RedisUrl& url, int timeout_ms,
                                                                  std::string& error) {
  redisContext* c = redisConnectWithTimeout(url.host.c_str(), url.port, to_timeval(timeout_ms));
  if (c == nullptr) {
    error = "out of memory";
    return nullptr;
  }
  std::unique_ptr<RedisConnection> conn(new RedisConnection(c));
  if (c->err != 0) {
    error = std::string("cannot connect to ") + url.host + ":" + std::to_string(url.port) + ": " + c->errstr;
    return nullptr;
  }
  redisSetTimeout(c, to_timeval(timeout_ms));
  redisEnableKeepAlive(c);
  const std::string db = std::to_string(url.db);
  if (!url.password.empty()) {
    if (url.user.empty())
      conn->append({"AUTH", url.password});
    else
      conn->append({"AUTH", url.user, url.password});
  }
  if (url.db != 0) conn->append({"SELECT", db});
  for (int i = (url.password.empty() ? 0 : 1) + (url.db != 0 ? 1 : 0); i > 0; --i) {
    const RedisReply r = conn->next();
    if (!reply_is_ok(r.get())) {
      error = r == nullptr ? conn->error() : "Redis refused AUTH or SELECT: " + std::string(reply_string(r.get()));
      return nullptr;
    }
  }
  return conn;
}

RedisConnection::~RedisConnection() {
  redisFree(c_);
}

void RedisConnection::append(std::span<const std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  redisAppendCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data());
}

RedisReply RedisConnection::next() {
  void* reply = nullptr;
  if (c_->err != 0 || redisGetReply(c_, &reply) != REDIS_OK || reply == nullptr) {
    if (reply != nullptr) freeReplyObject(reply);
    error_ = c_->err != 0 ? c_->errstr : "no reply";
    if (c_->err == 0) c_->err = REDIS_ERR_OTHER;  // broken from here on
    return nullptr;
  }
  return RedisReply(static_cast<redisReply*>(reply));
}

bool RedisConnection::fail(const std::string& why) {
  error_ = why;
  if (c_->err == 0) c_->err = REDIS_ERR_IO;  // broken from here on
  return false;
}

bool RedisConnection::read_exactly(std::span<std::byte> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::recv(c_->fd, out.data() + done, out.size() - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return fail(recv_error(n));
  }
  return true;
}

RedisConnection::BulkRead RedisConnection::next_bulk_into(std::span<std::byte> head, std::span<std::byte> tail,
                                                          RedisReply& other) {
  const std::size_t want = head.size() + tail.size();
  const auto scatter = [&](std::size_t at) {  // where byte `at` of the value goes, to the end of its part
    return at < head.size() ? head.subspan(at) : tail.subspan(at - head.size());
  };
  const auto through_hiredis = [&] {
    other = next();
    if (other == nullptr) return BulkRead::Failed;
    if (other->type != REDIS_REPLY_STRING || other->len != want) return BulkRead::Other;
    for (std::size_t at = 0; at < want;) {  // (a reply hiredis had read ahead: copied once)
      const std::span<std::byte> to = scatter(at);
      std::memcpy(to.data(), other->str + at, to.size());
      at += to.size();
    }
    other.reset();
    return BulkRead::Filled;
  };
  redisReader* r = c_->reader;
  // hiredis holds bytes of its own (replies read ahead) or a reply half parsed: it goes on.
  if (c_->err != 0 || r->ridx != -1 || r->pos < r->len) return through_hiredis();
  for (int sent = 0; !sent;)
    if (redisBufferWrite(c_, &sent) == REDIS_ERR) {
      fail(c_->errstr);
      return BulkRead::Failed;
    }
  // The reply's first line, "$<bytes>\r\n" for a bulk string, and whatever came with it.
  std::array<char, 64> line{};
  std::size_t n = 0, eol = std::string_view::npos;
  while (eol == std::string_view::npos && n < line.size()) {
    const std::size_t had = n;
    const ssize_t got = ::recv(c_->fd, line.data() + n, line.size() - n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      fail(recv_error(got));
      return BulkRead::Failed;
    }
    n += static_cast<std::size_t>(got);
    eol = std::string_view(line.data(), n).find("\r\n", had == 0 ? 0 : had - 1);
  }
  std::size_t len = 0;
  const bool bulk = eol != std::string_view::npos && line[0] == '$' &&
                    std::from_chars(line.data() + 1, line.data() + eol, len).ptr == line.data() + eol;
  if (!bulk || len != want) {  // hiredis parses it from what was read
    redisReaderFeed(r, line.data(), n);
    return through_hiredis();
  }
  // The value's bytes that came with the line, then the rest straight from the socket.
  const std::string_view after(line.data() + eol + 2, n - eol - 2);
  std::size_t at = 0;
  while (at < std::min(after.size(), want)) {
    const std::span<std::byte> to = scatter(at);
    const std::size_t k = std::min(to.size(), std::min(after.size(), want) - at);
    std::memcpy(to.data(), after.data() + at, k);
    at += k;
  }
  while (at < want) {
    const std::span<std::byte> to = scatter(at);
    if (!read_exactly(to)) return BulkRead::Failed;
    at += to.size();
  }
  // Its "\r\n" (some or all of it may have come with the line, and replies after it too).
  std::array<char, 2> crlf{};
  const std::string_view rest = after.size() > want ? after.substr(want) : std::string_view{};
  const std::size_t have = std::min<std::size_t>(rest.size(), 2);
  if (have > 0) std::memcpy(crlf.data(), rest.data(), have);
  if (have < 2 && !read_exactly(std::as_writable_bytes(std::span(crlf).subspan(have)))) return BulkRead::Failed;
  if (crlf[0] != '\r' || crlf[1] != '\n') {
    fail("protocol error after a bulk reply");
    return BulkRead::Failed;
  }
  if (rest.size() > 2) redisReaderFeed(r, rest.data() + 2, rest.size() - 2);
  return BulkRead::Filled;
}

bool RedisConnection::broken() const {
  return c_->err != 0;
}

std::string RedisConnection::error() const {
  return error_.empty() ? std::string(c_->errstr) : error_;
}

bool reply_is_ok(const redisReply* r) {
  return r != nullptr && r->type == REDIS_REPLY_STATUS && std::string_view(r->str, r->len) == "OK";
}

bool reply_is_error(const redisReply* r) {
  return r != nullptr && r->type == REDIS_REPLY_ERROR;
}

std::string_view reply_string(const redisReply* r) {
  if (r == nullptr || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_ERROR))
    return {};
  return {r->str, r->len};
}

long long reply_integer(const redisReply* r, long long otherwise) {
  return r != nullptr && r->type == REDIS_REPLY_INTEGER ? r->integer : otherwise;
}

}  // namespace akv
