#include "chat/generation_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"

namespace akv {
namespace {

using json = nlohmann::json;

std::string error_of(const char* text) {
  try {
    parse_generation_config(json::parse(text), "dir/generation_config.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadFormat);
    return e.what();
  }
  return "";
}

TEST(GenerationConfig, QwenStyleSamplingAndEosIds) {
  const GenerationConfig g = parse_generation_config(json::parse(R"({
    "bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
    "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})"),
                                                     "f");
  EXPECT_EQ(g.eos_token_ids, (std::vector<std::int32_t>{151645, 151643}));
  EXPECT_EQ(g.sampling.temperature, 0.6);
  EXPECT_EQ(g.sampling.top_k, 20);
  EXPECT_EQ(g.sampling.top_p, 0.95);
  EXPECT_EQ(g.sampling.min_p, 0.0);  // not in the file: the API's default
  EXPECT_EQ(g.sampling.repetition_penalty, 1.0);
  EXPECT_EQ(describe_sampling(g), "temperature 0.6, top_p 0.95, top_k 20");
}

TEST(GenerationConfig, DoSampleFalseIsGreedyAndAbsentFieldsKeepTheApiDefaults) {
  const GenerationConfig greedy = parse_generation_config(
      json::parse(R"({"eos_token_id": 2, "do_sample": false, "temperature": 0.9})"), "f");
  EXPECT_EQ(greedy.eos_token_ids, (std::vector<std::int32_t>{2}));
  EXPECT_EQ(greedy.sampling.temperature, 0.0);
  EXPECT_EQ(describe_sampling(greedy), "do_sample false (greedy)");
  const GenerationConfig bare =
      parse_generation_config(json::parse(R"({"eos_token_id": null, "top_p": null})"), "f");
  EXPECT_TRUE(bare.eos_token_ids.empty());
  EXPECT_EQ(bare.sampling.temperature, 1.0);
  EXPECT_EQ(bare.sampling.top_p, 1.0);
  EXPECT_TRUE(bare.sampling_fields.empty());
  // Without the sampling fields (serve --sampling-defaults api) only the ids are read, even from
  // a file whose sampling fields are out of range.
  const GenerationConfig ids_only = parse_generation_config(
      json::parse(R"({"eos_token_id": 7, "temperature": 9})"), "f", /*sampling=*/false);
  EXPECT_EQ(ids_only.eos_token_ids, (std::vector<std::int32_t>{7}));
  EXPECT_EQ(ids_only.sampling.temperature, 1.0);
}

TEST(GenerationConfig, BadFieldsNameTheFileAndTheField) {
  for (const auto& [text, field] : std::vector<std::pair<const char*, const char*>>{
           {R"({"temperature": "hot"})", "temperature"},
           {R"({"temperature": 3})", "temperature"},
           {R"({"top_p": 0})", "top_p"},
           {R"({"top_k": 2.5})", "top_k"},
           {R"({"top_k": -1})", "top_k"},
           {R"({"min_p": 1.5})", "min_p"},
           {R"({"repetition_penalty": 0})", "repetition_penalty"},
           {R"({"do_sample": "no"})", "do_sample"},
           {R"({"eos_token_id": [1, -2]})", "eos_token_id"},
           {R"({"eos_token_id": "2"})", "eos_token_id"},
       }) {
    const std::string e = error_of(text);
    EXPECT_NE(e.find("dir/generation_config.json"), std::string::npos) << text << ": " << e;
    EXPECT_NE(e.find(field), std::string::npos) << text << ": " << e;
  }
  EXPECT_NE(error_of("[1, 2]").find("expected a JSON object"), std::string::npos);
}

TEST(GenerationConfig, ReadsTheModelDirectorysFileOrNothing) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "akv_generation_config_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(read_generation_config(dir.string()).sampling_fields.empty());  // no file
  std::ofstream(dir / "generation_config.json") << R"({"temperature": 0.7, "top_p": 0.8})";
  EXPECT_EQ(read_generation_config(dir.string()).sampling.top_p, 0.8);
  std::ofstream(dir / "generation_config.json") << "{not json";
  try {
    read_generation_config(dir.string());
    ADD_FAILURE() << "no error for a file that is not JSON";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadFormat);
    EXPECT_NE(std::string(e.what()).find("generation_config.json: not JSON"), std::string::npos)
        << e.what();
  }
  std::ofstream(dir / "generation_config.json") << std::string(1000, '[') + std::string(1000, ']');
  try {
    read_generation_config(dir.string());
    ADD_FAILURE() << "no error for a file nested 1,000 levels deep";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadFormat);
    EXPECT_NE(std::string(e.what()).find("nests deeper"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace akv
