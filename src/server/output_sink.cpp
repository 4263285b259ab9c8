#include "server/output_sink.h"

namespace akv {

bool CollectingSink::start(const ReplyUsage& usage) {
  finish_.usage = usage;
  return true;
}

bool CollectingSink::text(std::string_view delta) {
  if (delta.empty()) return true;
  if (blocks_.empty() || blocks_.back().type != OutputBlock::Type::Text) blocks_.push_back({.type = OutputBlock::Type::Text});
  blocks_.back().text += delta;
  return true;
}

bool CollectingSink::thinking(std::string_view delta) {
  if (delta.empty()) return true;
  if (blocks_.empty() || blocks_.back().type != OutputBlock::Type::Thinking)
    blocks_.push_back({.type = OutputBlock::Type::Thinking});
  blocks_.back().text += delta;
  return true;
}

bool CollectingSink::tool_start(const std::string& id, const std::string& name) {
  blocks_.push_back({.type = OutputBlock::Type::ToolUse, .id = id, .name = name});
  return true;
}

bool CollectingSink::tool_args(std::string_view json_fragment) {
  if (!blocks_.empty() && blocks_.back().type == OutputBlock::Type::ToolUse) blocks_.back().args_json += json_fragment;
  return true;
}

bool CollectingSink::finish(const ReplyFinish& finish) {
  finish_ = finish;
  finished_ = true;
  return true;
}

}  // namespace akv
