#include "chat/generation_config.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>

#include "base/error.h"
#include "base/mapped_file.h"
#include "chat/json_depth.h"

namespace akv {
namespace {

constexpr std::uintmax_t kMaxFileBytes = 1u << 20;

[[noreturn]] void bad(const std::string& file, const std::string& field, const std::string& what) {
  throw Error(ErrorKind::BadFormat, file + ": " + field + ": " + what);
}

// The number at j[field] in [lo, hi] (lo excluded when open_lo), or nothing when absent or null.
std::optional<double> number_field(const nlohmann::json& j, const char* field, double lo, double hi,
                                   bool open_lo, const std::string& file) {
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) bad(file, field, "expected a number, got " + std::string(it->type_name()));
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi || (open_lo && v == lo))
    bad(file, field,
        "expected a number in " + std::string(open_lo ? "(" : "[") + std::to_string(lo) + ", " +
            std::to_string(hi) + "], got " + it->dump());
  return v;
}

std::int32_t id_value(const nlohmann::json& v, const std::string& file) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
      v.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max())
    bad(file, "eos_token_id", "expected token ids (integers >= 0), got " + v.dump());
  return static_cast<std::int32_t>(v.get<std::int64_t>());
}

}  // namespace

GenerationConfig parse_generation_config(const nlohmann::json& j, const std::string& file,
                                         bool sampling) {
  if (!j.is_object()) throw Error(ErrorKind::BadFormat, file + ": expected a JSON object");
  GenerationConfig g;
  if (const auto e = j.find("eos_token_id"); e != j.end() && !e->is_null()) {
    if (e->is_array()) {
      if (e->size() > 1024) bad(file, "eos_token_id", "more than 1024 ids");
      for (const auto& v : *e) g.eos_token_ids.push_back(id_value(v, file));
    } else {
      g.eos_token_ids.push_back(id_value(*e, file));
    }
  }
  if (!sampling) return g;
  SamplingOptions& s = g.sampling;
  auto note = [&](const char* field, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s %g", field, v);
    g.sampling_fields.emplace_back(buf);
  };
  auto set = [&](const char* field, double& out, double lo, double hi, bool open_lo) {
    if (const auto v = number_field(j, field, lo, hi, open_lo, file)) {
      out = *v;
      note(field, *v);
    }
  };
  set("temperature", s.temperature, 0.0, 2.0, false);
  set("top_p", s.top_p, 0.0, 1.0, true);
  if (const auto v = number_field(j, "top_k", 0.0, 1e6, false, file)) {
    if (*v != std::floor(*v)) bad(file, "top_k", "expected an integer, got " + j["top_k"].dump());
    s.top_k = static_cast<std::int32_t>(*v);
    note("top_k", *v);
  }
  set("min_p", s.min_p, 0.0, 1.0, false);
  set("repetition_penalty", s.repetition_penalty, 0.01, 10.0, false);
  if (const auto d = j.find("do_sample"); d != j.end() && !d->is_null()) {
    if (!d->is_boolean()) bad(file, "do_sample", "expected true or false, got " + d->dump());
    if (!d->get<bool>()) {  // transformers: greedy, whatever the temperature says
      s.temperature = 0.0;
      g.sampling_fields.assign({"do_sample false (greedy)"});
    }
  }
  return g;
}

GenerationConfig read_generation_config(const std::string& model_dir, bool sampling) {
  const std::string path = model_dir + "/generation_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return {};
  if (std::filesystem::file_size(path, ec) > kMaxFileBytes)
    throw Error(ErrorKind::BadFormat, path + ": larger than 1 MiB");
  const std::string text = read_file_or_throw(path);
  if (json_nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
    throw Error(ErrorKind::BadFormat,
                path + ": nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::BadFormat, path + ": not JSON: " + e.what());
  }
  return parse_generation_config(j, path, sampling);
}

std::string describe_sampling(const GenerationConfig& g) {
  std::string out;
  for (const std::string& part : g.sampling_fields) out += (out.empty() ? "" : ", ") + part;
  return out;
}

}  // namespace akv
