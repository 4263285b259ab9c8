// Encode throughput on a ~20K-token agent-style prompt (templates, JSON, multilingual text
// from ../shared/testdata), single thread, for the Llama 3 and Qwen3 tokenizers: the fast path
// (hot and cold word cache) beside the reference O(n^2) merge loop without a cache.
// Usage: tokenizer_bench [n_iterations]. Results: docs/perf/tokenizer.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const fs::path kTestdata = AGENTKV_TESTDATA;
const fs::path kUnpacked = AGENTKV_TESTDATA_UNPACKED;
constexpr size_t kTargetTokens = 20000;

fs::path unpack(const std::string& relative) {
  fs::path plain = kTestdata / relative;
  if (fs::exists(plain)) return plain;
  fs::path out = kUnpacked / relative;
  if (!fs::exists(out)) {
    fs::create_directories(out.parent_path());
    std::string cmd = "xz -dkc '" + plain.string() + ".xz' > '" + out.string() + "'";
    if (std::system(cmd.c_str()) != 0) std::exit(1);
  }
  return out;
}

// Agent-like text: chat templates (code), golden strings (multilingual, emoji, whitespace),
// rendered conversations (JSON), data-source notes (prose).
std::string build_corpus() {
  std::string text;
  std::vector<fs::path> templates;
  for (const auto& e : fs::directory_iterator(kTestdata / "chat-templates/templates/llama.cpp"))
    templates.push_back(e.path());
  std::sort(templates.begin(), templates.end());
  for (const auto& p : templates) text += akv::read_file_or_throw(p.string()) + "\n";
  auto golden = nlohmann::json::parse(akv::read_file_or_throw((kTestdata / "goldens/tokenization/llama3.json").string()));
  for (const auto& c : golden["cases"]) text += c["text"].get<std::string>() + "\n";
  text += akv::read_file_or_throw((kTestdata / "SOURCES.md").string());
  text += akv::read_file_or_throw((kTestdata / "goldens/chat_templates.json").string());
  return text;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void bench(const std::string& name, const std::string& corpus, int n_iterations) {
  std::string dir = "tokenizers/" + name + "/";
  auto t0 = Clock::now();
  akv::Tokenizer tok = akv::Tokenizer::load_files_or_throw(unpack(dir + "tokenizer.json").string(),
                                                           unpack(dir + "tokenizer_config.json").string());
  double load_ms = ms_since(t0);
  // Cut the corpus so this tokenizer sees about kTargetTokens tokens.
  std::string prompt = corpus;
  for (int step = 0; step < 4; ++step) {
    size_t n_tokens = tok.encode_reference(prompt, false).size();
    prompt = corpus.substr(0, std::min(corpus.size(), prompt.size() * kTargetTokens / n_tokens));
    while (!prompt.empty() && (static_cast<unsigned char>(prompt.back()) & 0xC0) == 0x80) prompt.pop_back();
  }

  akv::Tokenizer fresh = akv::Tokenizer::load_files_or_throw(unpack(dir + "tokenizer.json").string(), "");
  t0 = Clock::now();
  auto ids = fresh.encode(prompt, false);
  double cold_ms = ms_since(t0);

  std::vector<double> hot, reference;
  for (int i = 0; i < n_iterations; ++i) {
    t0 = Clock::now();
    auto again = tok.encode(prompt, false);
    hot.push_back(ms_since(t0));
    if (again != ids) std::printf("MISMATCH between runs\n");
  }
  for (int i = 0; i < std::max(1, n_iterations / 4); ++i) {
    t0 = Clock::now();
    auto ref = tok.encode_reference(prompt, false);
    reference.push_back(ms_since(t0));
    if (ref != ids) std::printf("MISMATCH fast vs reference\n");
  }
  std::sort(hot.begin(), hot.end());
  std::sort(reference.begin(), reference.end());
  double hot_median = hot[hot.size() / 2];
  double ref_median = reference[reference.size() / 2];
  std::printf("%-7s load %7.1f ms | %zu bytes -> %zu tokens | hot median %6.2f ms (min %6.2f) = %5.2f M tok/s | "
              "cold cache %6.2f ms | reference %7.2f ms (x%.1f)\n",
              name.c_str(), load_ms, prompt.size(), ids.size(), hot_median, hot.front(),
              ids.size() / hot_median / 1e3, cold_ms, ref_median, ref_median / hot_median);
}

}  // namespace

int main(int argc, char** argv) {
  int n_iterations = argc > 1 ? std::atoi(argv[1]) : 20;
  std::string corpus = build_corpus();
  for (const char* name : {"llama3", "qwen3"}) bench(name, corpus, n_iterations);
  return 0;
}
