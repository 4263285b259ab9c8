// Post-processor parsing (single-sequence templates) and application.
#include "tokenizer/post_processor.h"

#include "tokenizer/json_util.h"

namespace akv::tok {

void PostProcessor::apply(std::vector<int32_t>& ids, bool add_special_tokens) const {
  if (!add_special_tokens) return;
  switch (kind) {
    case Kind::None: break;
    case Kind::Template:
      ids.insert(ids.begin(), prefix_ids.begin(), prefix_ids.end());
      ids.insert(ids.end(), suffix_ids.begin(), suffix_ids.end());
      break;
    case Kind::Sequence:
      for (const PostProcessor& child : children) child.apply(ids, add_special_tokens);
      break;
  }
}

namespace {

PostProcessor parse_template(const Json& j, const std::string& where) {
  PostProcessor p;
  p.kind = PostProcessor::Kind::Template;
  auto single = j.find("single");
  if (single == j.end() || !single->is_array()) throw_bad_field(where + ".single", "missing or not an array");
  auto specials = j.find("special_tokens");
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& item = (*single)[i];
    std::string at = where + ".single[" + std::to_string(i) + "]";
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken") || !item["SpecialToken"].is_object())
      throw_bad_field(at, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    std::string name = json_string(item["SpecialToken"], "id", at + ".SpecialToken");
    if (specials == j.end() || !specials->contains(name))
      throw_bad_field(where + ".special_tokens", "no entry for '" + name + "'");
    const Json& ids = (*specials)[name]["ids"];
    if (!ids.is_array()) throw_bad_field(where + ".special_tokens." + name + ".ids", "not an array");
    for (const Json& id : ids) {
      if (!id.is_number_integer()) throw_bad_field(where + ".special_tokens." + name + ".ids", "not an integer");
      (seen_sequence ? p.suffix_ids : p.prefix_ids).push_back(id.get<int32_t>());
    }
  }
  return p;
}

// Bert: [CLS] A [SEP]; Roberta: <s> A </s>. Both store ["token", id] pairs.
PostProcessor parse_cls_sep(const Json& j, const std::string& where) {
  PostProcessor p;
  p.kind = PostProcessor::Kind::Template;
  for (const char* key : {"cls", "sep"}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer())
      throw_bad_field(where + "." + key, "expected [token, id]");
    (std::string(key) == "cls" ? p.prefix_ids : p.suffix_ids).push_back((*it)[1].get<int32_t>());
  }
  return p;
}

}  // namespace

PostProcessor parse_post_processor(const Json& j, const std::string& where) {
  if (j.is_null()) return {};
  std::string type = json_type(j, where);
  if (type == "TemplateProcessing") return parse_template(j, where);
  if (type == "BertProcessing" || type == "RobertaProcessing") return parse_cls_sep(j, where);
  if (type == "ByteLevel") return {};
  if (type == "Sequence") {
    PostProcessor p;
    p.kind = PostProcessor::Kind::Sequence;
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) throw_bad_field(where + ".processors", "missing or not an array");
    for (size_t i = 0; i < it->size(); ++i)
      p.children.push_back(parse_post_processor((*it)[i], where + ".processors[" + std::to_string(i) + "]"));
    return p;
  }
  throw Error(ErrorKind::Unsupported, where + ": post_processor type '" + type + "' is not supported");
}

}  // namespace akv::tok
