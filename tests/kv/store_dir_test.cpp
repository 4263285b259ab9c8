// The KV directory before the disk tier uses it: a damaged or lost key secret never destroys
// blocks or agent manifests (they are moved aside, and work again once put back); a secret
// that cannot be read stops the start; an unusable directory is found and named.
#include "kv/store_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "kv/disk_store.h"
#include "tier_test_util.h"

namespace akv {
namespace {

namespace fs = std::filesystem;
using test::block_content;
using test::ScratchDir;

const BlockShape kShape{.n_rows = 2 * 2 * 4, .row_width = 16, .dtype = DType::F32};

DiskStoreOptions options(const std::string& dir) {
  DiskStoreOptions o;
  o.dir = dir;
  o.fingerprint = {1, 2};
  o.shape = kShape;
  o.block_size = 4;
  return o;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::size_t count_files(const std::string& folder, const std::string& ext) {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) n += e.path().extension() == ext ? 1 : 0;
  return n;
}

std::vector<std::string> unusable_folders(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("unusable-")) out.push_back(e.path().string());
  return out;
}

// A store with two blocks and a pinned agent naming them.
void fill(const std::string& dir) {
  auto store = DiskStore::open_or_throw(options(dir));
  const BlockKeyer& keys = store->keyer();
  const std::vector<std::int32_t> t1{1, 2, 3, 4}, t2{5, 6, 7, 8};
  const Hash128 root = keys.root("tenant");
  const Hash128 k1 = keys.next(root, t1), k2 = keys.next(k1, t2);
  ASSERT_TRUE(store->put(k1, root, keys.tokens_hash(t1), block_content(kShape, 1)));
  ASSERT_TRUE(store->put(k2, k1, keys.tokens_hash(t2), block_content(kShape, 2)));
  AgentRecord r;
  r.tenant = "tenant";
  r.agent = "alice";
  r.pinned = true;
  r.chain = {k1, k2};
  store->put_manifest(r);
  store->flush();
}

// Opens the store and checks that alice's pinned manifest and both blocks are there and load.
void expect_filled(const std::string& dir) {
  auto store = DiskStore::open_or_throw(options(dir));
  std::vector<AgentRecord> agents = store->take_loaded_manifests();
  ASSERT_EQ(agents.size(), 1u);
  EXPECT_EQ(agents[0].agent, "alice");
  EXPECT_TRUE(agents[0].pinned);
  const BlockKeyer& keys = store->keyer();
  const std::vector<std::int32_t> t1{1, 2, 3, 4};
  const Hash128 root = keys.root("tenant");
  ASSERT_EQ(agents[0].chain.size(), 2u);
  EXPECT_EQ(agents[0].chain[0], keys.next(root, t1)) << "the same secret";
  std::vector<std::byte> raw(kShape.raw_bytes());
  ASSERT_TRUE(store->load(agents[0].chain[0], root, keys.tokens_hash(t1), raw));
  EXPECT_EQ(raw, block_content(kShape, 1));
}

// Moves an unusable-* folder's contents back over the store (what an operator would do).
void put_back(const std::string& dir, const std::string& aside) {
  for (const char* name : {"blocks", "agents"}) {
    fs::remove_all(dir + "/" + name);
    fs::rename(aside + "/" + name, dir + "/" + name);
  }
  fs::remove_all(aside);
}

TEST(StoreSecret, IsCreatedOnceWithAChecksum) {
  ScratchDir dir;
  fill(dir.path);
  EXPECT_EQ(fs::file_size(dir.path + "/secret"), kKeySecretBytes + 8);
  expect_filled(dir.path);
  EXPECT_TRUE(unusable_folders(dir.path).empty());
}

TEST(StoreSecret, DamagedSecretMovesTheStoreAsideAndDestroysNothing) {
  for (int kind = 0; kind < 4; ++kind) {
    SCOPED_TRACE(kind);
    ScratchDir dir;
    fill(dir.path);
    const std::string secret_path = dir.path + "/secret";
    const std::string good = read_all(secret_path);
    std::string bad = good;
    if (kind == 0) bad.resize(100);            // truncated
    if (kind == 1) bad[17] ^= 0x01;            // a flipped bit: the checksum fails
    if (kind == 2) bad += "x";                 // appended to
    if (kind == 3) bad = std::string(5000, 'a');  // something else entirely
    write_all(secret_path, bad);
    {
      auto store = DiskStore::open_or_throw(options(dir.path));
      EXPECT_TRUE(store->take_loaded_manifests().empty());
      EXPECT_EQ(store->stats().n_blocks, 0) << "an empty store under a new secret";
      EXPECT_EQ(store->stats().rejected_corrupt, 0);
    }
    const std::vector<std::string> aside = unusable_folders(dir.path);
    ASSERT_EQ(aside.size(), 1u);
    EXPECT_EQ(read_all(aside[0] + "/secret"), bad) << "the damaged secret is kept for inspection";
    EXPECT_EQ(count_files(aside[0] + "/blocks", ".kvb"), 2u);
    EXPECT_EQ(count_files(aside[0] + "/agents", ".agent"), 1u);
    // An operator restores the secret from a backup and moves the files back: all of it works.
    put_back(dir.path, aside[0]);
    write_all(secret_path, good);
    expect_filled(dir.path);
  }
}

TEST(StoreSecret, LostSecretWithFilesMovesThemAside) {
  ScratchDir dir;
  fill(dir.path);
  const std::string good = read_all(dir.path + "/secret");
  fs::remove(dir.path + "/secret");
  DiskStore::open_or_throw(options(dir.path));
  const std::vector<std::string> aside = unusable_folders(dir.path);
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(count_files(aside[0] + "/blocks", ".kvb"), 2u);
  EXPECT_EQ(count_files(aside[0] + "/agents", ".agent"), 1u);
  put_back(dir.path, aside[0]);
  write_all(dir.path + "/secret", good);
  expect_filled(dir.path);
}

TEST(StoreSecret, SecretWithoutChecksumIsAcceptedAndGetsOne) {
  ScratchDir dir;
  fill(dir.path);
  write_all(dir.path + "/secret", read_all(dir.path + "/secret").substr(0, kKeySecretBytes));
  expect_filled(dir.path);
  EXPECT_EQ(fs::file_size(dir.path + "/secret"), kKeySecretBytes + 8);
  EXPECT_TRUE(unusable_folders(dir.path).empty());
}

TEST(StoreSecret, ManifestsOfAnotherSecretAreLeftAlone) {
  // A changed secret that cannot be told from a good one (no checksum): its manifests do not
  // match their names, and are kept, not deleted as damage.
  ScratchDir dir;
  fill(dir.path);
  std::string secret = read_all(dir.path + "/secret").substr(0, kKeySecretBytes);
  secret[3] ^= 0x01;
  write_all(dir.path + "/secret", secret);
  {
    auto store = DiskStore::open_or_throw(options(dir.path));
    EXPECT_TRUE(store->take_loaded_manifests().empty());
    EXPECT_EQ(store->stats().rejected_foreign, 1);
    EXPECT_EQ(store->stats().rejected_corrupt, 0);
  }
  EXPECT_EQ(count_files(dir.path + "/agents", ".agent"), 1u);
}

TEST(StoreSecret, UnreadableSecretStopsTheStartAndKeepsEverything) {
  ScratchDir dir;
  fill(dir.path);
  fs::rename(dir.path + "/secret", dir.path + "/secret.saved");
  fs::create_directory(dir.path + "/secret");  // read() fails (EISDIR), even for root
  try {
    DiskStore::open_or_throw(options(dir.path));
    ADD_FAILURE() << "opened a store whose secret cannot be read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path + "/secret"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(unusable_folders(dir.path).empty());
  fs::remove(dir.path + "/secret");
  fs::rename(dir.path + "/secret.saved", dir.path + "/secret");
  expect_filled(dir.path);
}

TEST(StoreDir, UsableDirectoryHasNoProblemAndNoLeftovers) {
  ScratchDir dir;
  const std::string kv = dir.path + "/new/kv";
  EXPECT_EQ(find_store_dir_problem(kv), std::nullopt);
  EXPECT_TRUE(fs::is_directory(kv + "/blocks"));
  EXPECT_TRUE(fs::is_directory(kv + "/agents"));
  EXPECT_EQ(count_files(kv, ".tmp") + count_files(kv + "/blocks", ".tmp") + count_files(kv + "/agents", ".tmp"), 0u);
}

TEST(StoreDir, PathThroughARegularFileIsNamed) {
  ScratchDir dir;
  write_all(dir.path + "/file", "x");
  const std::optional<std::string> problem = find_store_dir_problem(dir.path + "/file/kv");
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find(dir.path + "/file/kv"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("Not a directory"), std::string::npos) << *problem;
  ASSERT_TRUE(find_store_dir_problem(dir.path + "/file").has_value());
}

TEST(StoreDir, ReadOnlyDirectoryIsNamed) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "running as root, which may write into a mode 0500 directory "
                    "(PathThroughARegularFileIsNamed covers an unusable path as root)";
  ScratchDir dir;
  const std::string kv = dir.path + "/kv";
  fs::create_directory(kv);
  fs::permissions(kv, fs::perms::owner_read | fs::perms::owner_exec);
  const std::optional<std::string> problem = find_store_dir_problem(kv);
  fs::permissions(kv, fs::perms::owner_all);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find(kv), std::string::npos) << *problem;
  EXPECT_NE(problem->find("Permission denied"), std::string::npos) << *problem;
}

}  // namespace
}  // namespace akv
