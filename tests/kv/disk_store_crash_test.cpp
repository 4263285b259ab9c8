// Crash safety of the disk tier: a child process spills blocks and manifests as fast as it can
// and is killed with SIGKILL at a random moment, over and over, on one directory. After every
// kill the store reopens with nothing damaged, every file it lists loads with the content its
// key names, and every block the child saw become durable is still there.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "kv/disk_format.h"
#include "kv/disk_store.h"
#include "tier_test_util.h"

namespace akv {
namespace {

const BlockShape kShape{.n_rows = 8, .row_width = 32, .dtype = DType::F32};

DiskStoreOptions options(const std::string& dir) {
  DiskStoreOptions o;
  o.dir = dir;
  o.fingerprint = {3, 4};
  o.shape = kShape;
  o.block_size = 4;
  o.max_queue_bytes = 16 * kShape.raw_bytes();
  return o;
}

// The child: spill chains of blocks (content seeded by the key) and manifests until killed.
// Each durable block is reported on `report_fd` as one line (atomic: shorter than PIPE_BUF).
[[noreturn]] void spill_until_killed(const std::string& dir, int report_fd, std::uint32_t seed) {
  DiskStoreOptions o = options(dir);
  o.on_block_written = [report_fd](const Hash128& key) {
    const std::string line = key.hex() + "\n";
    if (::write(report_fd, line.data(), line.size()) < 0) _exit(3);
  };
  auto store = DiskStore::open_or_throw(o);
  const BlockKeyer& keys = store->keyer();
  std::mt19937 rng(seed);
  const auto stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int agent = 0; std::chrono::steady_clock::now() < stop_at; ++agent) {
    AgentRecord rec;
    rec.agent = "agent-" + std::to_string(seed) + "-" + std::to_string(agent % 4);
    Hash128 parent = keys.root("");
    for (int j = 0; j < 24; ++j) {
      std::vector<std::int32_t> tokens(4);
      for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % 1000);
      const Hash128 key = keys.next(parent, tokens);
      while (
          !store->put(key, parent, keys.tokens_hash(tokens), test::block_content(kShape, key.lo)) &&
          !store->has(key))
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      rec.chain.push_back(key);
      parent = key;
      if (j % 8 == 7) store->put_manifest(rec);
    }
  }
  _exit(0);
}

TEST(DiskStoreCrash, KillNineAtRandomMomentsNeverCorruptsOrLosesDurableBlocks) {
  test::ScratchDir dir;
  std::mt19937 rng(2024);
  std::set<std::string> durable;  // every block the children reported durable
  const int kIterations = 60;
  std::int64_t max_blocks = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < kIterations; ++it) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      spill_until_killed(dir.path, fds[1], static_cast<std::uint32_t>(it));
    }
    ::close(fds[1]);
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(5, 100)(rng)));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited on its own: " << status;
    std::string lines;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
      lines.append(buf, static_cast<std::size_t>(n));
    ::close(fds[0]);
    for (std::size_t at = 0; at + 33 <= lines.size(); at += 33)
      durable.insert(lines.substr(at, 32));

    auto store = DiskStore::open_or_throw(options(dir.path));
    const DiskStoreStats st = store->stats();
    ASSERT_EQ(st.rejected_corrupt, 0) << "iteration " << it;
    max_blocks = st.n_blocks;
    // Every durable block is listed; every listed block loads with its key's content.
    std::vector<std::byte> raw(kShape.raw_bytes());
    std::int64_t n_files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path + "/blocks")) {
      const std::string name = e.path().filename().string();
      ASSERT_EQ(name.find(".tmp"), std::string::npos) << "temp files are cleared at start-up";
      const auto key = Hash128::from_hex(name.substr(0, 32));
      ASSERT_TRUE(key);
      std::array<std::byte, kBlockHeaderBytes> head{};
      {
        std::FILE* f = std::fopen(e.path().c_str(), "rb");
        ASSERT_NE(f, nullptr);
        ASSERT_EQ(std::fread(head.data(), 1, head.size(), f), head.size());
        std::fclose(f);
      }
      BlockHeader h;
      ASSERT_EQ(parse_block_header(head, {3, 4}, h), FileCheck::Ok);
      ASSERT_TRUE(store->load(*key, h.parent, h.tokens_hash, raw)) << name;
      ASSERT_EQ(raw, test::block_content(kShape, key->lo)) << name;
      ++n_files;
    }
    EXPECT_EQ(n_files, st.n_blocks);
    for (const std::string& k : durable)
      ASSERT_TRUE(store->on_disk(*Hash128::from_hex(k))) << "lost " << k;
    ASSERT_EQ(store->stats().rejected_corrupt, 0);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(durable.size(), 0u);
  std::printf("%d kills, %zu durable blocks reported, %lld on disk at the end, %.1f s\n",
              kIterations, durable.size(), static_cast<long long>(max_blocks), seconds);
}

}  // namespace
}  // namespace akv
