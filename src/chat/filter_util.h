// Argument helpers shared by the filter files (filters.cpp, sequence_filters.cpp). Internal.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chat/interpreter.h"

namespace akv::jinja {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);

// Filter arguments: positional index `i` (after the operand) or keyword `name`.
bool arg_bool(const CallArgs& a, size_t i, std::string_view name, bool dflt);
int64_t arg_int(Interpreter& in, const CallArgs& a, size_t i, std::string_view name, int64_t dflt);
std::string arg_str(const CallArgs& a, size_t i, std::string_view name, std::string dflt);
// A list that behaves as the generator Jinja's select/map/items return (see ListData).
Value generator(std::vector<Value> items);
// Jinja's attribute getter: "a.b.0" walks items and attributes.
Value get_path(Interpreter& in, const Value& item, const Value& attribute);
// Adds map, select, reject, selectattr, rejectattr, unique, sort, dictsort, batch, items, join,
// first, last, list, reverse, sum, min, max.
void add_sequence_filters(std::unordered_map<std::string, FilterFn>& table);

}  // namespace akv::jinja
