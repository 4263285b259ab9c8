// Value: construction, Python truthiness/equality/ordering, str()/repr() and JSON conversion.
#include "chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "chat/text.h"

namespace akv::jinja {

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.get_string() == key) return &v;
  }
  return nullptr;
}

namespace {
int checked_depth(int child_depth) {
  if (child_depth + 1 > kMaxValueDepth) {
    throw Error(ErrorKind::ResourceExhausted,
                "values nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  return child_depth + 1;
}
}  // namespace

int value_depth(const Value& v) {
  if (v.is_list()) return v.get_list().depth;
  if (v.is_dict()) return v.get_dict().depth;
  return 0;
}

bool reaches(const Value& v, const void* target) {
  if (v.is_function()) return v.get_function().holds_values;
  if (v.is_list()) {
    if (&v.get_list() == target) return true;
    for (const Value& e : v.get_list().items) {
      if (reaches(e, target)) return true;
    }
  } else if (v.is_dict()) {
    if (&v.get_dict() == target) return true;
    for (const auto& [k, e] : v.get_dict().items) {
      if (reaches(e, target)) return true;
    }
  }
  return false;
}

void ListData::push(Value v) {
  depth = std::max(depth, checked_depth(value_depth(v)));
  items.push_back(std::move(v));
}

void DictData::set(Value key, Value value) {
  depth = std::max(depth, checked_depth(value_depth(value)));
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::list(std::vector<Value> items) {
  auto data = std::make_shared<ListData>();
  int depth = 0;
  for (const Value& v : items) depth = std::max(depth, value_depth(v));
  data->depth = checked_depth(depth);
  data->items = std::move(items);
  return from(std::move(data));
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.get_list().is_tuple = true;
  return v;
}

Value Value::dict() {
  return from(std::make_shared<DictData>());
}

Value Value::namespace_() {
  Value v = dict();
  v.get_dict().is_namespace = true;
  return v;
}

Value Value::function(std::string name, NativeFn fn) {
  return from(std::make_shared<Function>(Function{std::move(name), std::move(fn)}));
}

namespace {

// `level`: how many containers enclose `j`. Refuses to descend past kMaxValueDepth, so a deep
// json tree fails here rather than overflowing the stack below.
Value value_from_json(const nlohmann::ordered_json& j, int level) {
  using Type = nlohmann::ordered_json::value_t;
  if ((j.type() == Type::array || j.type() == Type::object) && level >= kMaxValueDepth) checked_depth(kMaxValueDepth);
  switch (j.type()) {
    case Type::null:
      return Value::none();
    case Type::boolean:
      return Value(j.get<bool>());
    case Type::number_integer:
      return Value(j.get<int64_t>());
    case Type::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case Type::number_float:
      return Value(j.get<double>());
    case Type::string:
      return Value(j.get<std::string>());
    case Type::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(value_from_json(e, level + 1));
      return Value::list(std::move(items));
    }
    case Type::object: {
      Value d = Value::dict();
      DictData& data = d.get_dict();
      data.items.reserve(j.size());
      int depth = 0;
      for (const auto& [k, e] : j.items()) {
        data.items.emplace_back(Value(k), value_from_json(e, level + 1));
        depth = std::max(depth, value_depth(data.items.back().second));
      }
      data.depth = checked_depth(depth);
      return d;
    }
    default:
      return Value::none();  // binary / discarded: not produced by JSON parsing
  }
}

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j, 0); }

double Value::to_double() const {
  switch (kind()) {
    case Kind::Bool:
      return get_bool() ? 1.0 : 0.0;
    case Kind::Int:
      return static_cast<double>(get_int());
    case Kind::Float:
      return get_float();
    default:
      return 0.0;
  }
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return get_bool();
    case Kind::Int:
      return get_int() != 0;
    case Kind::Float:
      return get_float() != 0.0;
    case Kind::String:
      return !get_string().empty();
    case Kind::List:
      return get_list().is_generator || !get_list().items.empty();
    case Kind::Dict:
      return get_dict().is_namespace || !get_dict().items.empty();
    case Kind::Function:
      return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind()) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      if (get_list().is_generator) return "generator";
      return get_list().is_tuple ? "tuple" : "list";
    case Kind::Dict:
      return get_dict().is_namespace ? "Namespace" : "dict";
    case Kind::Function:
      return "function";
  }
  return "object";
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+03"
  const size_t e_pos = sci.find('e');
  std::string mant = sci.substr(0, e_pos);
  const int exp10 = std::stoi(sci.substr(e_pos + 1));
  std::string out;
  if (mant[0] == '-') {
    out = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  const int decpt = exp10 + 1;  // digits d1d2... with the point after `decpt` digits
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(static_cast<size_t>(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt));
      out += '.';
      out += digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  out += exp_buf;
  return out;
}

void append_python_string_repr(std::string& out, std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  out += quote;
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const uint32_t cp = utf8_next(s, i);
    char buf[16];
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == static_cast<uint32_t>(quote)) {
      out += '\\';
      out += quote;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += quote;
}

void Value::append_str(std::string& out) const {
  switch (kind()) {
    case Kind::Undefined:
      return;
    case Kind::String:
      out += get_string();
      return;
    default:
      append_repr(out);
  }
}

void Value::append_repr(std::string& out) const {
  switch (kind()) {
    case Kind::Undefined:
      out += "Undefined";
      return;
    case Kind::None:
      out += "None";
      return;
    case Kind::Bool:
      out += get_bool() ? "True" : "False";
      return;
    case Kind::Int:
      out += std::to_string(get_int());
      return;
    case Kind::Float:
      out += python_float_repr(get_float());
      return;
    case Kind::String:
      append_python_string_repr(out, get_string());
      return;
    case Kind::List: {
      const ListData& l = get_list();
      if (l.is_generator) {
        out += "<generator object>";
        return;
      }
      out += l.is_tuple ? '(' : '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        l.items[i].append_repr(out);
      }
      if (l.is_tuple && l.items.size() == 1) out += ',';
      out += l.is_tuple ? ')' : ']';
      return;
    }
    case Kind::Dict: {
      const DictData& d = get_dict();
      if (d.is_namespace) out += "<Namespace ";
      out += '{';
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i) out += ", ";
        d.items[i].first.append_repr(out);
        out += ": ";
        d.items[i].second.append_repr(out);
      }
      out += '}';
      if (d.is_namespace) out += '>';
      return;
    }
    case Kind::Function:
      out += "<function " + get_function().name + ">";
      return;
  }
}

std::string Value::str() const {
  std::string out;
  append_str(out);
  return out;
}

std::string Value::repr() const {
  std::string out;
  append_repr(out);
  return out;
}

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::List:
      return &get_list() == &other.get_list();
    case Kind::Dict:
      return &get_dict() == &other.get_dict();
    case Kind::Function:
      return &get_function() == &other.get_function();
    default:
      return *this == other;
  }
}

bool Value::operator==(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (!is_float() && !other.is_float()) {
      const int64_t a = is_bool() ? get_bool() : get_int();
      const int64_t b = other.is_bool() ? other.get_bool() : other.get_int();
      return a == b;
    }
    return to_double() == other.to_double();
  }
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      return get_string() == other.get_string();
    case Kind::List: {
      const auto& a = get_list().items;
      const auto& b = other.get_list().items;
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!(a[i] == b[i])) return false;
      }
      return true;
    }
    case Kind::Dict: {
      const auto& a = get_dict().items;
      const auto& b = other.get_dict();
      if (a.size() != b.items.size()) return false;
      for (const auto& [k, v] : a) {
        const Value* o = b.find(k);
        if (!o || !(*o == v)) return false;
      }
      return true;
    }
    case Kind::Function:
      return same_object(other);
    default:
      return false;
  }
}

std::optional<int> compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) {
      const int64_t x = a.is_bool() ? a.get_bool() : a.get_int();
      const int64_t y = b.is_bool() ? b.get_bool() : b.get_int();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const double x = a.to_double(), y = b.to_double();
    if (std::isnan(x) || std::isnan(y)) return 2;  // unordered: every comparison is false
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.get_string().compare(b.get_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.get_list().items;
    const auto& y = b.get_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i] == y[i]) continue;
      return compare_values(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return std::nullopt;
}

}  // namespace akv::jinja
