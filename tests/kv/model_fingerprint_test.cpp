// The model fingerprint sees every weight byte: a model of the same shape with other weights,
// or with one layer changed, never shares KV with the original, even where the change avoids
// the samples an earlier fingerprint read (headers, first/last 4 KiB, 64 windows of 256
// bytes). The digests of the weight files are cached in the KV directory by file identity: a
// restart does not rehash, a touched or changed file does, a damaged cache is ignored.
#include "kv/model_fingerprint.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "../tensor/gguf_test_writer.h"
#include "tensor/gguf.h"
#include "tensor/safetensors.h"
#include "tier_test_util.h"
#include "tiny_model.h"

namespace akv {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

const KvLayout kLayout{.n_layers = 4, .n_blocks = 1, .block_size = 8, .n_kv_heads = 2, .head_dim = 16};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TinyModelSpec spec(std::uint64_t seed) {
  TinyModelSpec s;
  s.family = "llama";
  s.hidden = 64, s.intermediate = 128, s.layers = 4, s.heads = 4, s.kv_heads = 2, s.vocab = 512;
  s.seed = seed;
  return s;
}

Hash128 fingerprint(const std::string& model_dir, const std::string& cache_dir = "",
                    WeightDigestStats* stats = nullptr) {
  return model_fingerprint({.model_dir = model_dir, .chat_template = "", .kv = kLayout, .cache_dir = cache_dir},
                           stats);
}

// The bytes of a safetensors file the earlier sampling fingerprint read: the header, the first
// and last 4 KiB of the data and 64 windows of 256 bytes evenly spaced in between.
std::vector<bool> sampled_before(const std::string& file) {
  std::uint64_t header = 0;
  std::memcpy(&header, file.data(), 8);
  const std::size_t begin = 8 + header, n = file.size() - begin;
  std::vector<bool> sampled(file.size(), false);
  const auto mark = [&](std::size_t at, std::size_t len) {
    for (std::size_t i = 0; i < len; ++i) sampled[begin + at + i] = true;
  };
  for (std::size_t i = 0; i < begin; ++i) sampled[i] = true;
  mark(0, 4096);
  mark(n - 4096, 4096);
  for (std::size_t i = 0; i < 64; ++i) mark((n - 256) / 64 * i, 256);
  return sampled;
}

// Writes `from` with its bytes in [begin, end) replaced by `other`'s wherever the earlier
// fingerprint did not look; returns how many bytes changed.
std::size_t splice_unsampled(const std::string& from_dir, const std::string& other_dir, const std::string& to_dir,
                             std::size_t begin, std::size_t end) {
  fs::copy(from_dir, to_dir, fs::copy_options::recursive);
  std::string bytes = read_all(from_dir + "/model.safetensors");
  const std::string other = read_all(other_dir + "/model.safetensors");
  EXPECT_EQ(bytes.size(), other.size());
  const std::vector<bool> sampled = sampled_before(bytes);
  std::size_t n_changed = 0;
  for (std::size_t i = begin; i < std::min(end, bytes.size()); ++i) {
    if (sampled[i] || bytes[i] == other[i]) continue;
    bytes[i] = other[i];
    ++n_changed;
  }
  write_all(to_dir + "/model.safetensors", bytes);
  return n_changed;
}

TEST(ModelFingerprint, SameShapeWithMostWeightsChangedDiffers) {
  ScratchDir dir;
  const std::string a = dir.path + "/a", other = dir.path + "/other", b = dir.path + "/b";
  write_tiny_model(spec(1), a);
  write_tiny_model(spec(2), other);
  const std::size_t n_changed = splice_unsampled(a, other, b, 0, std::string::npos);
  const std::size_t n_bytes = fs::file_size(a + "/model.safetensors");
  EXPECT_GT(n_changed, n_bytes * 9 / 10) << "most weight bytes differ";
  EXPECT_EQ(read_all(a + "/config.json"), read_all(b + "/config.json"));
  EXPECT_NE(fingerprint(a), fingerprint(b));
}

// A checkpoint quantized at load (--quantize) computes with other weights than its bf16
// self: its KV must not be restored into the bf16 model, nor one quantization's into another's.
TEST(ModelFingerprint, LoadTimeQuantizationCounts) {
  ScratchDir dir;
  TinyModelSpec s = spec(1);
  s.dtype = DType::BF16;
  write_tiny_model(s, dir.path);
  const auto with = [&](const std::string& quantize) {
    return model_fingerprint({.model_dir = dir.path, .chat_template = "", .kv = kLayout, .quantize = quantize});
  };
  EXPECT_EQ(with(""), fingerprint(dir.path));
  EXPECT_NE(with("q8_0"), fingerprint(dir.path));
  EXPECT_NE(with("q4_k"), with("q8_0"));
  EXPECT_NE(with("q6_k"), with("q4_k"));
}

TEST(ModelFingerprint, OneLayerChangedInTheMiddleDiffers) {
  ScratchDir dir;
  const std::string a = dir.path + "/a", other = dir.path + "/other", b = dir.path + "/b";
  write_tiny_model(spec(1), a);
  write_tiny_model(spec(2), other);
  // The byte range of layer 2's tensors (of 0..3) in the file.
  const MappedFile f = MappedFile::open_or_throw(a + "/model.safetensors");
  std::size_t begin = f.size(), end = 0;
  for (const TensorInfo& t : parse_safetensors(f.bytes(), "a")) {
    if (!t.name.starts_with("model.layers.2.")) continue;
    const std::size_t at = static_cast<std::size_t>(t.bytes.data() - f.bytes().data());
    begin = std::min(begin, at);
    end = std::max(end, at + t.bytes.size());
  }
  ASSERT_LT(begin, end);
  const std::size_t n_changed = splice_unsampled(a, other, b, begin, end);
  EXPECT_GT(n_changed, (end - begin) / 2);
  EXPECT_NE(fingerprint(a), fingerprint(b));
}

TEST(ModelFingerprint, EveryShardCounts) {
  ScratchDir dir;
  TinyModelSpec s = spec(1);
  s.max_shard_bytes = 100000;
  write_tiny_model(s, dir.path);
  const std::vector<std::string> files = list_weight_files(dir.path);
  ASSERT_GE(files.size(), 3u);
  const Hash128 before = fingerprint(dir.path);
  std::string bytes = read_all(files[1]);
  bytes[bytes.size() / 2 + 1] ^= 0x10;
  write_all(files[1], bytes);
  EXPECT_NE(before, fingerprint(dir.path));
}

TEST(ModelFingerprint, CachedDigestIsUsedUntilTheFileChanges) {
  ScratchDir dir;
  const std::string model = dir.path + "/model", kv = dir.path + "/kv";
  write_tiny_model(spec(1), model);
  WeightDigestStats s;
  const Hash128 cold = fingerprint(model, kv, &s);
  EXPECT_EQ(s.n_hashed, 1);
  EXPECT_EQ(s.n_cached, 0);
  EXPECT_TRUE(s.cache_written);
  EXPECT_GT(s.bytes_hashed, 0u);
  EXPECT_EQ(fingerprint(model, kv, &s), cold);
  EXPECT_EQ(s.n_hashed, 0) << "a restart finds the digest in the cache";
  EXPECT_EQ(s.n_cached, 1);
  EXPECT_FALSE(s.cache_written);
  EXPECT_EQ(fingerprint(model, "", &s), cold) << "the cache does not change the fingerprint";
  EXPECT_EQ(s.n_hashed, 1);

  // A touched file is hashed again (same bytes, same fingerprint).
  const std::string weights = model + "/model.safetensors";
  fs::last_write_time(weights, fs::last_write_time(weights) + std::chrono::seconds(5));
  EXPECT_EQ(fingerprint(model, kv, &s), cold);
  EXPECT_EQ(s.n_hashed, 1);
  EXPECT_EQ(fingerprint(model, kv, &s), cold);
  EXPECT_EQ(s.n_hashed, 0);

  // Bytes changed in place with the old mtime put back: the ctime still tells.
  struct stat st {};
  ASSERT_EQ(::stat(weights.c_str(), &st), 0);
  std::string bytes = read_all(weights);
  bytes[bytes.size() / 2] ^= 0x01;
  write_all(weights, bytes);
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, weights.c_str(), times, 0), 0);
  EXPECT_NE(fingerprint(model, kv, &s), cold);
  EXPECT_EQ(s.n_hashed, 1);
}

TEST(ModelFingerprint, DamagedCacheIsIgnoredAndRewritten) {
  ScratchDir dir;
  const std::string model = dir.path + "/model", kv = dir.path + "/kv";
  write_tiny_model(spec(1), model);
  const Hash128 truth = fingerprint(model);
  WeightDigestStats s;
  fingerprint(model, kv, &s);
  const std::string cache = kv + "/" + kWeightDigestCacheName;
  const std::string good = read_all(cache);
  ASSERT_FALSE(good.empty());

  std::vector<std::string> damaged = {"garbage", "", good.substr(0, good.size() - 1), good + "x"};
  for (std::size_t at : {std::size_t{9}, std::size_t{20}, good.size() - 20, good.size() - 1}) {
    std::string d = good;
    d[at] ^= 0x40;  // the version, a path, the digest, the checksum
    damaged.push_back(d);
  }
  for (std::size_t i = 0; i < damaged.size(); ++i) {
    SCOPED_TRACE(i);
    write_all(cache, damaged[i]);
    EXPECT_EQ(fingerprint(model, kv, &s), truth);
    EXPECT_TRUE(s.cache_damaged);
    EXPECT_EQ(s.n_hashed, 1) << "a damaged cache is never trusted";
    EXPECT_TRUE(s.cache_written);
    EXPECT_EQ(read_all(cache), good) << "and is rewritten";
    EXPECT_EQ(fingerprint(model, kv, &s), truth);
    EXPECT_EQ(s.n_hashed, 0);
  }
}

TEST(WeightDigests, ChunkedDigestIsTheSameForAnyThreadCount) {
  ScratchDir dir;
  const std::string big = dir.path + "/big.safetensors";
  {
    // 129 MiB, sparse: three 64 MiB chunks.
    std::ofstream out(big, std::ios::binary);
    out.seekp((std::streamoff{129} << 20) - 1);
    out.put('x');
  }
  const std::vector<std::string> files{big};
  const Hash128 one = weight_digests(files, "", nullptr, 1).at(0);
  EXPECT_EQ(weight_digests(files, "", nullptr, 4).at(0), one);
  {
    std::fstream f(big, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff{100} << 20);  // in the second chunk
    f.put('y');
  }
  EXPECT_NE(weight_digests(files, "", nullptr, 4).at(0), one);
}

TEST(WeightDigests, CacheKeepsABoundedNumberOfFiles) {
  ScratchDir dir;
  const std::string kv = dir.path + "/kv";
  const std::size_t n = kWeightDigestCacheMaxEntries + 6;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string path = dir.path + "/w" + std::to_string(i);
    write_all(path, "weights " + std::to_string(i));
    const std::vector<std::string> files{path};
    WeightDigestStats s;
    weight_digests(files, kv, &s);
    EXPECT_EQ(s.n_hashed, 1);
  }
  EXPECT_LT(fs::file_size(kv + "/" + kWeightDigestCacheName), kWeightDigestCacheMaxBytes);
  WeightDigestStats s;
  const std::vector<std::string> last{dir.path + "/w" + std::to_string(n - 1)};
  weight_digests(last, kv, &s);
  EXPECT_EQ(s.n_cached, 1) << "the most recent files stay";
  const std::vector<std::string> first{dir.path + "/w0"};
  weight_digests(first, kv, &s);
  EXPECT_EQ(s.n_hashed, 1) << "the oldest went";
}

// A GGUF model: its metadata, tensor types and tensor data all count, and so do the parts of a
// split set and the tokenizer beside the file. A quantized file never shares KV with its
// full-precision sibling of the same shape and metadata.
test::GgufTestWriter gguf_model(GgmlType type, const std::string& name = "tiny") {
  test::GgufTestWriter w;
  w.kv_str("general.architecture", "llama");
  w.kv_str("general.name", name);
  const std::size_t n_bytes = type == GgmlType::BF16 ? 64 * 2 * 2 : 2 * 2 * 18;  // [2, 64]
  std::string data(n_bytes, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  w.tensor({"blk.0.attn_q.weight", type, {64, 2}, data, -1});
  return w;
}

TEST(ModelFingerprint, GgufTypesMetadataSplitsAndTokenizerCount) {
  ScratchDir dir;
  const std::string bf16 = dir.path + "/m-bf16.gguf", q4 = dir.path + "/m-q4_0.gguf";
  gguf_model(GgmlType::BF16).write(bf16);
  gguf_model(GgmlType::Q4_0).write(q4);
  ASSERT_NO_THROW(GgufReader::open_or_throw(q4));
  EXPECT_EQ(list_weight_files(q4), std::vector<std::string>{q4});
  const Hash128 a = fingerprint(bf16), b = fingerprint(q4);
  EXPECT_NE(a, b) << "quantized vs bf16 sibling";
  EXPECT_EQ(fingerprint(q4), b) << "deterministic";

  fs::create_directories(dir.path + "/other");
  const std::string renamed = dir.path + "/other/m-q4_0.gguf";  // same name, one metadata byte differs
  gguf_model(GgmlType::Q4_0, "tinx").write(renamed);
  EXPECT_NE(fingerprint(renamed), b);

  write_all(dir.path + "/tokenizer.json", "{}");
  EXPECT_NE(fingerprint(q4), b) << "the tokenizer beside the file counts";

  const std::string prefix = dir.path + "/split";
  for (int i = 1; i <= 2; ++i) gguf_model(GgmlType::Q4_0).write(gguf_split_path(prefix, i, 2));
  const std::string first = gguf_split_path(prefix, 1, 2);
  EXPECT_EQ(list_weight_files(first), (std::vector<std::string>{first, gguf_split_path(prefix, 2, 2)}));
  const Hash128 split = fingerprint(first);
  gguf_model(GgmlType::Q4_0, "tinx").write(gguf_split_path(prefix, 2, 2));
  EXPECT_NE(fingerprint(first), split) << "the second part counts";
}

}  // namespace
}  // namespace akv
