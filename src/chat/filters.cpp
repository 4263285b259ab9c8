// Jinja2's builtin filters (jinja2/filters.py) as chat templates use them, plus transformers'
// tojson (json.dumps with ensure_ascii=False and no HTML escaping).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "base/error.h"
#include "chat/filter_util.h"
#include "chat/text.h"

namespace akv::jinja {

Value generator(std::vector<Value> items) {
  Value v = Value::list(std::move(items));
  v.get_list().is_generator = true;
  return v;
}

bool arg_bool(const CallArgs& a, size_t i, std::string_view name, bool dflt) {
  const Value* v = a.get(i, name);
  return v ? v->truthy() : dflt;
}

int64_t arg_int(Interpreter& in, const CallArgs& a, size_t i, std::string_view name, int64_t dflt) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return dflt;
  if (v->is_int()) return v->get_int();
  if (v->is_bool()) return v->get_bool();
  if (v->is_float()) return static_cast<int64_t>(v->get_float());
  in.fail(std::string("TypeError: expected an integer for '") + std::string(name) + "', got " +
          v->type_name());
}

std::string arg_str(const CallArgs& a, size_t i, std::string_view name, std::string dflt) {
  const Value* v = a.get(i, name);
  return v && !v->is_undefined() ? v->str() : dflt;
}

// Jinja's make_attrgetter: "a.b.0" walks items/attributes.
Value get_path(Interpreter& in, const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return in.get_item(item, attribute);
  Value cur = item;
  for (const std::string& part : py_split(attribute.get_string(), std::string("."), -1)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = in.get_item(cur,
                      digits ? Value(static_cast<int64_t>(std::atoll(part.c_str()))) : Value(part));
  }
  return cur;
}

namespace {

const Value* arg(const CallArgs& a, size_t i, std::string_view name) {
  return a.get(i, name);
}

Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
  JsonDumpOptions opt;
  opt.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
  opt.indent = static_cast<int>(std::clamp<int64_t>(arg_int(in, a, 1, "indent", -1), -1, 64));
  if (const Value* sep = arg(a, 2, "separators");
      sep && sep->is_list() && sep->get_list().items.size() == 2) {
    opt.separators = std::make_pair(sep->get_list().items[0].str(), sep->get_list().items[1].str());
  }
  opt.sort_keys = arg_bool(a, 3, "sort_keys", false);
  std::string s = python_json_dumps(v, opt);
  in.check_size(s);
  return Value(std::move(s));
}

Value f_length(Interpreter& in, const Value& v, CallArgs&) {
  switch (v.kind()) {
    case Kind::Undefined:
      return Value(0);
    case Kind::String:
      return Value(static_cast<int64_t>(utf8_length(v.get_string())));
    case Kind::List:
      if (v.get_list().is_generator) in.fail("TypeError: object of type 'generator' has no len()");
      return Value(static_cast<int64_t>(v.get_list().items.size()));
    case Kind::Dict:
      return Value(static_cast<int64_t>(v.get_dict().items.size()));
    default:
      in.fail(std::string("TypeError: object of type '") + v.type_name() + "' has no len()");
  }
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  const bool boolean = arg_bool(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.truthy())) {
    const Value* d = arg(a, 0, "default_value");
    return d ? *d : Value("");
  }
  return v;
}

Value f_upper(Interpreter&, const Value& v, CallArgs&) {
  return Value(py_upper(v.str()));
}
Value f_lower(Interpreter&, const Value& v, CallArgs&) {
  return Value(py_lower(v.str()));
}
Value f_title(Interpreter&, const Value& v, CallArgs&) {
  return Value(jinja_title(v.str()));
}
Value f_capitalize(Interpreter&, const Value& v, CallArgs&) {
  return Value(py_capitalize(v.str()));
}
Value f_safe(Interpreter&, const Value& v, CallArgs&) {
  return v;
}
Value f_string(Interpreter&, const Value& v, CallArgs&) {
  return Value(v.str());
}
Value f_pprint(Interpreter&, const Value& v, CallArgs&) {
  return Value(v.repr());
}

Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  const Value* chars = arg(a, 0, "chars");
  std::optional<std::string> c;
  if (chars && !chars->is_none() && !chars->is_undefined()) c = chars->str();
  return Value(py_strip(v.str(), c, true, true));
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  const int64_t count = arg_int(in, a, 2, "count", -1);
  std::string s = py_replace(v.str(), arg_str(a, 0, "old", ""), arg_str(a, 1, "new", ""), count);
  in.check_size(s);
  return Value(std::move(s));
}

Value f_int(Interpreter& in, const Value& v, CallArgs& a) {
  const int64_t dflt = arg_int(in, a, 0, "default", 0);
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t{v.get_bool()});
  if (v.is_float()) {
    const double d = v.get_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return Value(dflt);
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    const std::string s = py_strip(v.get_string(), std::nullopt, true, true);
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0)
      return Value(static_cast<int64_t>(i));
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) {
      return Value(static_cast<int64_t>(d));
    }
  }
  return Value(dflt);
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  const Value dflt = d ? *d : Value(0.0);
  if (v.is_number()) return Value(v.to_double());
  if (v.is_string()) {
    const std::string s = py_strip(v.get_string(), std::nullopt, true, true);
    char* end = nullptr;
    const double x = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value(x);
  }
  return dflt;
}

Value f_abs(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.get_float()));
  if (v.is_int()) {
    if (v.get_int() == INT64_MIN) in.fail("OverflowError: integer overflow");
    return Value(v.get_int() < 0 ? -v.get_int() : v.get_int());
  }
  if (v.is_bool()) return Value(int64_t{v.get_bool()});
  in.fail(std::string("TypeError: bad operand type for abs(): '") + v.type_name() + "'");
}

Value f_round(Interpreter& in, const Value& v, CallArgs& a) {
  const int64_t precision = std::clamp<int64_t>(arg_int(in, a, 0, "precision", 0), -300, 300);
  const std::string method = arg_str(a, 1, "method", "common");
  if (!v.is_number())
    in.fail(std::string("TypeError: type ") + v.type_name() + " doesn't define __round__ method");
  const double x = v.to_double();
  const double scale = std::pow(10.0, static_cast<double>(precision));
  double r;
  if (method == "ceil")
    r = std::ceil(x * scale) / scale;
  else if (method == "floor")
    r = std::floor(x * scale) / scale;
  else if (method == "common" && precision >= 0 && std::isfinite(x)) {
    // Python's round() rounds the exact binary value half-to-even, as printf does.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::min<int64_t>(precision, 100)), x);
    r = std::strtod(buf, nullptr);
  } else if (method == "common")
    r = std::nearbyint(x * scale) / scale;
  else
    in.fail("FilterArgumentError: method must be common, ceil or floor");
  return Value(r);
}

// map / select / reject / selectattr / rejectattr share Jinja's argument conventions.
Value f_indent(Interpreter& in, const Value& v, CallArgs& a) {
  const Value* w = arg(a, 0, "width");
  std::string pad = w && w->is_string() ? w->get_string()
                                        : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                                          arg_int(in, a, 0, "width", 4), 0, 1024)),
                                                      ' ');
  const bool first = arg_bool(a, 1, "first", false);
  const bool blank = arg_bool(a, 2, "blank", false);
  std::string s = v.str() + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += '\n';
    if (blank || !lines[i].empty()) out += pad;
    out += lines[i];
    in.check_size(out);
  }
  if (first) out = pad + out;
  return Value(std::move(out));
}

Value f_escape(Interpreter&, const Value& v, CallArgs&) {
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Value(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs&) {
  const std::string s = v.str();
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = utf8_next(s, i);
    const bool word =
        cp == '_' || (cp < 0x80 ? std::isalnum(static_cast<int>(cp)) != 0 : !is_python_space(cp));
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

Value f_center(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string s = v.str();
  const int64_t width = std::min<int64_t>(arg_int(in, a, 0, "width", 80), 1 << 20);
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value(s);
  const int64_t pad = width - len;
  const int64_t left = pad / 2 + (pad & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s +
               std::string(static_cast<size_t>(pad - left), ' '));
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  return in.get_attr(v, arg_str(a, 0, "name", ""));
}

Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
  // "fmt"|format(args) is Python's `fmt % args`.
  std::string out;
  const std::string fmt = v.str();
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
      out += fmt[i];
      continue;
    }
    const char c = fmt[++i];
    if (c == '%')
      out += '%';
    else if (next < a.positional.size())
      out += c == 'r' ? a.positional[next++].repr() : a.positional[next++].str();
    else
      in.fail("TypeError: not enough arguments for format string");
  }
  return Value(std::move(out));
}

const std::unordered_map<std::string, FilterFn>& filter_table() {
  static const std::unordered_map<std::string, FilterFn> table = [] {
    std::unordered_map<std::string, FilterFn> t = {
        {"tojson", f_tojson},
        {"length", f_length},
        {"count", f_length},
        {"default", f_default},
        {"d", f_default},
        {"upper", f_upper},
        {"lower", f_lower},
        {"title", f_title},
        {"capitalize", f_capitalize},
        {"safe", f_safe},
        {"string", f_string},
        {"pprint", f_pprint},
        {"trim", f_trim},
        {"replace", f_replace},
        {"int", f_int},
        {"float", f_float},
        {"abs", f_abs},
        {"round", f_round},
        {"indent", f_indent},
        {"e", f_escape},
        {"escape", f_escape},
        {"forceescape", f_escape},
        {"wordcount", f_wordcount},
        {"center", f_center},
        {"attr", f_attr},
        {"format", f_format},
    };
    add_sequence_filters(t);
    return t;
  }();
  return table;
}

}  // namespace

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  const auto& table = filter_table();
  auto it = table.find(name);
  if (it == table.end()) in.fail("TemplateAssertionError: No filter named '" + name + "'.");
  return it->second(in, v, args);
}

}  // namespace akv::jinja
