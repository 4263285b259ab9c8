// safetensors: the real tiny-random checkpoints (single, bf16, sharded), write/read round trips,
// and a table of corrupted files that must fail with an error naming the file and the tensor.
#include "tensor/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace akv {
namespace {

namespace fs = std::filesystem;
const std::string kTiny = std::string(AGENTKV_TESTDATA) + "/models/tiny-random";

std::string temp_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/safetensors_test_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file with the given header text (length prefix computed) followed by `n_data` zero bytes.
std::string file_with_header(const std::string& header, std::size_t n_data) {
  std::string out(8, '\0');
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + std::string(n_data, '\0');
}

std::span<const std::uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

template <typename T>
std::span<const std::uint8_t> as_bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T)};
}

// Runs `f`, expects Error{kind} whose message contains every string of `needles`.
template <typename F>
void expect_error(F&& f, ErrorKind kind, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "'" << e.what() << "' lacks '" << n << "'";
  }
}

// ---- the shared tiny-random checkpoints ----

TEST(Safetensors, OpensEveryTinyRandomModel) {
  int n_models = 0;
  for (const auto& entry : fs::directory_iterator(kTiny)) {
    if (!entry.is_directory()) continue;
    ++n_models;
    const std::string dir = entry.path().string();
    SafetensorsReader r = SafetensorsReader::open_or_throw(dir);
    ASSERT_GT(r.size(), 5u) << dir;
    const TensorInfo& embed = r.get_or_throw("model.embed_tokens.weight");
    ASSERT_EQ(embed.shape.size(), 2u);
    EXPECT_EQ(embed.dtype, dir.ends_with("-bf16") ? DType::BF16 : DType::F32) << dir;
    for (const std::string& name : r.names()) {
      const TensorInfo& t = r.get_or_throw(name);
      EXPECT_EQ(t.bytes.size(), static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype));
      EXPECT_EQ(t.name, name);
      EXPECT_TRUE(t.file.starts_with(dir)) << t.file;
    }
  }
  EXPECT_GE(n_models, 9);
}

TEST(Safetensors, ShardedMatchesSingleByteForByte) {
  SafetensorsReader single = SafetensorsReader::open_or_throw(kTiny + "/llama3-rope-scaled");
  SafetensorsReader sharded =
      SafetensorsReader::open_or_throw(kTiny + "/llama3-rope-scaled-sharded");
  ASSERT_EQ(single.names(), sharded.names());
  std::set<std::string> files;
  for (const std::string& name : single.names()) {
    const TensorInfo& a = single.get_or_throw(name);
    const TensorInfo& b = sharded.get_or_throw(name, a.shape);
    EXPECT_EQ(a.dtype, b.dtype);
    ASSERT_EQ(a.bytes.size(), b.bytes.size());
    EXPECT_EQ(std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()), 0) << name;
    files.insert(b.file);
  }
  EXPECT_EQ(files.size(), 4u);
  // The index file itself opens the same checkpoint.
  SafetensorsReader via_index = SafetensorsReader::open_or_throw(
      kTiny + "/llama3-rope-scaled-sharded/model.safetensors.index.json");
  EXPECT_EQ(via_index.names(), single.names());
}

TEST(Safetensors, Bf16CheckpointIsTheF32OneRounded) {
  SafetensorsReader f32 = SafetensorsReader::open_or_throw(kTiny + "/llama3-rope-scaled");
  SafetensorsReader bf16 = SafetensorsReader::open_or_throw(kTiny + "/llama3-rope-scaled-bf16");
  const TensorInfo& a = f32.get_or_throw("model.layers.0.self_attn.q_proj.weight");
  const TensorInfo& b = bf16.get_or_throw("model.layers.0.self_attn.q_proj.weight", a.shape);
  ASSERT_EQ(b.dtype, DType::BF16);
  std::vector<float> fa(a.numel()), fb(b.numel());
  convert_to_f32(a.dtype, a.bytes.data(), fa.data(), fa.size());
  convert_to_f32(b.dtype, b.bytes.data(), fb.data(), fb.size());
  for (std::size_t i = 0; i < fa.size(); ++i)
    ASSERT_EQ(bf16_to_f32(f32_to_bf16(fa[i])), fb[i]) << i;
}

TEST(Safetensors, GetWithWrongShapeNamesBothShapes) {
  SafetensorsReader r = SafetensorsReader::open_or_throw(kTiny + "/llama3-rope-scaled");
  const std::int64_t wrong[] = {64, 512};
  expect_error([&] { r.get_or_throw("model.embed_tokens.weight", wrong); }, ErrorKind::BadFormat,
               {"model.safetensors", "model.embed_tokens.weight", "[512, 64]", "[64, 512]"});
  expect_error([&] { r.get_or_throw("no.such.tensor"); }, ErrorKind::NotFound,
               {"llama3-rope-scaled", "no.such.tensor"});
  EXPECT_EQ(r.find("no.such.tensor"), nullptr);
}

// ---- writing ----

TEST(Safetensors, WriteReadRoundTrip) {
  const std::string dir = temp_dir("roundtrip");
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  const std::vector<std::uint16_t> b = {0x3f80, 0xc000, 0x7f80};
  const std::vector<std::int64_t> c = {42};
  const std::vector<TensorToWrite> tensors = {
      {"a", DType::F32, {2, 3}, as_bytes(a)},
      {"b.bf16", DType::BF16, {3}, as_bytes(b)},
      {"c", DType::I64, {}, as_bytes(c)},  // a scalar
      {"empty", DType::F16, {0, 4}, {}},
  };
  const std::string path = dir + "/model.safetensors";
  write_safetensors(path, tensors, {{"format", "pt"}});
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  std::string raw;
  {
    std::ifstream in(path, std::ios::binary);
    raw.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, raw.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);
  const auto header = nlohmann::json::parse(raw.substr(8, header_len));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");

  SafetensorsReader r = SafetensorsReader::open_or_throw(dir);  // the directory form
  ASSERT_EQ(r.size(), 4u);
  for (const TensorToWrite& t : tensors) {
    const TensorInfo& got = r.get_or_throw(t.name, t.shape);
    EXPECT_EQ(got.dtype, t.dtype);
    ASSERT_EQ(got.bytes.size(), t.bytes.size()) << t.name;
    EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), t.bytes.begin())) << t.name;
  }
  EXPECT_EQ(r.get_or_throw("c").numel(), 1);
  EXPECT_EQ(r.get_or_throw("empty").numel(), 0);
}

TEST(Safetensors, StreamingWriterChecksByteCount) {
  const std::string dir = temp_dir("streaming");
  const std::string path = dir + "/x.safetensors";
  {
    SafetensorsWriter w(path, {{"x", DType::F32, {4}}, {"y", DType::BF16, {2}}});
    EXPECT_EQ(w.data_bytes(), 20u);
    const std::vector<std::uint8_t> chunk(12, 0);
    w.append(chunk);
    EXPECT_THROW(w.commit(), Error);  // 12 of 20 bytes
    w.append(std::span(chunk).first(8));
    EXPECT_THROW(w.append(chunk), Error);  // past the end
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  {
    SafetensorsWriter w(path, {{"x", DType::F32, {4}}, {"y", DType::BF16, {2}}});
    const std::vector<std::uint8_t> bytes(20, 7);
    w.append(std::span(bytes).first(3));  // chunks need not follow tensor boundaries
    w.append(std::span(bytes).subspan(3));
    w.commit();
  }
  SafetensorsReader r = SafetensorsReader::open_or_throw(path);
  EXPECT_EQ(r.get_or_throw("y").bytes[1], 7);
  const std::vector<TensorSpec> specs = {{"x", DType::F32, {4}}, {"y", DType::BF16, {2}}};
  EXPECT_EQ(SafetensorsWriter::file_bytes(specs), fs::file_size(path));
}

TEST(Safetensors, WriterRejectsBadInput) {
  const std::string dir = temp_dir("writer_bad");
  const std::vector<float> a = {1, 2, 3};
  const std::vector<TensorToWrite> wrong_size = {{"a", DType::F32, {4}, as_bytes(a)}};
  EXPECT_THROW(write_safetensors(dir + "/a.safetensors", wrong_size), Error);
  const std::vector<TensorToWrite> dup = {{"a", DType::F32, {3}, as_bytes(a)},
                                          {"a", DType::F32, {3}, as_bytes(a)}};
  EXPECT_THROW(write_safetensors(dir + "/b.safetensors", dup), Error);
  expect_error([&] { write_safetensors("/nonexistent/dir/c.safetensors", {}); }, ErrorKind::Io,
               {"/nonexistent/dir/c.safetensors"});
}

// ---- corrupted files ----

struct BadCase {
  const char* what;
  std::string bytes;
  std::vector<std::string> needles;  // the file name is always checked as well
};

std::vector<BadCase> bad_cases() {
  const std::string ok = R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  auto one = [](const std::string& entry, std::size_t n_data) {
    return file_with_header("{" + entry + "}", n_data);
  };
  std::string past_eof = file_with_header("{" + ok + "}", 16);
  past_eof[0] = static_cast<char>(0xff);  // header length 8447 + ... > file size
  std::string huge_len = file_with_header("{}", 0);
  huge_len[7] = 0x7f;
  return {
      {"empty file", "", {"truncated"}},
      {"short length prefix", std::string(5, '\0'), {"truncated"}},
      {"header length past EOF", past_eof, {"truncated", "header length"}},
      {"huge header length", huge_len, {"header length"}},
      {"bad JSON", file_with_header("{\"w\": {\"dtype\": ", 0), {"JSON"}},
      {"JSON not an object", file_with_header("[1, 2]", 0), {"not a JSON object"}},
      {"deeply nested JSON", file_with_header(std::string(100000, '['), 0), {"nested"}},
      {"duplicate tensor", file_with_header("{" + ok + "," + ok + "}", 16), {"repeats"}},
      {"metadata not strings", one(R"("__metadata__":{"format":3})", 0), {"__metadata__"}},
      {"entry not an object", one(R"("w":[1])", 0), {"'w'", "not an object"}},
      {"missing dtype", one(R"("w":{"shape":[1],"data_offsets":[0,4]})", 4), {"'w'", "dtype"}},
      {"unknown dtype",
       one(R"("w":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,4]})", 4),
       {"'w'", "unknown dtype 'Q4_K'"}},
      {"negative dim",
       one(R"("w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,4]})", 4),
       {"'w'", "negative"}},
      {"fractional dim",
       one(R"("w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})", 4),
       {"'w'", "non-integer"}},
      {"huge dims overflow",
       one(R"("w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})", 4),
       {"'w'", "overflow"}},
      {"dtype size overflow",
       one(R"("w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]})", 4),
       {"'w'", "overflow"}},
      {"shape/dtype size mismatch",
       one(R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]})", 16),
       {"'w'", "data size 8 bytes != 16 bytes", "[2, 2]", "F32"}},
      {"offsets out of file", one(ok, 8), {"'w'", "past the data section"}},
      {"offsets reversed",
       one(R"("w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]})", 8),
       {"'w'", "begin > end"}},
      {"offsets negative",
       one(R"("w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]})", 8),
       {"'w'", "data_offsets"}},
      {"offsets not a pair",
       one(R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0]})", 8),
       {"'w'", "data_offsets"}},
      {"overlapping tensors",
       one(ok + R"(,"v":{"dtype":"F32","shape":[4],"data_offsets":[8,24]})", 24),
       {"'v'", "overlaps tensor 'w'"}},
      {"truncated data",
       one(ok + R"(,"v":{"dtype":"F32","shape":[4],"data_offsets":[16,32]})", 20),
       {"'v'", "truncated"}},
  };
}

TEST(Safetensors, CorruptedFilesNameFileAndTensor) {
  const std::string dir = temp_dir("corrupt");
  int i = 0;
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.what);
    const std::string path = dir + "/case" + std::to_string(i++) + ".safetensors";
    write_bytes(path, c.bytes);
    std::vector<std::string> needles = c.needles;
    needles.push_back(path);
    auto check = [&](auto&& f) {
      try {
        f();
        ADD_FAILURE() << "expected an error";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::BadFormat) << e.what();
        for (const std::string& n : needles)
          EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
              << "'" << e.what() << "' lacks '" << n << "'";
      }
    };
    check([&] { SafetensorsReader::open_or_throw(path); });
    check([&] { parse_safetensors(as_bytes(c.bytes), path); });
  }
}

TEST(Safetensors, TruncatedRealFile) {
  const std::string dir = temp_dir("truncated_real");
  std::string raw;
  {
    std::ifstream in(kTiny + "/llama3-rope-scaled/model.safetensors", std::ios::binary);
    raw.assign(std::istreambuf_iterator<char>(in), {});
  }
  write_bytes(dir + "/model.safetensors", raw.substr(0, raw.size() - 100));
  // The last tensor in the file (sorted by offset) is the one that no longer fits.
  expect_error([&] { SafetensorsReader::open_or_throw(dir); }, ErrorKind::BadFormat,
               {dir + "/model.safetensors", "tensor '", "truncated"});
}

// ---- sharded checkpoints and directories ----

// Writes two shards and an index; `weight_map` entries as given.
void write_sharded(const std::string& dir, const std::string& weight_map) {
  const std::vector<float> a = {1, 2}, b = {3, 4};
  const std::vector<TensorToWrite> s1 = {{"a", DType::F32, {2}, as_bytes(a)}};
  const std::vector<TensorToWrite> s2 = {{"b", DType::F32, {2}, as_bytes(b)}};
  write_safetensors(dir + "/s1.safetensors", s1);
  write_safetensors(dir + "/s2.safetensors", s2);
  write_bytes(dir + "/model.safetensors.index.json", R"({"weight_map": )" + weight_map + "}");
}

TEST(Safetensors, ShardedIndexErrors) {
  const std::string dir = temp_dir("sharded");
  write_sharded(dir, R"({"a": "s1.safetensors", "b": "s2.safetensors"})");
  SafetensorsReader ok = SafetensorsReader::open_or_throw(dir);
  EXPECT_EQ(ok.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ok.get_or_throw("b").file, dir + "/s2.safetensors");

  write_sharded(dir, R"({"a": "s1.safetensors", "b": "missing.safetensors"})");
  expect_error([&] { SafetensorsReader::open_or_throw(dir); }, ErrorKind::NotFound,
               {"missing.safetensors"});

  write_sharded(dir, R"({"a": "s2.safetensors", "b": "s2.safetensors"})");
  expect_error([&] { SafetensorsReader::open_or_throw(dir); }, ErrorKind::BadFormat,
               {"model.safetensors.index.json", "'a'", "s2.safetensors"});

  write_sharded(dir, R"({"a": "s1.safetensors", "b": "../s2.safetensors"})");
  expect_error([&] { SafetensorsReader::open_or_throw(dir); }, ErrorKind::BadFormat,
               {"index.json", "'b'", "plain file name"});

  write_sharded(dir, R"(["a"])");
  expect_error([&] { SafetensorsReader::open_or_throw(dir); }, ErrorKind::BadFormat,
               {"index.json", "weight_map"});

  write_bytes(dir + "/model.safetensors.index.json", "{not json");
  expect_error([&] { SafetensorsReader::open_or_throw(dir); }, ErrorKind::BadFormat,
               {"index.json", "JSON"});
}

TEST(Safetensors, DuplicateTensorAcrossShards) {
  const std::string dir = temp_dir("dup_shards");
  const std::vector<float> a = {1, 2};
  const std::vector<TensorToWrite> t = {{"a", DType::F32, {2}, as_bytes(a)}};
  write_safetensors(dir + "/s1.safetensors", t);
  write_safetensors(dir + "/s2.safetensors", t);
  write_bytes(dir + "/model.safetensors.index.json",
              R"({"weight_map": {"a": "s1.safetensors", "x": "s2.safetensors"}})");
  expect_error([&] { SafetensorsReader::open_or_throw(dir); }, ErrorKind::BadFormat,
               {"'a'", "s1.safetensors", "s2.safetensors"});
}

TEST(Safetensors, DirectoryWithoutCheckpointListsWhatWasTried) {
  const std::string dir = temp_dir("empty_dir");
  expect_error([&] { SafetensorsReader::open_or_throw(dir); }, ErrorKind::NotFound,
               {dir, "model.safetensors", "model.safetensors.index.json"});
  expect_error([&] { SafetensorsReader::open_or_throw(dir + "/nope.safetensors"); },
               ErrorKind::NotFound, {dir + "/nope.safetensors"});
}

}  // namespace
}  // namespace akv
