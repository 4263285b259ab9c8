#include "kv/redis_client.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <charconv>
#include <cstring>

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

// Where next_into() wants the bulk string it waits for (null: into the reply, as hiredis does).
// A connection is used by one thread at a time, so the thread's pointer is that connection's.
thread_local std::vector<std::byte>* t_sink = nullptr;
const redisReplyObjectFunctions* g_hiredis_functions = nullptr;  // hiredis's own (set once)

void* create_string(const redisReadTask* task, char* str, std::size_t len) {
  if (t_sink != nullptr && task->parent == nullptr && task->type == REDIS_REPLY_STRING) {
    t_sink->resize(len);
    std::memcpy(t_sink->data(), str, len);
    len = 0;
  }
  return g_hiredis_functions->createString(task, str, len);
}

// hiredis's reply functions with create_string in front of its createString.
redisReplyObjectFunctions* sink_functions(const redisReplyObjectFunctions* hiredis_functions) {
  static redisReplyObjectFunctions functions = [&] {
    g_hiredis_functions = hiredis_functions;
    redisReplyObjectFunctions f = *hiredis_functions;
    f.createString = create_string;
    return f;
  }();
  return &functions;
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
                std::string(flag) + ": TLS (rediss://) is not supported by this build's hiredis; reach Redis through a "
                                    "local TLS tunnel (docs/fleet.md)");
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
  // Keep the reply buffer between replies: by default hiredis frees it once more than 16 KiB
  // sit unused, so each block-sized reply regrew it from 16 KiB (copies and page faults).
  c->reader->maxbuf = 0;
  c->reader->fn = sink_functions(c->reader->fn);
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

RedisReply RedisConnection::next_into(std::vector<std::byte>& into) {
  t_sink = &into;
  RedisReply r = next();
  t_sink = nullptr;
  return r;
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
