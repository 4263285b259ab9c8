// Agent memory: how soon a returning agent gets its first token when its KV is cold (prefill),
// hot (device), warm in the host tier or warm on disk after a restart; N agents rotating under a
// device budget; restore bandwidth against disk-read and memcpy bandwidth measured in the same
// run (docs/perf/agent_memory.md). TTFT = submit() -> first Token event, through the Engine API.
//   agent_memory_bench <model_dir> [--backend cpu|reference|cuda] [--lengths 1024,4096,8192]
//                      [--runs 3] [--codec native|bf16|int8|int4] [--host-mb N] [--kv-dir DIR]
//                      [--agents 8]
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include "app/backend_factory.h"
#include "base/check.h"
#include "base/error.h"
#include "engine/engine.h"
#include "kv/agent_index.h"
#include "kv/disk_format.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "kv/model_fingerprint.h"

namespace akv {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Ids = std::vector<std::int32_t>;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Options {
  std::string model_dir, backend = "cpu", codec = "native", kv_dir, lengths = "1024,4096,8192";
  int threads = 0, runs = 3, block_size = 16, budget = 512, chunk = 512, gen = 4;
  int n_agents = 8, system_tokens = 512, agent_tokens = 2048, turn_tokens = 32, device_agents = 3;
  std::int64_t host_mb = -1;  // host tier budget; -1: three of the longest agents, 0: none
  bool keep = false;
};

Ids random_ids(std::uint32_t seed, std::size_t n, std::int64_t vocab) {
  std::mt19937 rng(seed);
  Ids ids(n);
  for (auto& t : ids) t = std::uniform_int_distribution<std::int32_t>(3, static_cast<std::int32_t>(vocab) - 1)(rng);
  return ids;
}

// One request as a streaming client sees it.
struct Outcome {
  double ttft_ms = 0.0;
  std::int32_t cached_tokens = 0;  // Started's usage: prompt tokens whose KV was found (any tier)
  Ids tokens;
  double submit_s = 0.0, first_s = 0.0;  // steady (CLOCK_MONOTONIC) seconds: profiler windows
};

// Submits `r` (greedy) and waits for Finished.
Outcome run_request(Engine& engine, Ids prompt, const std::string& agent, int max_tokens) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    Outcome out;
    Clock::time_point first;
    bool done = false, error = false;
  };
  auto s = std::make_shared<State>();
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.agent = agent;
  r.max_tokens = max_tokens;
  const auto t0 = Clock::now();
  engine.submit(std::move(r), [s](const EngineEvent& e) {
    const auto now = Clock::now();
    std::lock_guard lock(s->mu);
    if (e.kind == EventKind::Started) s->out.cached_tokens = e.usage.cached_tokens;
    if (e.kind == EventKind::Token) {
      if (s->out.tokens.empty()) s->first = now;
      s->out.tokens.push_back(e.token);
    }
    if (e.kind == EventKind::Error) s->error = true;
    if (e.kind == EventKind::Finished) {
      s->done = true;
      s->cv.notify_all();
    }
  });
  std::unique_lock lock(s->mu);
  s->cv.wait(lock, [&] { return s->done; });
  AKV_CHECK(!s->error && !s->out.tokens.empty(), "a benchmark request failed");
  s->out.ttft_ms = ms_between(t0, s->first);
  s->out.submit_s = std::chrono::duration<double>(t0.time_since_epoch()).count();
  s->out.first_s = std::chrono::duration<double>(s->first.time_since_epoch()).count();
  return s->out;
}

// What a server process holds: a model, an agent index, the host tier (`host_bytes` > 0), the
// disk tier on `kv_dir` and an engine using them. Destroying it and building another on the same
// directory is a restart (device and host memory start empty).
class Served {
 public:
  Served(const Options& o, Backend& backend, std::int32_t n_blocks, const std::string& kv_dir) {
    auto model = load_model(o.model_dir, backend);
    const SpillCodec codec = *find_spill_codec(o.codec);
    const KvLayout layout = kv_layout_for(model->config(), n_blocks, o.block_size, backend.preferred_kv_dtype());
    DiskStoreOptions d;
    d.dir = kv_dir;
    d.fingerprint = model_fingerprint({.model_dir = o.model_dir, .chat_template = "", .kv = layout, .codec = codec});
    d.codec = codec;
    d.shape = block_shape_of(layout);
    d.block_size = o.block_size;
    d.max_queue_bytes = std::size_t{2} << 30;  // an 8K prompt's blocks fit: none dropped
    disk_ = DiskStore::open_or_throw(std::move(d));
    for (AgentRecord& r : disk_->take_loaded_manifests()) agents_.load(std::move(r));
    if (o.host_mb > 0) {
      HostStoreOptions h;
      h.max_bytes = static_cast<std::size_t>(o.host_mb) << 20;
      h.codec = codec;
      h.shape = block_shape_of(layout);
      h.block_size = o.block_size;
      h.on_disk = [disk = disk_.get()](const Hash128& key) { return disk->has(key); };
      h.alloc = [&backend](std::size_t bytes) { return backend.alloc_host(bytes); };  // as the server does
      host_ = std::make_unique<HostStore>(std::move(h));
    }
    EngineConfig ec;
    ec.block_size = o.block_size;
    ec.n_blocks = n_blocks;
    ec.kv_dtype = backend.preferred_kv_dtype();
    ec.scheduler.max_batch_tokens = o.budget;
    ec.scheduler.max_prefill_chunk = o.chunk;
    ec.agents = &agents_;
    ec.host = host_.get();
    ec.disk = disk_.get();
    engine_ = std::make_unique<Engine>(std::move(model), backend, ec);
  }
  Engine& engine() { return *engine_; }
  DiskStore& disk() { return *disk_; }
  HostStore* host() { return host_.get(); }
  std::vector<Hash128> chain(const std::string& agent) const {
    const auto r = agents_.find("", agent);
    AKV_CHECK(r.has_value(), "the agent was not recorded");
    return r->chain;
  }

 private:
  AgentIndex agents_;
  std::unique_ptr<DiskStore> disk_;
  std::unique_ptr<HostStore> host_;
  std::unique_ptr<Engine> engine_;  // last: destroyed first
};

// --- files, page cache and bandwidths ------------------------------------------------------

std::vector<std::string> block_paths(const std::string& kv_dir, std::span<const Hash128> keys) {
  std::vector<std::string> out;
  for (const Hash128& k : keys) out.push_back(kv_dir + "/blocks/" + k.hex() + ".kvb");
  return out;
}

// Asks the kernel to drop the files' cached pages (they were fsynced, so they are clean): the
// next read comes from the disk.
void drop_page_cache(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Fraction of the files' pages in the page cache (mincore), to check that a drop worked.
double cached_fraction(const std::vector<std::string>& paths) {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::size_t resident = 0, total = 0;
  std::vector<unsigned char> vec;
  for (const std::string& p : paths) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      const auto size = static_cast<std::size_t>(st.st_size);
      void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) {
        vec.resize((size + page - 1) / page);
        if (::mincore(m, size, vec.data()) == 0)
          for (unsigned char c : vec) resident += c & 1u;
        total += vec.size();
        ::munmap(m, size);
      }
    }
    ::close(fd);
  }
  return total == 0 ? 0.0 : static_cast<double>(resident) / static_cast<double>(total);
}

// Reads one whole file into `buf` (resized, not zeroed past what is read); false on error.
bool read_file(const std::string& path, std::vector<std::byte>& buf) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0;
  if (ok) {
    buf.resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < buf.size()) {
      const ssize_t n = ::pread(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ok = done == buf.size();
  }
  ::close(fd);
  return ok;
}

struct Bandwidth {
  double seconds = 0.0;
  std::int64_t bytes = 0;
  double gb_s() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0; }
};

// Sequential read of the files, one after another, as the restore reads them.
Bandwidth read_files(const std::vector<std::string>& paths) {
  std::vector<std::byte> buf;
  Bandwidth b;
  const auto t0 = Clock::now();
  for (const std::string& p : paths) {
    AKV_CHECK(read_file(p, buf), "cannot read a block file");
    b.bytes += static_cast<std::int64_t>(buf.size());
  }
  b.seconds = ms_between(t0, Clock::now()) / 1e3;
  return b;
}

// Single-thread memcpy of `bytes`, median of `reps` (after one touch of both buffers).
Bandwidth memcpy_bandwidth(std::size_t bytes, int reps) {
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes, std::byte{0});
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    src[static_cast<std::size_t>(i) % bytes] = std::byte(i);
    const auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    s.push_back(ms_between(t0, Clock::now()) / 1e3);
  }
  AKV_CHECK(dst[0] == src[0], "memcpy");
  return {.seconds = median(s), .bytes = static_cast<std::int64_t>(bytes)};
}

// --- restore anatomy: the steps of a disk restore, timed one by one --------------------------

struct Anatomy {
  std::int32_t n_blocks = 0;
  std::int64_t file_bytes = 0;
  double drop_cached = 0.0;  // fraction of the files' pages still cached after the drop
  double read_ms = 0.0, checksum_ms = 0.0, decode_ms = 0.0, write_ms = 0.0;
  double load_write_ms = 0.0;  // DiskStore::load (read, verify, decode) + write_kv_block
  Bandwidth disk_read, cached_read;
};

// Times, on the prompt's full blocks (all but the last token, as match restores them): reads
// with the page cache dropped, checksums, decodes and device writes step by step; then
// DiskStore::load + write_kv_block end to end; then sequential reads, cold and cached.
Anatomy restore_anatomy(const Options& o, Backend& backend, const std::string& kv_dir, const Ids& prompt,
                        std::span<const Hash128> chain) {
  auto model = load_model(o.model_dir, backend);
  const std::int32_t bs = o.block_size;
  const auto n = static_cast<std::int32_t>(std::min<std::size_t>(chain.size(), (prompt.size() - 1) / bs));
  const SpillCodec codec = *find_spill_codec(o.codec);
  const KvLayout layout = kv_layout_for(model->config(), n, bs, backend.preferred_kv_dtype());
  const BlockShape shape = block_shape_of(layout);
  DiskStoreOptions d;
  d.dir = kv_dir;
  d.fingerprint = model_fingerprint({.model_dir = o.model_dir, .chat_template = "", .kv = kv_layout_for(model->config(), 1, bs, backend.preferred_kv_dtype()), .codec = codec});
  d.codec = codec;
  d.shape = shape;
  d.block_size = bs;
  auto disk = DiskStore::open_or_throw(std::move(d));
  KvStorage kv = backend.alloc_kv(layout);
  const std::vector<std::string> paths = block_paths(kv_dir, chain.subspan(0, static_cast<std::size_t>(n)));

  Anatomy a;
  a.n_blocks = n;
  std::vector<std::byte> file, raw(shape.raw_bytes());
  drop_page_cache(paths);
  a.drop_cached = cached_fraction(paths);
  for (std::int32_t i = 0; i < n; ++i) {
    auto t = Clock::now();
    AKV_CHECK(read_file(paths[i], file), "cannot read a block file");
    auto t1 = Clock::now();
    a.read_ms += ms_between(t, t1);
    a.file_bytes += static_cast<std::int64_t>(file.size());
    const std::span<const std::byte> body = std::span<const std::byte>(file).subspan(kBlockHeaderBytes);
    const std::uint64_t sum = payload_checksum(body);
    t = Clock::now();
    a.checksum_ms += ms_between(t1, t);
    AKV_CHECK(sum != 0, "checksum");
    decode_block(codec, shape, body, raw);
    t1 = Clock::now();
    a.decode_ms += ms_between(t, t1);
    backend.write_kv_block(kv, i, raw);
    a.write_ms += ms_between(t1, Clock::now());
  }

  drop_page_cache(paths);
  const BlockKeyer& keyer = disk->keyer();
  Hash128 parent = keyer.root("");
  const auto t0 = Clock::now();
  for (std::int32_t i = 0; i < n; ++i) {
    const std::span<const std::int32_t> tokens(prompt.data() + static_cast<std::size_t>(i) * bs, bs);
    AKV_CHECK(disk->load(chain[i], parent, keyer.tokens_hash(tokens), raw), "a chain block did not load");
    backend.write_kv_block(kv, i, raw);
    parent = chain[i];
  }
  a.load_write_ms = ms_between(t0, Clock::now());

  drop_page_cache(paths);
  a.disk_read = read_files(paths);
  a.cached_read = read_files(paths);
  return a;
}

// --- phase 1: one agent at a time, cold / hot / warm ---------------------------------------

// A request shorter than a block (nothing cached, no pool use) that touches every layer's
// weights once, so the first measured request after a (re)start does not pay for page faults.
void warm_up(Engine& engine, std::int64_t vocab) {
  const std::int32_t n = 8;
  run_request(engine, random_ids(99, static_cast<std::size_t>(n), vocab), "", 1);
}

struct LengthRow {
  std::int32_t tokens = 0;
  std::vector<double> cold, hot, warm_host, warm_disk, warm_disk_cached;
  std::vector<double> cached_tokens_host, cached_tokens_disk;
  std::int64_t host_hits = 0, disk_loaded = 0;  // blocks restored by the warm runs, all runs
  double page_cached_after_drop = 0.0;           // max over runs
  // Every warm run generated what its cold run did: the restored KV is the cold run's, and both
  // compute the prompt's last block through a multi-token (prefill) step ...
  bool same_tokens = true;
  // ... and every hot run what its cold run did. The hot run computes only the last token (its
  // last block is copied on write), a one-row step: on the CPU backends that is the same
  // arithmetic; on CUDA with bf16 weights prefill GEMMs round activations to bf16 and one-row
  // GEMVs do not, which can flip a near-tied greedy token of a random model at long contexts.
  bool hot_equals_cold = true;
  Ids last_prompt;                               // for the restore anatomy
  std::vector<Hash128> last_chain;
};

// The device pool holds about one agent of `n_tokens`, so the next agent's cold prefill pushes
// the previous one out (into the host tier, when there is one). Per run r: cold P_r, hot P_r,
// then warm-from-host P_{r-1} (with a host tier; one more agent runs to push the last one out).
// Then a restart and warm-from-disk of every P_r with the page cache dropped, and another
// restart and the same with the files in the page cache.
LengthRow measure_length(const Options& o, Backend& backend, const std::string& kv_dir, std::int32_t n_tokens,
                         std::int64_t vocab) {
  const std::int32_t bs = o.block_size;
  const std::int32_t n_blocks = (n_tokens + o.gen + bs - 1) / bs + 2;
  LengthRow row;
  row.tokens = n_tokens;
  auto served = std::make_unique<Served>(o, backend, n_blocks, kv_dir);
  warm_up(served->engine(), vocab);
  const bool host = served->host() != nullptr;
  std::vector<Ids> prompts, replies;
  auto agent = [&](std::size_t r) { return fmt::format("agent-{}-{}", n_tokens, r); };
  auto host_hits = [&] { return host ? served->host()->stats().n_hits : 0; };
  const int n_runs = o.runs + (host ? 1 : 0);
  for (int r = 0; r < n_runs; ++r) {
    prompts.push_back(random_ids(static_cast<std::uint32_t>(n_tokens * 100 + r), static_cast<std::size_t>(n_tokens), vocab));
    const Outcome cold = run_request(served->engine(), prompts.back(), agent(prompts.size() - 1), o.gen);
    replies.push_back(cold.tokens);
    served->disk().flush();
    const Outcome hot = run_request(served->engine(), prompts.back(), agent(prompts.size() - 1), o.gen);
    row.cold.push_back(cold.ttft_ms);
    row.hot.push_back(hot.ttft_ms);
    row.hot_equals_cold = row.hot_equals_cold && hot.tokens == cold.tokens;
    fmt::print(stderr, "  {} tokens run {}: cold {:.0f} ms, hot {:.0f} ms; tokens cold {} hot {}\n", n_tokens, r, cold.ttft_ms,
               hot.ttft_ms, fmt::join(cold.tokens, ","), fmt::join(hot.tokens, ","));
    if (host && r > 0) {
      const std::int64_t hits0 = host_hits();
      const Outcome warm = run_request(served->engine(), prompts[r - 1], agent(r - 1), o.gen);
      row.host_hits += host_hits() - hits0;
      row.warm_host.push_back(warm.ttft_ms);
      row.cached_tokens_host.push_back(warm.cached_tokens);
      row.same_tokens = row.same_tokens && warm.tokens == replies[r - 1];
      fmt::print(stderr, "  {} tokens run {}: warm from host {:.0f} ms ({} cached tokens) [{:.3f}, {:.3f}]\n", n_tokens,
                 r - 1, warm.ttft_ms, warm.cached_tokens, warm.submit_s, warm.first_s);
    }
  }
  served->disk().flush();
  AKV_CHECK(served->disk().stats().n_dropped == 0, "blocks were dropped from the disk queue");

  for (int pass = 0; pass < 2; ++pass) {  // 0: page cache dropped, 1: files cached
    served.reset();
    served = std::make_unique<Served>(o, backend, n_blocks, kv_dir);
    warm_up(served->engine(), vocab);
    for (int r = 0; r < o.runs; ++r) {
      const std::vector<Hash128> chain = served->chain(agent(r));
      const std::vector<std::string> paths = block_paths(kv_dir, chain);
      if (pass == 0) {
        drop_page_cache(paths);
        row.page_cached_after_drop = std::max(row.page_cached_after_drop, cached_fraction(paths));
      }
      const std::int64_t loaded0 = served->disk().stats().n_loaded;
      const Outcome warm = run_request(served->engine(), prompts[r], agent(r), o.gen);
      row.same_tokens = row.same_tokens && warm.tokens == replies[r];
      if (pass == 0) {
        row.disk_loaded += served->disk().stats().n_loaded - loaded0;
        row.warm_disk.push_back(warm.ttft_ms);
        row.cached_tokens_disk.push_back(warm.cached_tokens);
      } else {
        row.warm_disk_cached.push_back(warm.ttft_ms);
      }
      fmt::print(stderr, "  {} tokens run {}: warm from disk{} {:.0f} ms ({} cached tokens; tokens {}) [{:.3f}, {:.3f}]\n",
                 n_tokens, r, pass == 0 ? "" : " (page cache)", warm.ttft_ms, warm.cached_tokens, fmt::join(warm.tokens, ","),
                 warm.submit_s,
                 warm.first_s);
      row.last_prompt = prompts[r];
      row.last_chain = chain;
    }
    served->disk().flush();
  }
  return row;
}

// --- phase 2: N agents rotating under a device budget --------------------------------------

struct AgentsResult {
  std::int32_t n_blocks = 0;
  std::vector<double> first_ttft, return_ttft, return_cached;
  std::int64_t disk_loaded = 0, host_hits = 0;
  std::int32_t prompt_tokens = 0, return_tokens = 0;
};

// N agents share a system prefix and have distinct tasks; the device pool holds about
// `device_agents` of them. Round 1: each agent's first request. Round 2: each returns with its
// prompt, its reply and a new user turn; by then the later agents have pushed its blocks out.
AgentsResult measure_agents(const Options& o, Backend& backend, const std::string& kv_dir, std::int64_t vocab) {
  const std::int32_t bs = o.block_size;
  const std::int32_t own = o.agent_tokens - o.system_tokens + o.gen + o.turn_tokens;
  AgentsResult res;
  res.n_blocks = (o.system_tokens + bs - 1) / bs + o.device_agents * ((own + bs - 1) / bs + 1);
  Served served(o, backend, res.n_blocks, kv_dir);
  const Ids system = random_ids(7, static_cast<std::size_t>(o.system_tokens), vocab);
  std::vector<Ids> next_prompt(static_cast<std::size_t>(o.n_agents));
  for (int a = 0; a < o.n_agents; ++a) {
    Ids p = system;
    const Ids task = random_ids(static_cast<std::uint32_t>(1000 + a), static_cast<std::size_t>(o.agent_tokens - o.system_tokens), vocab);
    p.insert(p.end(), task.begin(), task.end());
    res.prompt_tokens = static_cast<std::int32_t>(p.size());
    const Outcome out = run_request(served.engine(), p, fmt::format("agent-{}", a), o.gen);
    res.first_ttft.push_back(out.ttft_ms);
    p.insert(p.end(), out.tokens.begin(), out.tokens.end());
    const Ids turn = random_ids(static_cast<std::uint32_t>(2000 + a), static_cast<std::size_t>(o.turn_tokens), vocab);
    p.insert(p.end(), turn.begin(), turn.end());
    next_prompt[static_cast<std::size_t>(a)] = std::move(p);
  }
  served.disk().flush();
  const std::int64_t loaded0 = served.disk().stats().n_loaded;
  const std::int64_t hits0 = served.host() != nullptr ? served.host()->stats().n_hits : 0;
  for (int a = 0; a < o.n_agents; ++a) {
    const Ids& p = next_prompt[static_cast<std::size_t>(a)];
    res.return_tokens = static_cast<std::int32_t>(p.size());
    const Outcome out = run_request(served.engine(), p, fmt::format("agent-{}", a), o.gen);
    res.return_ttft.push_back(out.ttft_ms);
    res.return_cached.push_back(out.cached_tokens);
  }
  res.disk_loaded = served.disk().stats().n_loaded - loaded0;
  res.host_hits = served.host() != nullptr ? served.host()->stats().n_hits - hits0 : 0;
  return res;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// Bytes of one block in the host tier (encoded) and as a disk file (header + encoded).
struct BlockBytes {
  std::int64_t encoded = 0, file = 0;
};

void print_length_report(const Options& o, const std::vector<LengthRow>& rows, const Anatomy& an, const Bandwidth& mem,
                         const BlockBytes& bytes) {
  fmt::print("\n## TTFT by prompt length (ms, median of {} runs)\n", o.runs);
  fmt::print("| prompt tokens | cold | hot | warm-from-host | warm-from-disk | warm-from-disk, files in page cache | "
             "cold / warm-disk | warm tokens = cold | hot tokens = cold |\n|---|---|---|---|---|---|---|---|---|\n");
  auto cell = [](const std::vector<double>& v) { return v.empty() ? std::string("not measured") : fmt::format("{:.0f}", median(v)); };
  for (const LengthRow& r : rows)
    fmt::print("| {} | {:.0f} | {:.0f} | {} | {:.0f} | {:.0f} | {:.1f}x | {} | {} |\n", r.tokens, median(r.cold),
               median(r.hot), cell(r.warm_host), median(r.warm_disk), median(r.warm_disk_cached),
               median(r.cold) / median(r.warm_disk), r.same_tokens ? "yes" : "NO", r.hot_equals_cold ? "yes" : "no");

  fmt::print("\n## Restore bandwidth: bytes restored per warm request / (warm TTFT - hot TTFT)\n");
  fmt::print("| prompt tokens | from | blocks | MB | restore ms | GB/s | / disk read | / memcpy |\n"
             "|---|---|---|---|---|---|---|---|\n");
  for (const LengthRow& r : rows) {
    auto line = [&](const char* from, std::int64_t blocks, std::int64_t bytes_per_block, const std::vector<double>& warm) {
      if (warm.empty()) return;
      const double ms = median(warm) - median(r.hot);
      const double mb = static_cast<double>(blocks * bytes_per_block) / 1e6;
      const double gbs = ms > 0 ? mb / ms : 0.0;
      fmt::print("| {} | {} | {} | {:.1f} | {:.0f} | {:.2f} | {:.0f}% | {:.0f}% |\n", r.tokens, from, blocks, mb, ms, gbs,
                 100.0 * gbs / an.disk_read.gb_s(), 100.0 * gbs / mem.gb_s());
    };
    const auto runs = static_cast<std::int64_t>(std::max(o.runs, 1));
    line("host", r.host_hits / std::max<std::int64_t>(1, static_cast<std::int64_t>(r.warm_host.size())), bytes.encoded, r.warm_host);
    line("disk", r.disk_loaded / runs, bytes.file, r.warm_disk);
    line("disk, page cache", r.disk_loaded / runs, bytes.file, r.warm_disk_cached);
  }
  for (const LengthRow& r : rows)
    fmt::print("{} tokens, every run (ms): cold {:.0f}; hot {:.0f}; warm-host {:.0f}; warm-disk {:.0f}; warm-disk cached {:.0f}; "
               "cached tokens host {} disk {}; page cache left after the drop {:.0f}%\n",
               r.tokens, fmt::join(r.cold, " "), fmt::join(r.hot, " "), fmt::join(r.warm_host, " "), fmt::join(r.warm_disk, " "),
               fmt::join(r.warm_disk_cached, " "), fmt::join(r.cached_tokens_host, " "), fmt::join(r.cached_tokens_disk, " "),
               100.0 * r.page_cached_after_drop);

  fmt::print("\n## Restore of {} blocks ({:.1f} MB of files), step by step (ms)\n", an.n_blocks, an.file_bytes / 1e6);
  fmt::print("| read (page cache dropped) | checksum | decode | write_kv_block | sum | DiskStore::load + write_kv_block |\n"
             "|---|---|---|---|---|---|\n");
  fmt::print("| {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} |\n", an.read_ms, an.checksum_ms, an.decode_ms,
             an.write_ms, an.read_ms + an.checksum_ms + an.decode_ms + an.write_ms, an.load_write_ms);
  fmt::print("page cache left after the drop: {:.0f}%\n", 100.0 * an.drop_cached);
  fmt::print("\n## Bandwidths measured in this run (GB/s)\n| sequential read, page cache dropped | sequential read, "
             "page cache | memcpy (1 thread) |\n|---|---|---|\n| {:.2f} | {:.2f} | {:.2f} |\n",
             an.disk_read.gb_s(), an.cached_read.gb_s(), mem.gb_s());
}

void print_agents_report(const Options& o, const AgentsResult& ag) {
  fmt::print("\n## {} agents, {}-token shared system prefix, device pool {} blocks (about {} agents)\n", o.n_agents,
             o.system_tokens, ag.n_blocks, o.device_agents);
  fmt::print("| round | prompt tokens | TTFT median ms | TTFT max ms | cached tokens (median) |\n|---|---|---|---|---|\n");
  fmt::print("| 1: first request | {} | {:.0f} | {:.0f} | - |\n", ag.prompt_tokens, median(ag.first_ttft),
             *std::max_element(ag.first_ttft.begin(), ag.first_ttft.end()));
  fmt::print("| 2: return (+reply +{} tokens) | {} | {:.0f} | {:.0f} | {:.0f} |\n", o.turn_tokens, ag.return_tokens,
             median(ag.return_ttft), *std::max_element(ag.return_ttft.begin(), ag.return_ttft.end()),
             median(ag.return_cached));
  fmt::print("round 2: {} blocks restored from the host tier, {} from disk; TTFT every agent (ms): {:.0f}\n",
             ag.host_hits, ag.disk_loaded, fmt::join(ag.return_ttft, " "));
}

int run_bench(Options o) {
  if (!find_spill_codec(o.codec)) throw Error(ErrorKind::InvalidArgument, "--codec: unknown codec '" + o.codec + "'");
  std::unique_ptr<Backend> backend = make_backend(o.backend, o.threads);
  const std::string root = (o.kv_dir.empty() ? fs::temp_directory_path().string() : o.kv_dir) +
                           fmt::format("/agent_memory_bench_{}", ::getpid());
  fs::remove_all(root);
  ModelConfig cfg;
  {
    auto model = load_model(o.model_dir, *backend);
    cfg = model->config();
  }
  const std::int32_t bs = o.block_size;
  const SpillCodec codec = *find_spill_codec(o.codec);
  const std::int64_t block_bytes = kv_layout_for(cfg, 1, bs, backend->preferred_kv_dtype()).block_bytes();
  const auto encoded_block = static_cast<std::int64_t>(encoded_bytes(codec, block_shape_of(kv_layout_for(cfg, 1, bs, backend->preferred_kv_dtype()))));
  const std::int64_t file_bytes = static_cast<std::int64_t>(kBlockHeaderBytes) + encoded_block;
  std::vector<std::int32_t> lengths;
  for (int l : parse_list(o.lengths))
    lengths.push_back(static_cast<std::int32_t>(std::min<std::int64_t>(l, cfg.max_position_embeddings - o.gen - 1)));

  fmt::print("model {} ({} layers, {} KV heads x {}, vocab {}, context {}), backend {}, codec {}, block {} tokens "
             "({:.0f} KiB raw, {:.0f} KiB on disk)\n",
             o.model_dir, cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.vocab_size, cfg.max_position_embeddings,
             backend->name(), o.codec, bs, block_bytes / 1024.0, file_bytes / 1024.0);
  fmt::print("kv dir {}; load average at start {}\n", root, load_average());

  const Bandwidth mem = memcpy_bandwidth(std::size_t{256} << 20, 7);
  fmt::print("memcpy (1 thread, 256 MiB, median of 7): {:.2f} GB/s\n", mem.gb_s());

  const std::int32_t max_len = *std::max_element(lengths.begin(), lengths.end());
  if (o.host_mb < 0) {  // three of the longest agents, or all of the rotation phase's
    const std::int64_t tokens = std::max<std::int64_t>(3LL * max_len, std::int64_t{o.n_agents} * (o.agent_tokens + o.turn_tokens + o.gen));
    o.host_mb = ((tokens / bs + 8) * encoded_block + (1 << 20) - 1) >> 20;
  }
  fmt::print("host tier {} MiB ({}), encoded block {:.0f} KiB\n", o.host_mb, o.host_mb > 0 ? o.codec : "off",
             encoded_block / 1024.0);

  std::vector<LengthRow> rows;
  std::string last_dir;
  for (std::int32_t len : lengths) {
    last_dir = fmt::format("{}/len-{}", root, len);
    rows.push_back(measure_length(o, *backend, last_dir, len, cfg.vocab_size));
  }
  const Anatomy an = restore_anatomy(o, *backend, last_dir, rows.back().last_prompt, rows.back().last_chain);

  print_length_report(o, rows, an, mem, {.encoded = encoded_block, .file = file_bytes});
  if (o.n_agents > 0) print_agents_report(o, measure_agents(o, *backend, root + "/agents", cfg.vocab_size));
  fmt::print("\nload average at end {}\n", load_average());
  if (!o.keep) fs::remove_all(root);
  return 0;
}

}  // namespace
}  // namespace akv

int main(int argc, char** argv) {
  akv::Options o;
  CLI::App app("agentkv agent-memory benchmark: cold / hot / warm TTFT and restore bandwidth");
  app.add_option("model_dir", o.model_dir)->required();
  app.add_option("--backend", o.backend, "reference | cpu | cuda");
  app.add_option("--threads", o.threads, "cpu backend threads (0: all)");
  app.add_option("--codec", o.codec, "host and disk codec: native | f32 | bf16 | int8 | int4 (block_codec.h)");
  app.add_option("--kv-dir", o.kv_dir, "where to put the disk tier (a fresh subfolder; default: temp dir)");
  app.add_option("--lengths", o.lengths, "comma-separated prompt lengths (capped by the context)");
  app.add_option("--runs", o.runs, "runs per length (medians reported)");
  app.add_option("--block-size", o.block_size);
  app.add_option("--budget", o.budget, "tokens per step");
  app.add_option("--chunk", o.chunk, "prefill chunk per sequence per step");
  app.add_option("--gen", o.gen, "generated tokens per request");
  app.add_option("--agents", o.n_agents, "agents in the rotation phase (0: skip it)");
  app.add_option("--system-tokens", o.system_tokens, "shared system prefix of the agents");
  app.add_option("--agent-tokens", o.agent_tokens, "each agent's first prompt (system prefix included)");
  app.add_option("--device-agents", o.device_agents, "agents the device pool holds");
  app.add_option("--host-mb", o.host_mb, "host tier budget in MiB (-1: three of the longest agents; 0: no host tier)");
  app.add_flag("--keep", o.keep, "keep the kv dir");
  CLI11_PARSE(app, argc, argv);
  try {
    return akv::run_bench(o);
  } catch (const akv::Error& e) {
    fmt::print(stderr, "agent_memory_bench: {}\n", e.what());
    return 1;
  }
}
