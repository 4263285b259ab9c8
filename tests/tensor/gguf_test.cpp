// GGUF reader: files written by the test (every value type, nested arrays, alignment, split
// sets, every tensor type's size) and a table of corrupted files that must fail with an error
// naming the file and the key or tensor.
#include "tensor/gguf.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>

#include "base/error.h"
#include "gguf_test_writer.h"

namespace akv {
namespace {

namespace fs = std::filesystem;
using test::GgufBytes;
using test::GgufTestWriter;

std::string temp_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/gguf_test_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::span<const std::uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

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

GgufTestWriter small_model() {
  GgufTestWriter w;
  w.kv_str("general.architecture", "llama");
  w.kv_u32("llama.block_count", 2);
  w.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.kv_bool("tokenizer.ggml.add_bos_token", true);
  w.kv_str_array("tokenizer.ggml.tokens", {"<s>", "a", "b"});
  w.kv_i32_array("tokenizer.ggml.token_type", {3, 1, -1});
  w.kv_f32_array("tokenizer.ggml.scores", {0.0f, -1.5f, 2.25f});
  w.tensor_f32("a", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  w.tensor_f32("b", {3}, {9, 10, 11});
  return w;
}

TEST(Gguf, ParsesMetadataAndTensors) {
  for (std::uint32_t version : {2u, 3u}) {
    GgufTestWriter w = small_model();
    w.version = version;
    const std::string bytes = w.bytes();
    const GgufFileInfo info = parse_gguf(as_bytes(bytes), "m.gguf");
    EXPECT_EQ(info.version, version);
    EXPECT_EQ(info.alignment, 32u);
    EXPECT_EQ(info.data_offset % 32, 0u);
    const GgufMetadata& md = info.metadata;
    EXPECT_EQ(md.get_string("general.architecture"), "llama");
    EXPECT_EQ(md.get_u32("llama.block_count"), 2u);
    EXPECT_EQ(md.get_i32("llama.block_count"), 2);
    EXPECT_EQ(md.get_u64("llama.block_count"), 2u);
    EXPECT_FLOAT_EQ(md.get_f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
    EXPECT_TRUE(md.get_bool("tokenizer.ggml.add_bos_token"));
    EXPECT_EQ(md.get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"<s>", "a", "b"}));
    EXPECT_EQ(md.get_i32_array("tokenizer.ggml.token_type"), (std::vector<std::int32_t>{3, 1, -1}));
    EXPECT_EQ(md.get_f32_array("tokenizer.ggml.scores"), (std::vector<float>{0.0f, -1.5f, 2.25f}));
    EXPECT_EQ(md.find_u32("absent"), std::nullopt);
    EXPECT_EQ(md.find_string("general.architecture"), "llama");

    ASSERT_EQ(info.tensors.size(), 2u);
    const GgufTensor& a = info.tensors[0];
    EXPECT_EQ(a.name, "a");
    EXPECT_EQ(a.shape(), (std::vector<std::int64_t>{2, 4}));
    EXPECT_EQ(a.row_elems(), 4);
    EXPECT_EQ(a.n_rows(), 2);
    ASSERT_EQ(a.bytes.size(), 32u);
    float v[8];
    std::memcpy(v, a.bytes.data(), 32);
    EXPECT_EQ(v[7], 8.0f);
    EXPECT_EQ(info.tensors[1].offset, 32u);  // aligned after a's 32 bytes
  }
}

TEST(Gguf, EveryScalarTypeAndNestedArrays) {
  GgufTestWriter w;
  w.kv_raw("u8", GgufValueType::U8, GgufTestWriter::enc(250, 1));
  w.kv_raw("i8", GgufValueType::I8, GgufTestWriter::enc(0xfe, 1));
  w.kv_raw("u16", GgufValueType::U16, GgufTestWriter::enc(65000, 2));
  w.kv_raw("i16", GgufValueType::I16, GgufTestWriter::enc(0x8000, 2));
  w.kv_i32("i32", -7);
  w.kv_u64("u64", 1ull << 40);
  w.kv_raw("i64", GgufValueType::I64, GgufTestWriter::enc(static_cast<std::uint64_t>(-5ll), 8));
  double d = 0.125;
  std::uint64_t dbits;
  std::memcpy(&dbits, &d, 8);
  w.kv_raw("f64", GgufValueType::F64, GgufTestWriter::enc(dbits, 8));
  // [[1, 2], [3]] of u16, then [["x"], []] of strings.
  std::string nested = GgufTestWriter::array_header(GgufValueType::Array, 2);
  nested += GgufTestWriter::array_header(GgufValueType::U16, 2) + GgufTestWriter::enc(1, 2) + GgufTestWriter::enc(2, 2);
  nested += GgufTestWriter::array_header(GgufValueType::U16, 1) + GgufTestWriter::enc(3, 2);
  w.kv_raw("nested", GgufValueType::Array, nested);
  std::string nested_str = GgufTestWriter::array_header(GgufValueType::Array, 2);
  nested_str += GgufTestWriter::array_header(GgufValueType::String, 1);
  GgufBytes::put_str(nested_str, "x");
  nested_str += GgufTestWriter::array_header(GgufValueType::String, 0);
  w.kv_raw("nested_str", GgufValueType::Array, nested_str);

  const std::string bytes = w.bytes();
  const GgufMetadata md = parse_gguf(as_bytes(bytes), "t.gguf").metadata;
  EXPECT_EQ(md.get_u32("u8"), 250u);
  EXPECT_EQ(md.get_i32("i8"), -2);
  EXPECT_EQ(md.get_u32("u16"), 65000u);
  EXPECT_EQ(md.get_i32("i16"), -32768);
  EXPECT_EQ(md.get_i32("i32"), -7);
  EXPECT_EQ(md.get_u64("u64"), 1ull << 40);
  EXPECT_EQ(md.get_i64("i64"), -5);
  EXPECT_EQ(md.get_f64("f64"), 0.125);
  const GgufValue& n = md.get_or_throw("nested");
  EXPECT_EQ(n.type_string(), "ARRAY[ARRAY]");
  ASSERT_EQ(n.arrays.size(), 2u);
  EXPECT_EQ(n.arrays[0].n_elems, 2u);
  EXPECT_EQ(n.arrays[0].raw, (std::vector<std::uint8_t>{1, 0, 2, 0}));
  EXPECT_EQ(n.arrays[1].raw, (std::vector<std::uint8_t>{3, 0}));
  const GgufValue& ns = md.get_or_throw("nested_str");
  ASSERT_EQ(ns.arrays.size(), 2u);
  EXPECT_EQ(ns.arrays[0].strings, (std::vector<std::string>{"x"}));
  EXPECT_TRUE(ns.arrays[1].strings.empty());
}

TEST(Gguf, GetterErrorsNameTheKey) {
  const std::string bytes = small_model().bytes();
  const GgufMetadata md = parse_gguf(as_bytes(bytes), "m.gguf").metadata;
  expect_error([&] { md.get_string("nope"); }, ErrorKind::NotFound, {"m.gguf", "'nope'", "missing"});
  expect_error([&] { md.get_u32("general.architecture"); }, ErrorKind::BadFormat,
               {"m.gguf", "general.architecture", "STRING", "expected UINT32"});
  expect_error([&] { md.get_string_array("tokenizer.ggml.scores"); }, ErrorKind::BadFormat,
               {"tokenizer.ggml.scores", "ARRAY[FLOAT32]"});
  expect_error([&] { md.get_f32_array("tokenizer.ggml.tokens"); }, ErrorKind::BadFormat,
               {"tokenizer.ggml.tokens", "ARRAY[STRING]"});
  expect_error([&] { md.get_i32_array("tokenizer.ggml.scores"); }, ErrorKind::BadFormat, {"scores"});
  expect_error([&] { md.get_bool("llama.block_count"); }, ErrorKind::BadFormat, {"llama.block_count"});
  expect_error([&] { md.find_u32("general.architecture"); }, ErrorKind::BadFormat, {"general.architecture"});
  GgufTestWriter w;
  w.kv_i32("neg", -1);
  const std::string b2 = w.bytes();
  const GgufMetadata md2 = parse_gguf(as_bytes(b2), "n.gguf").metadata;
  expect_error([&] { md2.get_u32("neg"); }, ErrorKind::BadFormat, {"'neg'", "out of range"});
}

TEST(Gguf, AlignmentAndEveryTensorType) {
  struct T {
    GgmlType type;
    std::uint64_t ne0;
    std::size_t bytes;  // for two rows
  };
  const T types[] = {{GgmlType::F32, 4, 32},     {GgmlType::F16, 4, 16},     {GgmlType::BF16, 4, 16},
                     {GgmlType::Q4_0, 32, 36},   {GgmlType::Q4_1, 32, 40},   {GgmlType::Q5_0, 32, 44},
                     {GgmlType::Q5_1, 32, 48},   {GgmlType::Q8_0, 64, 136},  {GgmlType::Q2_K, 256, 168},
                     {GgmlType::Q3_K, 256, 220}, {GgmlType::Q4_K, 256, 288}, {GgmlType::Q5_K, 256, 352},
                     {GgmlType::Q6_K, 256, 420}, {GgmlType::IQ4_NL, 32, 36}, {GgmlType::IQ4_XS, 256, 272},
                     {GgmlType::MXFP4, 32, 34}};
  GgufTestWriter w;
  w.alignment = 64;
  w.kv_u32("general.alignment", 64);
  for (const T& t : types)
    w.tensor({std::string(ggml_type_name(t.type)), t.type, {t.ne0, 2}, std::string(t.bytes, 'x'), -1});
  const std::string bytes = w.bytes();
  const GgufFileInfo info = parse_gguf(as_bytes(bytes), "q.gguf");
  EXPECT_EQ(info.alignment, 64u);
  EXPECT_EQ(info.data_offset % 64, 0u);
  ASSERT_EQ(info.tensors.size(), std::size(types));
  for (std::size_t i = 0; i < std::size(types); ++i) {
    EXPECT_EQ(info.tensors[i].type, types[i].type);
    EXPECT_EQ(info.tensors[i].bytes.size(), types[i].bytes) << ggml_type_name(types[i].type);
    EXPECT_EQ(info.tensors[i].offset % 64, 0u);
  }
}

// One corruption per row: the writer's knobs or a byte patch, and what the error must say.
struct BadCase {
  std::string label;
  std::function<std::string()> make;
  ErrorKind kind;
  std::vector<std::string> needles;
};

TEST(Gguf, BadFilesNameFileAndKeyOrTensor) {
  const std::vector<BadCase> cases = {
      {"wrong magic", [] { auto w = small_model(); w.magic = "GGML"; return w.bytes(); },
       ErrorKind::BadFormat, {"wrong magic"}},
      {"version 1", [] { auto w = small_model(); w.version = 1; return w.bytes(); },
       ErrorKind::Unsupported, {"version 1"}},
      {"big endian", [] { auto w = small_model(); w.version = 0x03000000; return w.bytes(); },
       ErrorKind::Unsupported, {"big-endian"}},
      {"truncated header", [] { return small_model().bytes().substr(0, 60); },
       ErrorKind::BadFormat, {"truncated"}},
      {"truncated data", [] { auto b = small_model().bytes(); return b.substr(0, b.size() - 4); },
       ErrorKind::BadFormat, {"tensor 'b'", "past the data section"}},
      {"huge tensor count", [] { auto w = small_model(); w.n_tensors_override = 1ll << 40; return w.bytes(); },
       ErrorKind::BadFormat, {"tensor count"}},
      {"huge kv count", [] { auto w = small_model(); w.n_kv_override = 1ll << 40; return w.bytes(); },
       ErrorKind::BadFormat, {"metadata count"}},
      {"unknown value type", [] { GgufTestWriter w; w.kv_raw("k.x", static_cast<GgufValueType>(13), ""); return w.bytes(); },
       ErrorKind::BadFormat, {"'k.x'", "unknown value type 13"}},
      {"string too long", [] { GgufTestWriter w; w.kv_raw("k.s", GgufValueType::String, GgufTestWriter::enc(1ull << 62, 8)); return w.bytes(); },
       ErrorKind::BadFormat, {"'k.s'", "exceeds"}},
      {"array count overflow", [] { GgufTestWriter w; w.kv_raw("k.a", GgufValueType::Array, GgufTestWriter::array_header(GgufValueType::U64, 1ull << 61)); return w.bytes(); },
       ErrorKind::BadFormat, {"'k.a'", "past the end"}},
      {"nesting too deep", [] {
         std::string v;
         for (int i = 0; i < 20; ++i) v += GgufTestWriter::array_header(GgufValueType::Array, 1);
         GgufTestWriter w; w.kv_raw("k.deep", GgufValueType::Array, v); return w.bytes(); },
       ErrorKind::BadFormat, {"'k.deep'", "nested deeper"}},
      {"bad bool", [] { GgufTestWriter w; w.kv_raw("k.b", GgufValueType::Bool, GgufTestWriter::enc(2, 1)); return w.bytes(); },
       ErrorKind::BadFormat, {"'k.b'", "bool"}},
      {"duplicate key", [] { auto w = small_model(); w.kv_u32("llama.block_count", 3); return w.bytes(); },
       ErrorKind::BadFormat, {"'llama.block_count'", "duplicate key"}},
      {"bad alignment", [] { GgufTestWriter w; w.kv_u32("general.alignment", 48); return w.bytes(); },
       ErrorKind::BadFormat, {"general.alignment", "power of two"}},
      {"alignment type", [] { GgufTestWriter w; w.kv_u64("general.alignment", 32); return w.bytes(); },
       ErrorKind::BadFormat, {"general.alignment", "UINT64"}},
      {"duplicate tensor", [] { auto w = small_model(); w.tensor_f32("a", {1}, {0}); return w.bytes(); },
       ErrorKind::BadFormat, {"tensor 'a'", "duplicate tensor name"}},
      {"unknown tensor type", [] { GgufTestWriter w; w.tensor({"w.q", static_cast<GgmlType>(16), {256}, std::string(66, 0), -1}); return w.bytes(); },
       ErrorKind::Unsupported, {"tensor 'w.q'", "type 16"}},
      {"row not whole blocks", [] { GgufTestWriter w; w.tensor({"w.r", GgmlType::Q8_0, {48}, std::string(51, 0), -1}); return w.bytes(); },
       ErrorKind::BadFormat, {"tensor 'w.r'", "multiple of Q8_0"}},
      {"too many dims", [] { GgufTestWriter w; w.tensor({"w.d", GgmlType::F32, {1, 1, 1, 1, 1}, std::string(4, 0), -1}); return w.bytes(); },
       ErrorKind::BadFormat, {"tensor 'w.d'", "5 dimensions"}},
      {"element count overflow", [] { GgufTestWriter w; w.tensor({"w.o", GgmlType::F32, {1ull << 40, 1ull << 40}, "", 0}); return w.bytes(); },
       ErrorKind::BadFormat, {"tensor 'w.o'", "overflows"}},
      {"offset outside file", [] { GgufTestWriter w; w.tensor({"w.f", GgmlType::F32, {2}, "", 1ll << 50}); return w.bytes(); },
       ErrorKind::BadFormat, {"tensor 'w.f'", "past the data section"}},
      {"misaligned offset", [] { GgufTestWriter w; w.tensor({"w.m", GgmlType::F32, {2}, std::string(8, 0), 4}); return w.bytes(); },
       ErrorKind::BadFormat, {"tensor 'w.m'", "alignment"}},
      {"overlapping tensors", [] {
         GgufTestWriter w;
         w.tensor({"w.x", GgmlType::F32, {16}, std::string(64, 0), 0});
         w.tensor({"w.y", GgmlType::F32, {8}, std::string(32, 0), 32});
         return w.bytes(); },
       ErrorKind::BadFormat, {"tensor 'w.y'", "overlaps tensor 'w.x'"}},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string bytes = c.make();
    std::vector<std::string> needles = c.needles;
    try {
      parse_gguf(as_bytes(bytes), "bad.gguf");
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), c.kind) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.gguf"), std::string::npos) << e.what();
      for (const std::string& n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << e.what() << "' lacks '" << n << "'";
    }
  }
}

// Every prefix of a valid file is rejected cleanly (never a crash or an out-of-bounds read).
TEST(Gguf, EveryTruncationFails) {
  const std::string bytes = small_model().bytes();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::string cut = bytes.substr(0, n);
    EXPECT_THROW(parse_gguf(as_bytes(cut), "cut.gguf"), Error) << n;
  }
}

TEST(Gguf, ReaderMapsAFile) {
  const std::string dir = temp_dir("single");
  small_model().write(dir + "/m.gguf");
  const GgufReader r = GgufReader::open_or_throw(dir + "/m.gguf");
  EXPECT_EQ(r.version(), 3u);
  EXPECT_EQ(r.n_files(), 1u);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.metadata().get_string("general.architecture"), "llama");
  EXPECT_EQ(r.get_or_throw("b").numel(), 3);
  EXPECT_EQ(r.find("c"), nullptr);
  expect_error([&] { r.get_or_throw("c"); }, ErrorKind::NotFound, {"m.gguf", "'c'"});
  expect_error([&] { GgufReader::open_or_throw(dir + "/absent.gguf"); }, ErrorKind::NotFound, {"absent.gguf"});
  EXPECT_TRUE(is_gguf_path(dir + "/m.gguf"));
  EXPECT_FALSE(is_gguf_path(dir));
}

TEST(Gguf, SplitNames) {
  const auto s = parse_gguf_split_name("/d/model-Q4_K-00002-of-00003.gguf");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->index, 2);
  EXPECT_EQ(s->count, 3);
  EXPECT_EQ(s->prefix, "/d/model-Q4_K");
  EXPECT_EQ(gguf_split_path(s->prefix, 1, 3), "/d/model-Q4_K-00001-of-00003.gguf");
  EXPECT_FALSE(parse_gguf_split_name("/d/model.gguf").has_value());
  EXPECT_FALSE(parse_gguf_split_name("/d/model-00004-of-00003.gguf").has_value());
  EXPECT_FALSE(parse_gguf_split_name("/d/model-0000a-of-00003.gguf").has_value());
}

GgufTestWriter split_part(int no, int count, const std::string& tensor) {
  GgufTestWriter w;
  if (no == 0) w.kv_str("general.architecture", "llama");
  w.kv_raw("split.no", GgufValueType::U16, GgufTestWriter::enc(static_cast<std::uint64_t>(no), 2));
  w.kv_raw("split.count", GgufValueType::U16, GgufTestWriter::enc(static_cast<std::uint64_t>(count), 2));
  w.tensor_f32(tensor, {2}, {static_cast<float>(no), 1});
  return w;
}

TEST(Gguf, ReaderJoinsASplitSet) {
  const std::string dir = temp_dir("split");
  const std::string prefix = dir + "/m";
  for (int i = 0; i < 3; ++i) split_part(i, 3, "t" + std::to_string(i)).write(gguf_split_path(prefix, i + 1, 3));
  const GgufReader r = GgufReader::open_or_throw(gguf_split_path(prefix, 1, 3));
  EXPECT_EQ(r.n_files(), 3u);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"t0", "t1", "t2"}));
  EXPECT_EQ(r.metadata().get_string("general.architecture"), "llama");
  EXPECT_NE(r.get_or_throw("t2").file.find("-00003-of-00003.gguf"), std::string::npos);
  float v[2];
  std::memcpy(v, r.get_or_throw("t2").bytes.data(), 8);
  EXPECT_EQ(v[0], 2.0f);

  expect_error([&] { GgufReader::open_or_throw(gguf_split_path(prefix, 2, 3)); }, ErrorKind::InvalidArgument,
               {"00002-of-00003", "pass the first"});
  // A repeated tensor across parts, a wrong part number and a missing part.
  split_part(2, 3, "t0").write(gguf_split_path(prefix, 3, 3));
  expect_error([&] { GgufReader::open_or_throw(gguf_split_path(prefix, 1, 3)); }, ErrorKind::BadFormat,
               {"00003-of-00003.gguf", "tensor 't0'", "also present in"});
  split_part(1, 3, "t2").write(gguf_split_path(prefix, 3, 3));
  expect_error([&] { GgufReader::open_or_throw(gguf_split_path(prefix, 1, 3)); }, ErrorKind::BadFormat,
               {"00003-of-00003.gguf", "split.no"});
  fs::remove(gguf_split_path(prefix, 3, 3));
  expect_error([&] { GgufReader::open_or_throw(gguf_split_path(prefix, 1, 3)); }, ErrorKind::NotFound,
               {"00003-of-00003.gguf"});
}

// The vocab-only files llama.cpp ships for its tokenizer tests (written by gguf-py): real
// metadata with large string arrays, merges, scores and token types.
TEST(Gguf, ParsesRealVocabFiles) {
  const std::string src = std::string(AGENTKV_TESTDATA) + "/vocab-tests/llama.cpp/gguf/";
  const std::string dir = temp_dir("vocab");
  for (const std::string name : {"ggml-vocab-llama-spm", "ggml-vocab-phi-3"}) {
    SCOPED_TRACE(name);
    const std::string xz = src + name + ".gguf.xz";
    if (!fs::exists(xz)) GTEST_SKIP() << xz << " is not present";
    const std::string path = dir + "/" + name + ".gguf";
    ASSERT_EQ(std::system(("xz -dkc '" + xz + "' > '" + path + "'").c_str()), 0);
    const GgufReader r = GgufReader::open_or_throw(path);
    const GgufMetadata& md = r.metadata();
    EXPECT_EQ(md.get_string("tokenizer.ggml.model"), "llama");
    const std::vector<std::string> tokens = md.get_string_array("tokenizer.ggml.tokens");
    EXPECT_GE(tokens.size(), 32000u);
    EXPECT_EQ(md.get_f32_array("tokenizer.ggml.scores").size(), tokens.size());
    EXPECT_EQ(md.get_i32_array("tokenizer.ggml.token_type").size(), tokens.size());
    EXPECT_EQ(tokens[md.get_u32("tokenizer.ggml.bos_token_id")], "<s>");
  }
}

}  // namespace
}  // namespace akv
