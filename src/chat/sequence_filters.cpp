// Jinja2's sequence filters: map/select/reject(attr), unique, sort, dictsort, batch, join,
// first/last, sum/min/max, items. select/map/items return generator-like lists, as in Jinja.
#include <algorithm>

#include "chat/filter_util.h"
#include "chat/text.h"

namespace akv::jinja {
namespace {

const Value* arg(const CallArgs& a, size_t i, std::string_view name) {
  return a.get(i, name);
}

// Sort key: strings lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.get_string()));
  return v;
}

void sort_values(Interpreter& in, std::vector<Value>& items, std::vector<Value> keys,
                 bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  in.step(static_cast<int64_t>(items.size()));
  std::string error;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    // Jinja sorts by [key] lists: equal keys (None == None) never reach `<`.
    if (keys[x] == keys[y]) return false;
    const std::optional<int> c =
        reverse ? compare_values(keys[y], keys[x]) : compare_values(keys[x], keys[y]);
    if (!c) {
      error = std::string("TypeError: '<' not supported between instances of '") +
              keys[x].type_name() + "' and '" + keys[y].type_name() + "'";
      return false;
    }
    return *c < 0;
  });
  if (!error.empty()) in.fail(error);
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(std::move(items[i]));
  items = std::move(sorted);
}

Value f_items(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_undefined()) return generator({});
  if (!v.is_dict()) in.fail("TypeError: Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, e] : v.get_dict().items) out.push_back(Value::tuple({k, e}));
  return generator(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string sep = arg_str(a, 0, "d", "");
  const Value* attribute = arg(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : in.iterate(v)) {
    if (!first) out += sep;
    first = false;
    (attribute ? get_path(in, item, *attribute) : item).append_str(out);
    in.check_size(out);
  }
  return Value(std::move(out));
}

Value f_first(Interpreter& in, const Value& v, CallArgs&) {
  std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("first") : items.front();
}

Value f_last(Interpreter& in, const Value& v, CallArgs&) {
  std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("last") : items.back();
}

Value f_list(Interpreter& in, const Value& v, CallArgs&) {
  return Value::list(in.iterate(v));
}

Value f_reverse(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::vector<Value> chars = in.iterate(v);
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->get_string();
    return Value(std::move(out));
  }
  std::vector<Value> items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (const Value* attribute = arg(a, 99, "attribute")) {
    const Value* dflt = arg(a, 99, "default");
    for (const Value& item : in.iterate(v)) {
      Value x = get_path(in, item, *attribute);
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return generator(std::move(out));
  }
  if (a.positional.empty()) in.fail("FilterArgumentError: map requires a filter argument");
  const std::string name = a.positional[0].str();
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : in.iterate(v)) out.push_back(in.run_filter(name, item, rest));
  return generator(std::move(out));
}

Value select_impl(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool keep) {
  size_t next = 0;
  const Value* attribute = nullptr;
  if (by_attr) {
    if (a.positional.empty()) in.fail("TypeError: missing attribute argument");
    attribute = &a.positional[next++];
  }
  std::string test;
  if (next < a.positional.size()) test = a.positional[next++].str();
  CallArgs rest;
  rest.positional.assign(
      a.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, a.positional.size())),
      a.positional.end());
  rest.keyword = a.keyword;
  std::vector<Value> out;
  for (const Value& item : in.iterate(v)) {
    const Value x = attribute ? get_path(in, item, *attribute) : item;
    const bool pass = test.empty() ? x.truthy() : in.run_test(test, x, rest);
    if (pass == keep) out.push_back(item);
  }
  return generator(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, true);
}
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, false);
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
  const Value* attribute = arg(a, 1, "attribute");
  std::vector<Value> out, seen;
  for (const Value& item : in.iterate(v)) {
    in.step(static_cast<int64_t>(seen.size()));
    const Value key = sort_key(attribute ? get_path(in, item, *attribute) : item, case_sensitive);
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  const bool reverse = arg_bool(a, 0, "reverse", false);
  const bool case_sensitive = arg_bool(a, 1, "case_sensitive", false);
  const Value* attribute = arg(a, 2, "attribute");
  std::vector<Value> items = in.iterate(v);
  std::vector<Value> keys;
  for (const Value& item : items)
    keys.push_back(sort_key(attribute ? get_path(in, item, *attribute) : item, case_sensitive));
  sort_values(in, items, std::move(keys), reverse);
  return Value::list(std::move(items));
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& a) {
  const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
  const std::string by = arg_str(a, 1, "by", "key");
  const bool reverse = arg_bool(a, 2, "reverse", false);
  if (!v.is_dict()) in.fail("TypeError: dictsort expects a mapping");
  std::vector<Value> items, keys;
  for (const auto& [k, e] : v.get_dict().items) {
    items.push_back(Value::tuple({k, e}));
    keys.push_back(sort_key(by == "value" ? e : k, case_sensitive));
  }
  sort_values(in, items, std::move(keys), reverse);
  return Value::list(std::move(items));
}

Value f_batch(Interpreter& in, const Value& v, CallArgs& a) {
  const int64_t n = arg_int(in, a, 0, "linecount", 1);
  if (n <= 0) in.fail("ValueError: batch size must be positive");
  const Value* fill = arg(a, 1, "fill_with");
  std::vector<Value> out, cur;
  for (const Value& item : in.iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    while (fill && !fill->is_none() && static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* attribute = arg(a, 0, "attribute");
  const Value* start = arg(a, 1, "start");
  Value total = start ? *start : Value(0);
  for (const Value& item : in.iterate(v)) {
    const Value x = attribute ? get_path(in, item, *attribute) : item;
    if (!total.is_number() || !x.is_number())
      in.fail("TypeError: unsupported operand type(s) for +");
    if (total.is_float() || x.is_float())
      total = Value(total.to_double() + x.to_double());
    else {
      int64_t r;
      if (__builtin_add_overflow(static_cast<int64_t>(total.to_double()),
                                 static_cast<int64_t>(x.to_double()), &r))
        in.fail("OverflowError: integer overflow");
      total = Value(r);
    }
  }
  return total;
}

Value min_max(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
  const Value* attribute = arg(a, 1, "attribute");
  std::vector<Value> items = in.iterate(v);
  if (items.empty()) return Value::undefined(want_max ? "max" : "min");
  size_t best = 0;
  auto key = [&](size_t i) {
    return sort_key(attribute ? get_path(in, items[i], *attribute) : items[i], case_sensitive);
  };
  for (size_t i = 1; i < items.size(); ++i) {
    const std::optional<int> c = compare_values(key(i), key(best));
    if (!c) in.fail("TypeError: values are not comparable");
    if (want_max ? *c == 1 : *c == -1) best = i;
  }
  return items[best];
}
Value f_min(Interpreter& in, const Value& v, CallArgs& a) {
  return min_max(in, v, a, false);
}
Value f_max(Interpreter& in, const Value& v, CallArgs& a) {
  return min_max(in, v, a, true);
}

}  // namespace

void add_sequence_filters(std::unordered_map<std::string, FilterFn>& table) {
  table.insert({
      {"items", f_items},
      {"join", f_join},
      {"first", f_first},
      {"last", f_last},
      {"list", f_list},
      {"reverse", f_reverse},
      {"map", f_map},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"unique", f_unique},
      {"sort", f_sort},
      {"dictsort", f_dictsort},
      {"batch", f_batch},
      {"sum", f_sum},
      {"min", f_min},
      {"max", f_max},
  });
}

}  // namespace akv::jinja
