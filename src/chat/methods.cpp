// Python methods that templates call on values (str.startswith, str.split, dict.get,
// dict.items, list.append, ...) and the global functions transformers provides (range,
// namespace, dict, raise_exception, strftime_now).
#include <ctime>
#include <unordered_map>

#include "base/error.h"
#include "chat/interpreter.h"
#include "chat/text.h"

namespace akv::jinja {
namespace {

using MethodFn = Value (*)(Interpreter&, const Value& self, CallArgs&);

std::optional<std::string> opt_str(Interpreter& in, const CallArgs& a, size_t i,
                                   std::string_view name) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string())
    in.fail(std::string("TypeError: must be str or None, not ") + v->type_name());
  return v->get_string();
}

int64_t opt_int(Interpreter& in, const CallArgs& a, size_t i, std::string_view name, int64_t dflt) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool())
    in.fail(std::string("TypeError: an integer is required, got ") + v->type_name());
  return v->is_bool() ? v->get_bool() : v->get_int();
}

const Value& required(Interpreter& in, const CallArgs& a, size_t i, std::string_view name) {
  const Value* v = a.get(i, name);
  if (!v) in.fail("TypeError: missing required argument '" + std::string(name) + "'");
  return *v;
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::list(std::move(out));
}

bool affix_match(Interpreter& in, const Value& self, const CallArgs& a, bool prefix) {
  const Value& arg = required(in, a, 0, prefix ? "prefix" : "suffix");
  const std::string& s = self.get_string();
  auto one = [&](const Value& x) {
    if (!x.is_string())
      in.fail(std::string(
                  "TypeError: startswith/endswith argument must be str or a tuple of str, not ") +
              x.type_name());
    const std::string& t = x.get_string();
    if (t.size() > s.size()) return false;
    return prefix ? s.compare(0, t.size(), t) == 0
                  : s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  if (arg.is_list()) {
    for (const Value& x : arg.get_list().items) {
      if (one(x)) return true;
    }
    return false;
  }
  return one(arg);
}

Value s_startswith(Interpreter& in, const Value& self, CallArgs& a) {
  return Value(affix_match(in, self, a, true));
}
Value s_endswith(Interpreter& in, const Value& self, CallArgs& a) {
  return Value(affix_match(in, self, a, false));
}
Value s_split(Interpreter& in, const Value& self, CallArgs& a) {
  const auto sep = opt_str(in, a, 0, "sep");
  if (sep && sep->empty()) in.fail("ValueError: empty separator");
  return string_list(py_split(self.get_string(), sep, opt_int(in, a, 1, "maxsplit", -1)));
}
Value s_rsplit(Interpreter& in, const Value& self, CallArgs& a) {
  const auto sep = opt_str(in, a, 0, "sep");
  if (sep && sep->empty()) in.fail("ValueError: empty separator");
  return string_list(py_rsplit(self.get_string(), sep, opt_int(in, a, 1, "maxsplit", -1)));
}
Value s_strip(Interpreter& in, const Value& self, CallArgs& a) {
  return Value(py_strip(self.get_string(), opt_str(in, a, 0, "chars"), true, true));
}
Value s_lstrip(Interpreter& in, const Value& self, CallArgs& a) {
  return Value(py_strip(self.get_string(), opt_str(in, a, 0, "chars"), true, false));
}
Value s_rstrip(Interpreter& in, const Value& self, CallArgs& a) {
  return Value(py_strip(self.get_string(), opt_str(in, a, 0, "chars"), false, true));
}
Value s_upper(Interpreter&, const Value& self, CallArgs&) {
  return Value(py_upper(self.get_string()));
}
Value s_lower(Interpreter&, const Value& self, CallArgs&) {
  return Value(py_lower(self.get_string()));
}
Value s_title(Interpreter&, const Value& self, CallArgs&) {
  return Value(py_title(self.get_string()));
}
Value s_capitalize(Interpreter&, const Value& self, CallArgs&) {
  return Value(py_capitalize(self.get_string()));
}
Value s_replace(Interpreter& in, const Value& self, CallArgs& a) {
  const Value& old = required(in, a, 0, "old");
  const Value& repl = required(in, a, 1, "new");
  if (!old.is_string() || !repl.is_string()) in.fail("TypeError: replace() arguments must be str");
  std::string s = py_replace(self.get_string(), old.get_string(), repl.get_string(),
                             opt_int(in, a, 2, "count", -1));
  in.check_size(s);
  return Value(std::move(s));
}
Value s_find(Interpreter& in, const Value& self, CallArgs& a) {
  const Value& sub = required(in, a, 0, "sub");
  if (!sub.is_string()) in.fail("TypeError: must be str");
  return Value(py_find(self.get_string(), sub.get_string()));
}
Value s_count(Interpreter& in, const Value& self, CallArgs& a) {
  const Value& sub = required(in, a, 0, "sub");
  if (!sub.is_string()) in.fail("TypeError: must be str");
  return Value(py_count(self.get_string(), sub.get_string()));
}
Value s_join(Interpreter& in, const Value& self, CallArgs& a) {
  std::string out;
  bool first = true;
  for (const Value& x : in.iterate(required(in, a, 0, "iterable"))) {
    if (!x.is_string())
      in.fail(std::string("TypeError: sequence item: expected str instance, ") + x.type_name() +
              " found");
    if (!first) out += self.get_string();
    first = false;
    out += x.get_string();
    in.check_size(out);
  }
  return Value(std::move(out));
}
Value s_splitlines(Interpreter&, const Value& self, CallArgs&) {
  std::vector<std::string> lines;
  const std::string& s = self.get_string();
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return string_list(std::move(lines));
}

template <bool (*Pred)(uint32_t)>
Value s_is(Interpreter&, const Value& self, CallArgs&) {
  const std::string& s = self.get_string();
  if (s.empty()) return Value(false);
  for (size_t i = 0; i < s.size();) {
    if (!Pred(utf8_next(s, i))) return Value(false);
  }
  return Value(true);
}
bool is_digit_cp(uint32_t c) {
  return c >= '0' && c <= '9';
}
bool is_alpha_cp(uint32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}
bool is_alnum_cp(uint32_t c) {
  return is_digit_cp(c) || is_alpha_cp(c);
}

// str.format: {} {0} {name}, {{ and }}; format specs are ignored.
Value s_format(Interpreter& in, const Value& self, CallArgs& a) {
  const std::string& f = self.get_string();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) in.fail("ValueError: Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    field = field.substr(0, field.find_first_of(":!"));
    const Value* v = nullptr;
    if (field.empty())
      v = a.get(auto_index++, "\x01");
    else if (std::all_of(field.begin(), field.end(), ::isdigit))
      v = a.get(static_cast<size_t>(std::atoi(field.c_str())), "\x01");
    else
      v = a.get(SIZE_MAX, field);
    if (!v) in.fail("IndexError: Replacement index out of range for positional args tuple");
    v->append_str(out);
    i = close;
  }
  return Value(std::move(out));
}

Value d_get(Interpreter& in, const Value& self, CallArgs& a) {
  const Value& key = required(in, a, 0, "key");
  if (const Value* v = self.get_dict().find(key)) return *v;
  const Value* d = a.get(1, "default");
  return d ? *d : Value::none();
}
Value d_items(Interpreter&, const Value& self, CallArgs&) {
  std::vector<Value> out;
  for (const auto& [k, v] : self.get_dict().items) out.push_back(Value::tuple({k, v}));
  return Value::list(std::move(out));
}
Value d_keys(Interpreter&, const Value& self, CallArgs&) {
  std::vector<Value> out;
  for (const auto& [k, v] : self.get_dict().items) out.push_back(k);
  return Value::list(std::move(out));
}
Value d_values(Interpreter&, const Value& self, CallArgs&) {
  std::vector<Value> out;
  for (const auto& [k, v] : self.get_dict().items) out.push_back(v);
  return Value::list(std::move(out));
}

void check_no_cycle(Interpreter& in, const Value& self, const Value& v) {
  if (reaches(v, &self.get_list())) in.fail("ValueError: a list cannot contain itself");
}
Value l_append(Interpreter& in, const Value& self, CallArgs& a) {
  const Value& v = required(in, a, 0, "object");
  check_no_cycle(in, self, v);
  self.get_list().push(v);
  return Value::none();
}
Value l_insert(Interpreter& in, const Value& self, CallArgs& a) {
  const int64_t n = static_cast<int64_t>(self.get_list().items.size());
  int64_t i = opt_int(in, a, 0, "index", 0);
  const Value& v = required(in, a, 1, "object");
  check_no_cycle(in, self, v);
  if (i < 0) i = std::max<int64_t>(0, i + n);
  i = std::min(i, n);
  self.get_list().push(Value::none());  // keeps depth; then rotate into place
  auto& items = self.get_list().items;
  items.pop_back();
  items.insert(items.begin() + i, v);
  return Value::none();
}
Value l_pop(Interpreter& in, const Value& self, CallArgs& a) {
  auto& items = self.get_list().items;
  if (items.empty()) in.fail("IndexError: pop from empty list");
  const int64_t n = static_cast<int64_t>(items.size());
  int64_t i = opt_int(in, a, 0, "index", -1);
  if (i < 0) i += n;
  if (i < 0 || i >= n) in.fail("IndexError: pop index out of range");
  Value v = items[static_cast<size_t>(i)];
  items.erase(items.begin() + i);
  return v;
}
Value l_index(Interpreter& in, const Value& self, CallArgs& a) {
  const Value& x = required(in, a, 0, "value");
  const auto& items = self.get_list().items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i] == x) return Value(static_cast<int64_t>(i));
  }
  in.fail("ValueError: " + x.repr() + " is not in list");
}
Value l_count(Interpreter& in, const Value& self, CallArgs& a) {
  const Value& x = required(in, a, 0, "value");
  int64_t n = 0;
  for (const Value& e : self.get_list().items) n += e == x;
  return Value(n);
}

const std::unordered_map<std::string, MethodFn>& string_methods() {
  static const std::unordered_map<std::string, MethodFn> t = {
      {"startswith", s_startswith},
      {"endswith", s_endswith},
      {"split", s_split},
      {"rsplit", s_rsplit},
      {"strip", s_strip},
      {"lstrip", s_lstrip},
      {"rstrip", s_rstrip},
      {"upper", s_upper},
      {"lower", s_lower},
      {"title", s_title},
      {"capitalize", s_capitalize},
      {"replace", s_replace},
      {"find", s_find},
      {"count", s_count},
      {"join", s_join},
      {"splitlines", s_splitlines},
      {"format", s_format},
      {"isdigit", s_is<is_digit_cp>},
      {"isalpha", s_is<is_alpha_cp>},
      {"isalnum", s_is<is_alnum_cp>},
      {"isspace", s_is<is_python_space>},
  };
  return t;
}
const std::unordered_map<std::string, MethodFn>& dict_methods() {
  static const std::unordered_map<std::string, MethodFn> t = {
      {"get", d_get}, {"items", d_items}, {"keys", d_keys}, {"values", d_values}};
  return t;
}
const std::unordered_map<std::string, MethodFn>& list_methods() {
  static const std::unordered_map<std::string, MethodFn> t = {{"append", l_append},
                                                              {"insert", l_insert},
                                                              {"pop", l_pop},
                                                              {"index", l_index},
                                                              {"count", l_count}};
  return t;
}

Value g_range(Interpreter& in, CallArgs& a) {
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) {
    stop = opt_int(in, a, 0, "stop", 0);
  } else if (a.positional.size() >= 2) {
    start = opt_int(in, a, 0, "start", 0);
    stop = opt_int(in, a, 1, "stop", 0);
    step = opt_int(in, a, 2, "step", 1);
  } else {
    in.fail("TypeError: range expected at least 1 argument, got 0");
  }
  if (step == 0) in.fail("ValueError: range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    in.step();
    out.emplace_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return Value::list(std::move(out));
}

Value g_dict(Interpreter&, CallArgs& a, Value d) {
  if (!a.positional.empty() && a.positional[0].is_dict()) {
    for (const auto& [k, v] : a.positional[0].get_dict().items) d.get_dict().set(k, v);
  }
  for (const auto& [k, v] : a.keyword) d.get_dict().set(Value(k), v);
  return d;
}

Value g_raise_exception(Interpreter&, CallArgs& a) {
  throw Error(ErrorKind::InvalidArgument,
              a.positional.empty() ? std::string() : a.positional[0].str());
}

Value g_strftime_now(Interpreter& in, CallArgs& a) {
  const std::string fmt = a.positional.empty() ? std::string() : a.positional[0].str();
  const std::time_t t = std::chrono::system_clock::to_time_t(in.now());
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[512];
  const size_t n = fmt.size() < 200 ? std::strftime(buf, sizeof(buf), fmt.c_str(), &tm) : 0;
  return Value(std::string(buf, n));
}

}  // namespace

Value find_method(Interpreter&, const Value& obj, const std::string& name) {
  const std::unordered_map<std::string, MethodFn>* table = nullptr;
  if (obj.is_string())
    table = &string_methods();
  else if (obj.is_dict())
    table = &dict_methods();
  else if (obj.is_list())
    table = &list_methods();
  if (!table) return Value::undefined(name);
  auto it = table->find(name);
  if (it == table->end()) return Value::undefined(name);
  if (obj.is_list() && obj.get_list().is_generator) return Value::undefined(name);
  const MethodFn fn = it->second;
  // Python's str/list/dict methods take positional arguments only (split/rsplit excepted).
  const bool keywords_ok = name == "split" || name == "rsplit";
  const std::string qualified = std::string(obj.type_name()) + "." + name;
  Value bound =
      Value::function(name, [obj, fn, keywords_ok, qualified](Interpreter& in, CallArgs& a) {
        if (!keywords_ok && !a.keyword.empty())
          in.fail("TypeError: " + qualified + "() takes no keyword arguments");
        return fn(in, obj, a);
      });
  bound.mark_holds_values();
  return bound;
}

std::vector<std::pair<std::string, Value>> make_globals() {
  return {
      {"range", Value::function("range", g_range)},
      {"namespace", Value::function("namespace",
                                    [](Interpreter& in, CallArgs& a) {
                                      return g_dict(in, a, Value::namespace_());
                                    })},
      {"dict", Value::function("dict", [](Interpreter& in,
                                          CallArgs& a) { return g_dict(in, a, Value::dict()); })},
      {"raise_exception", Value::function("raise_exception", g_raise_exception)},
      {"strftime_now", Value::function("strftime_now", g_strftime_now)},
  };
}

}  // namespace akv::jinja
