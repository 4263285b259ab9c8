// The value type of the Jinja interpreter: a small variant that behaves like the Python objects
// Jinja2 sees (None, bool, int, float, str, list/tuple, dict, callables, Undefined).
// Lists and dicts are shared by reference, as in Python. Not thread-safe; one render owns its
// values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace akv::jinja {

class Value;
class Interpreter;

// Containers nested deeper than this are refused (Error ResourceExhausted), so printing,
// comparing and destroying values never recurses without bound.
inline constexpr int kMaxValueDepth = 256;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;      // prints as (a, b) instead of [a, b]
  bool is_generator = false;  // from select/map/...: no len(), no [i], always truthy
  int depth = 1;              // 1 + the deepest element's depth

  // Appends, keeping `depth`; throws Error(ResourceExhausted) past kMaxValueDepth.
  void push(Value v);
};

// An insertion-ordered dict (Python 3.7+ order). Lookup is linear: chat dicts are small.
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  bool is_namespace = false;  // namespace(): attribute assignment allowed, prints as <Namespace>
  int depth = 1;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  const Value* find(const std::string& key) const { return find(std::string_view(key)); }
  const Value* find(const char* key) const { return find(std::string_view(key)); }
  // Inserts or replaces, keeping `depth`; throws Error(ResourceExhausted) past kMaxValueDepth.
  void set(Value key, Value value);
};

// 0 for scalars, else the container's depth.
int value_depth(const Value& v);
// Whether `target` (a list or dict) is reachable from `v`: storing `v` into `target` would make
// a reference cycle (which shared_ptr would leak). Bound methods count as reaching anything.
bool reaches(const Value& v, const void* target);

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Positional argument `index`, else keyword `name`, else nullptr.
  const Value* get(size_t index, std::string_view name) const;
};

using NativeFn = std::function<Value(Interpreter&, CallArgs&)>;

struct Function {
  std::string name;
  NativeFn fn;
  bool holds_values = false;  // a bound method: keeps its list/dict alive (see reaches())
};

struct UndefinedData {
  std::string name;  // what was looked up, for error messages ("'foo' is undefined")
};
struct NoneData {};

enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

class Value {
 public:
  Value() : v_(UndefinedData{}) {}
  explicit Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(int64_t{i}) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::make_shared<const std::string>(std::move(s))) {}
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}

  static Value undefined(std::string name = {}) { return from(UndefinedData{std::move(name)}); }
  static Value none() { return from(NoneData{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value dict();
  static Value namespace_();
  static Value function(std::string name, NativeFn fn);
  // Throws Error(ResourceExhausted) for containers past kMaxValueDepth, before descending further.
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::String; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_function() const { return kind() == Kind::Function; }

  bool get_bool() const { return std::get<bool>(v_); }
  int64_t get_int() const { return std::get<int64_t>(v_); }
  double get_float() const { return std::get<double>(v_); }
  const std::string& get_string() const {
    return *std::get<std::shared_ptr<const std::string>>(v_);
  }
  ListData& get_list() const { return *std::get<std::shared_ptr<ListData>>(v_); }
  DictData& get_dict() const { return *std::get<std::shared_ptr<DictData>>(v_); }
  const Function& get_function() const { return *std::get<std::shared_ptr<Function>>(v_); }
  void mark_holds_values() { std::get<std::shared_ptr<Function>>(v_)->holds_values = true; }
  const std::string& undefined_name() const { return std::get<UndefinedData>(v_).name; }

  // Numeric value of a bool/int/float as double (Python's float()).
  double to_double() const;
  // Python truthiness: empty containers, 0, "", None and Undefined are false.
  bool truthy() const;
  // Python type name for error messages: 'NoneType', 'str', 'list', ...
  const char* type_name() const;

  // str(x) as Jinja prints it: None -> "None", True -> "True", lists as repr, Undefined -> "".
  std::string str() const;
  // repr(x): strings quoted, floats "1.0".
  std::string repr() const;
  void append_str(std::string& out) const;
  void append_repr(std::string& out) const;

  bool operator==(const Value& other) const;
  bool same_object(const Value& other) const;

 private:
  // Strings are shared and immutable: copying a Value never copies text.
  using Storage = std::variant<UndefinedData, NoneData, bool, int64_t, double,
                               std::shared_ptr<const std::string>, std::shared_ptr<ListData>,
                               std::shared_ptr<DictData>, std::shared_ptr<Function>>;
  template <typename T>
  static Value from(T t) {
    Value v;
    v.v_ = std::move(t);
    return v;
  }
  Storage v_;
};

// Python's float repr: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string python_float_repr(double d);

// Python's repr() of a str: single quotes unless the text holds ' and no ".
void append_python_string_repr(std::string& out, std::string_view s);

// Options of Python's json.dumps as transformers' tojson filter passes them.
struct JsonDumpOptions {
  int indent = -1;  // < 0: no newlines; separators ", " and ": "
  bool sort_keys = false;
  bool ensure_ascii = false;
  std::optional<std::pair<std::string, std::string>> separators;  // item, key
};

// json.dumps(value, ...) byte for byte. Throws Error(InvalidArgument) for values JSON cannot
// hold (functions, Undefined).
std::string python_json_dumps(const Value& v, const JsonDumpOptions& options);

// Ordering as Python's `<`: numbers, strings (code point order), lists lexicographically.
// Returns nullopt where Python would raise TypeError.
std::optional<int> compare_values(const Value& a, const Value& b);

}  // namespace akv::jinja
