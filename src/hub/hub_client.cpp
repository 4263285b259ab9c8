#include "hub/hub_client.h"

#include <httplib.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/log.h"

namespace akv {

namespace {

namespace fs = std::filesystem;

constexpr int kMaxRedirects = 10;
constexpr std::size_t kMaxErrorBody = 4096;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

bool env_true(const char* name) {
  const std::string v = env_or(name, "");
  return v == "1" || v == "ON" || v == "on" || v == "true" || v == "TRUE" || v == "YES" || v == "yes";
}

// scheme://host[:port] and the path after it ("" or "/prefix").
struct Url {
  std::string origin;
  std::string path;
};

Url split_url(const std::string& url) {
  const std::size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos || (url.compare(0, scheme_end, "http") != 0 && url.compare(0, scheme_end, "https") != 0))
    throw Error(ErrorKind::InvalidArgument, "'" + url + "' is not an http:// or https:// URL (HF_ENDPOINT or a redirect)");
  const std::size_t path_start = url.find('/', scheme_end + 3);
  if (path_start == std::string::npos) return {url, ""};
  return {url.substr(0, path_start), url.substr(path_start)};
}

// One HTTP exchange's outcome.
struct Reply {
  httplib::Error error = httplib::Error::Success;
  int status = 0;
  httplib::Headers headers;
  std::string error_body;  // the start of a non-2xx body
  int write_errno = 0;     // the body sink failed (errno)
};

std::string header(const Reply& r, const char* name) {
  const auto it = r.headers.find(name);
  return it == r.headers.end() ? "" : it->second;
}

// GET `url`, following redirects (the token goes only to the endpoint's own origin, as
// huggingface_hub does: a CDN's signed URL refuses it). `sink` receives a 2xx body; returning
// false stops the transfer with `write_errno`.
Reply get(const HubSettings& s, std::string url, httplib::Headers headers,
          const std::function<bool(int status, const char*, std::size_t)>& sink) {
  const std::string endpoint_origin = split_url(s.endpoint).origin;
  Reply r;
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    const Url u = split_url(url);
    httplib::Client client(u.origin);
    client.set_connection_timeout(10);
    client.set_read_timeout(30);
    client.set_follow_location(false);
    httplib::Headers h = headers;
    if (!s.token.empty() && u.origin == endpoint_origin) h.emplace("Authorization", "Bearer " + s.token);
    r = Reply{};
    const httplib::Result res = client.Get(
        u.path.empty() ? "/" : u.path, h,
        [&r](const httplib::Response& resp) {
          r.status = resp.status;
          r.headers = resp.headers;
          return true;
        },
        [&r, &sink](const char* data, std::size_t n) {
          if (r.status >= 200 && r.status < 300) {
            if (sink(r.status, data, n)) return true;
            r.write_errno = errno != 0 ? errno : EIO;
            return false;
          }
          if (r.error_body.size() < kMaxErrorBody) r.error_body.append(data, std::min(n, kMaxErrorBody - r.error_body.size()));
          return true;
        });
    r.error = res.error();
    if (r.error != httplib::Error::Success || r.status < 300 || r.status >= 400) return r;
    const std::string location = header(r, "Location");
    if (location.empty()) return r;
    url = location.starts_with("/") ? u.origin + location : location;
  }
  r.error = httplib::Error::ExceedRedirectCount;
  return r;
}

// Maps a refusal to an Error that says what to do, as huggingface_hub reads X-Error-Code.
[[noreturn]] void throw_refusal(const HubSettings& s, const Reply& r, const std::string& repo_id, const std::string& what) {
  const std::string code = header(r, "X-Error-Code");
  const std::string page = s.endpoint + "/" + repo_id;
  if (code == "GatedRepo")
    throw Error(ErrorKind::InvalidArgument,
                repo_id + " is a gated model: accept its terms at " + page + " and " +
                    (s.token.empty() ? "set HF_TOKEN to an access token of that account"
                                     : "check that the account of HF_TOKEN was granted access"));
  if (code == "RevisionNotFound")
    throw Error(ErrorKind::NotFound, repo_id + ": no revision " + what + " (check the @REVISION: a branch, tag or commit)");
  if (code == "EntryNotFound") throw Error(ErrorKind::NotFound, repo_id + ": no file " + what);
  if (r.status == 401 || r.status == 403) {
    if (s.token.empty())
      throw Error(ErrorKind::NotFound, repo_id + " was not found, or is private: check the id at " + page +
                                           ", or set HF_TOKEN for a private repository");
    throw Error(ErrorKind::InvalidArgument, repo_id + ": the hub refused HF_TOKEN (" + std::to_string(r.status) +
                                                "): check that the token is valid and can read " + page);
  }
  if (r.status == 404)
    throw Error(ErrorKind::NotFound, repo_id + " was not found at " + s.endpoint + ": check the id (ORG/REPO) at " + page);
  throw Error(ErrorKind::Io, repo_id + ": " + what + ": the hub answered " + std::to_string(r.status) + " " +
                                 r.error_body.substr(0, 200));
}

bool retryable(const Reply& r) {
  return r.error != httplib::Error::Success || r.status == 429 || r.status >= 500;
}

std::string describe(const HubSettings& s, const Reply& r) {
  if (r.error != httplib::Error::Success) return httplib::to_string(r.error) + " (" + s.endpoint + ")";
  return "HTTP " + std::to_string(r.status);
}

[[noreturn]] void throw_write_error(const std::string& dest, int err) {
  if (err == ENOSPC || err == EDQUOT)
    throw Error(ErrorKind::ResourceExhausted, dest + ": the disk is full: free space there, or set HF_HOME (or "
                                                     "HF_HUB_CACHE) to a disk with room for the model");
  throw Error(ErrorKind::Io, dest + ": cannot write: " + std::strerror(err));
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

std::string read_token_file(const std::string& hf_home) {
  std::ifstream in(hf_home + "/token");
  std::string token;
  if (in) std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  return token;
}

}  // namespace

HubSettings hub_settings_from_env() {
  HubSettings s;
  s.endpoint = env_or("HF_ENDPOINT", s.endpoint);
  while (s.endpoint.ends_with("/")) s.endpoint.pop_back();
  split_url(s.endpoint);  // validates
  const std::string home = env_or("HOME", "/root");
  const std::string hf_home = env_or("HF_HOME", env_or("XDG_CACHE_HOME", home + "/.cache") + "/huggingface");
  s.token = env_or("HF_TOKEN", env_or("HUGGING_FACE_HUB_TOKEN", ""));
  if (s.token.empty()) s.token = read_token_file(hf_home);
  s.cache_dir = env_or("HF_HUB_CACHE", env_or("HUGGINGFACE_HUB_CACHE", hf_home + "/hub"));
  s.offline = env_true("HF_HUB_OFFLINE");
  return s;
}

const RepoFile* RepoInfo::find(const std::string& path) const {
  for (const RepoFile& f : files)
    if (f.path == path) return &f;
  return nullptr;
}

std::string url_encode_path(const std::string& path) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (const char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

RepoInfo HubClient::model_info(const std::string& repo_id, const std::string& revision) const {
  std::string rev = url_encode_path(revision);  // a branch with '/' is one segment (%2F)
  for (std::size_t i = rev.find('/'); i != std::string::npos; i = rev.find('/', i)) rev.replace(i, 1, "%2F");
  const std::string url = s_.endpoint + "/api/models/" + repo_id + "/revision/" + rev + "?blobs=true";
  std::string body;
  Reply r;
  for (int attempt = 1;; ++attempt) {
    body.clear();
    r = get(s_, url, {{"Accept-Encoding", "identity"}}, [&body](int, const char* d, std::size_t n) {
      body.append(d, n);
      return true;
    });
    if (!retryable(r) || attempt >= s_.max_attempts) break;
    log_warn("{}: listing files failed ({}), retrying", repo_id, describe(s_, r));
    sleep_ms(s_.retry_delay_ms << (attempt - 1));
  }
  if (r.error != httplib::Error::Success)
    throw Error(ErrorKind::Io, repo_id + ": cannot reach the hub: " + describe(s_, r) +
                                   " (set HF_ENDPOINT for a mirror, or HF_HUB_OFFLINE=1 to use the cache only)");
  if (r.status != 200) throw_refusal(s_, r, repo_id, "'" + revision + "'");
  RepoInfo info;
  try {
    const nlohmann::json j = nlohmann::json::parse(body);
    info.commit = j.at("sha").get<std::string>();
    for (const auto& f : j.at("siblings")) {
      RepoFile file;
      file.path = f.at("rfilename").get<std::string>();
      if (f.contains("size") && f["size"].is_number_integer()) file.size = f["size"].get<std::int64_t>();
      if (f.contains("blobId") && f["blobId"].is_string()) file.blob_id = f["blobId"].get<std::string>();
      if (f.contains("lfs") && f["lfs"].is_object()) {
        file.sha256 = f["lfs"].at("sha256").get<std::string>();
        if (f["lfs"].contains("size")) file.size = f["lfs"]["size"].get<std::int64_t>();
      }
      info.files.push_back(std::move(file));
    }
  } catch (const std::exception& e) {
    throw Error(ErrorKind::BadFormat, url + ": not a model listing: " + e.what());
  }
  if (info.commit.size() != 40) throw Error(ErrorKind::BadFormat, url + ": 'sha' is not a commit hash");
  for (const RepoFile& f : info.files)
    if (f.path.empty() || f.path.front() == '/' || f.path.find("..") != std::string::npos ||
        (f.cache_blob().find('/') != std::string::npos) || f.cache_blob().find("..") != std::string::npos)
      throw Error(ErrorKind::BadFormat, url + ": unsafe file name or blob id '" + f.path + "'");
  return info;
}

void HubClient::download(const std::string& repo_id, const std::string& commit, const RepoFile& file,
                         const std::string& dest, const std::function<void(std::int64_t)>& on_bytes) const {
  const std::string url = s_.endpoint + "/" + repo_id + "/resolve/" + commit + "/" + url_encode_path(file.path);
  std::string last_failure;
  for (int attempt = 1; attempt <= s_.max_attempts; ++attempt) {
    std::error_code ec;
    std::int64_t have = 0;
    if (fs::exists(dest, ec)) {
      const std::uintmax_t size = fs::file_size(dest, ec);
      if (!ec) have = static_cast<std::int64_t>(size);
    }
    if (file.size >= 0 && have == file.size) return;
    if (file.size >= 0 && have > file.size) {  // a leftover longer than the file: start over
      fs::remove(dest, ec);
      on_bytes(-have);
      have = 0;
    }
    httplib::Headers headers{{"Accept-Encoding", "identity"}};
    if (have > 0) headers.emplace("Range", "bytes=" + std::to_string(have) + "-");
    std::FILE* out = nullptr;
    const Reply r = get(s_, url, headers, [&](int status, const char* d, std::size_t n) {
      if (out == nullptr) {
        if (status == 200 && have > 0) {  // the server ignored Range: the whole file again
          on_bytes(-have);
          have = 0;
        }
        errno = 0;
        out = std::fopen(dest.c_str(), status == 206 ? "ab" : "wb");
        if (out == nullptr) return false;
      }
      errno = 0;
      if (std::fwrite(d, 1, n, out) != n) return false;
      have += static_cast<std::int64_t>(n);
      on_bytes(static_cast<std::int64_t>(n));
      return true;
    });
    errno = 0;
    if (out != nullptr && std::fclose(out) != 0 && r.write_errno == 0) throw_write_error(dest, errno != 0 ? errno : EIO);
    if (r.write_errno != 0) throw_write_error(dest, r.write_errno);
    if (r.error == httplib::Error::Success && r.status == 200 && out == nullptr) {  // an empty file
      std::FILE* empty = std::fopen(dest.c_str(), "wb");
      if (empty == nullptr || std::fclose(empty) != 0) throw Error(ErrorKind::Io, dest + ": cannot create: " + std::strerror(errno));
    }
    if (r.error == httplib::Error::Success && r.status == 416 && file.size >= 0) {
      fs::remove(dest, ec);  // the range starts past the end: ours is not the file; start over
      on_bytes(-have);
      last_failure = "HTTP 416";
      continue;
    }
    if (!retryable(r) && r.status != 200 && r.status != 206) throw_refusal(s_, r, repo_id, "'" + file.path + "'");
    if (!retryable(r)) {
      if (file.size < 0 || have == file.size) return;
      if (have > file.size)
        throw Error(ErrorKind::BadFormat, repo_id + "/" + file.path + ": the hub sent " + std::to_string(have) +
                                              " bytes, the listing says " + std::to_string(file.size));
      last_failure = "the connection closed after " + std::to_string(have) + " of " + std::to_string(file.size) + " bytes";
    } else {
      last_failure = describe(s_, r);
    }
    if (attempt < s_.max_attempts) {
      log_warn("{}: {}: {}; resuming (attempt {} of {})", repo_id, file.path, last_failure, attempt + 1, s_.max_attempts);
      sleep_ms(s_.retry_delay_ms << (attempt - 1));
    }
  }
  throw Error(ErrorKind::Io, repo_id + "/" + file.path + ": download failed after " + std::to_string(s_.max_attempts) +
                                 " attempts: " + last_failure + " (run it again to resume)");
}

}  // namespace akv
