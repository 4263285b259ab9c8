// Hub ids, the choice of files, digests and the cache layout's names (no network).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "hub/file_digest.h"
#include "hub/file_selection.h"
#include "hub/hub_cache.h"
#include "hub/hub_client.h"
#include "hub/model_ref.h"

namespace akv {
namespace {

TEST(HubRef, ParsesRepoQuantRevision) {
  const HubRef a = parse_hub_ref("Qwen/Qwen3-0.6B");
  EXPECT_EQ(a.repo_id, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(a.quant, "");
  EXPECT_EQ(a.revision, "main");
  const HubRef b = parse_hub_ref("unsloth/Qwen3-8B-GGUF:Q4_K_M@v1.0");
  EXPECT_EQ(b.repo_id, "unsloth/Qwen3-8B-GGUF");
  EXPECT_EQ(b.quant, "Q4_K_M");
  EXPECT_EQ(b.revision, "v1.0");
  EXPECT_EQ(parse_hub_ref("a/b@refs/pr/1").revision, "refs/pr/1");
}

TEST(HubRef, RefusesWhatIsNotAnId) {
  for (const char* bad : {"", "a", "a/b/c", "/a/b", "a/", "a/b:", "a/b@", "a/b@..", "a/..", "a b/c", "a/b:Q4 K"})
    EXPECT_THROW(parse_hub_ref(bad), Error) << bad;
  EXPECT_FALSE(looks_like_hub_ref("./model"));
  EXPECT_FALSE(looks_like_hub_ref("/tmp"));
  EXPECT_TRUE(looks_like_hub_ref("org/surely-not-a-local-dir:Q8_0"));
}

TEST(FileSelection, SafetensorsSingleOrIndexed) {
  const FileSelection one = select_model_files(
      {"README.md", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "onnx/model.onnx",
       "consolidated.safetensors", "chat_template.jinja"},
      "");
  EXPECT_EQ(one.files, (std::vector<std::string>{"config.json", "tokenizer.json", "tokenizer_config.json",
                                                 "chat_template.jinja", "model.safetensors"}));
  const FileSelection sharded = select_model_files(
      {"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"}, "");
  EXPECT_EQ(sharded.index_file, "model.safetensors.index.json");
  EXPECT_EQ(sharded.files, (std::vector<std::string>{"config.json", "model.safetensors.index.json"}));
  EXPECT_EQ(shards_of_index(R"({"weight_map":{"a":"m-2.safetensors","b":"m-1.safetensors","c":"m-2.safetensors"}})", "i"),
            (std::vector<std::string>{"m-1.safetensors", "m-2.safetensors"}));
  EXPECT_THROW(shards_of_index(R"({"weight_map":{"a":"../x"}})", "i"), Error);
  EXPECT_THROW(select_model_files({"config.json", "README.md"}, ""), Error);
}

TEST(FileSelection, GgufQuantWithSplitParts) {
  const std::vector<std::string> names = {"Llama-3.2-1B-Instruct-Q4_K_M.gguf",
                                          "Llama-3.2-1B-Instruct-IQ3_XXS.gguf",
                                          "Q8_0/Llama-3.2-1B-Instruct-Q8_0-00001-of-00002.gguf",
                                          "Q8_0/Llama-3.2-1B-Instruct-Q8_0-00002-of-00002.gguf",
                                          "Llama-3.2-1B-Instruct-BF16.gguf",
                                          "mmproj-F16.gguf",
                                          "README.md"};
  EXPECT_EQ(gguf_quants(names), (std::vector<std::string>{"BF16", "IQ3_XXS", "Q4_K_M", "Q8_0"}));
  EXPECT_EQ(select_model_files(names, "q8_0").files,
            (std::vector<std::string>{"Q8_0/Llama-3.2-1B-Instruct-Q8_0-00001-of-00002.gguf",
                                      "Q8_0/Llama-3.2-1B-Instruct-Q8_0-00002-of-00002.gguf"}));
  EXPECT_EQ(select_model_files(names, "").files, (std::vector<std::string>{"Llama-3.2-1B-Instruct-Q4_K_M.gguf"}));
  try {
    select_model_files(names, "Q5_K_S");
    FAIL() << "no Q5_K_S";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BF16, IQ3_XXS, Q4_K_M, Q8_0"), std::string::npos) << e.what();
  }
}

TEST(FileDigest, Sha256AndGitBlobId) {
  const std::string dir = ::testing::TempDir() + "/hub_digest";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/hello") << "hello\n";
  EXPECT_EQ(digest_file(dir + "/hello", DigestKind::GitBlobSha1), "ce013625030ba8dba906f756967f9e9ca394464a");  // git hash-object
  EXPECT_EQ(digest_file(dir + "/hello", DigestKind::Sha256),
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
}

TEST(HubCache, HuggingfaceHubLayout) {
  const std::string root = ::testing::TempDir() + "/hub_cache";
  std::filesystem::remove_all(root);
  const HubCache cache(root);
  EXPECT_EQ(cache.repo_dir("Qwen/Qwen3-0.6B"), root + "/models--Qwen--Qwen3-0.6B");
  cache.create_dirs("o/r");
  std::ofstream(cache.blob_path("o/r", "abc")) << "x";
  const std::string commit(40, 'a');
  cache.link("o/r", commit, "sub/f.json", "abc");
  EXPECT_EQ(std::filesystem::read_symlink(cache.snapshot_dir("o/r", commit) + "/sub/f.json").string(), "../../../blobs/abc");
  EXPECT_EQ(cache.snapshot_files("o/r", commit), (std::vector<std::string>{"sub/f.json"}));
  EXPECT_FALSE(cache.find_commit("o/r", "main").has_value());
  cache.write_ref("o/r", "main", commit);
  EXPECT_EQ(cache.find_commit("o/r", "main"), commit);
  EXPECT_EQ(cache.find_commit("o/r", commit), commit);
  EXPECT_EQ(url_encode_path("a b/c+d.json"), "a%20b/c%2Bd.json");
}

}  // namespace
}  // namespace akv
