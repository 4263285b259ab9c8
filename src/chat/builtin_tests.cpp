// Jinja2's builtin tests (jinja2/tests.py): `x is defined`, `x is string`, `x is divisibleby 3`...
#include <unordered_map>

#include "chat/interpreter.h"
#include "chat/text.h"

namespace akv::jinja {
namespace {

using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

const Value& other(Interpreter& in, const CallArgs& a) {
  const Value* v = a.get(0, "other");
  if (!v) v = a.get(0, "value");
  if (!v) in.fail("TypeError: test requires an argument");
  return *v;
}

int compare_or_fail(Interpreter& in, const Value& x, const Value& y, const char* op) {
  const std::optional<int> c = compare_values(x, y);
  if (!c)
    in.fail(std::string("TypeError: '") + op + "' not supported between instances of '" +
            x.type_name() + "' and '" + y.type_name() + "'");
  return *c;
}

bool t_defined(Interpreter&, const Value& v, CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, CallArgs&) {
  return v.is_none();
}
bool t_string(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string();
}
bool t_number(Interpreter&, const Value& v, CallArgs&) {
  return v.is_number();
}
bool t_integer(Interpreter&, const Value& v, CallArgs&) {
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, CallArgs&) {
  return v.is_float();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs&) {
  return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, CallArgs&) {
  return v.is_bool() && v.get_bool();
}
bool t_false(Interpreter&, const Value& v, CallArgs&) {
  return v.is_bool() && !v.get_bool();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs&) {
  return v.is_dict() && !v.get_dict().is_namespace;
}
bool t_sequence(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_list() || (v.is_dict() && !v.get_dict().is_namespace);
}
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_callable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_function();
}
bool t_escaped(Interpreter&, const Value&, CallArgs&) {
  return false;
}

bool t_even(Interpreter& in, const Value& v, CallArgs&) {
  if (!v.is_int() && !v.is_bool())
    in.fail(std::string("TypeError: even test expects an integer, got ") + v.type_name());
  return (v.is_bool() ? v.get_bool() : v.get_int()) % 2 == 0;
}
bool t_odd(Interpreter& in, const Value& v, CallArgs& a) {
  return !t_even(in, v, a);
}

bool t_divisibleby(Interpreter& in, const Value& v, CallArgs& a) {
  const Value& n = other(in, a);
  if (!v.is_number() || !n.is_number()) in.fail("TypeError: divisibleby expects numbers");
  if (n.to_double() == 0) in.fail("ZeroDivisionError: integer division or modulo by zero");
  if (v.is_int() && n.is_int()) return v.get_int() % n.get_int() == 0;
  return std::fmod(v.to_double(), n.to_double()) == 0;
}

bool t_in(Interpreter& in, const Value& v, CallArgs& a) {
  const Value& seq = other(in, a);
  if (seq.is_string())
    return v.is_string() && seq.get_string().find(v.get_string()) != std::string::npos;
  if (seq.is_dict()) return seq.get_dict().find(v) != nullptr;
  for (const Value& x : in.iterate(seq)) {
    if (x == v) return true;
  }
  return false;
}

bool t_eq(Interpreter& in, const Value& v, CallArgs& a) {
  return v == other(in, a);
}
bool t_ne(Interpreter& in, const Value& v, CallArgs& a) {
  return !(v == other(in, a));
}
bool t_lt(Interpreter& in, const Value& v, CallArgs& a) {
  const int c = compare_or_fail(in, v, other(in, a), "<");
  return c == -1;
}
bool t_le(Interpreter& in, const Value& v, CallArgs& a) {
  const int c = compare_or_fail(in, v, other(in, a), "<=");
  return c <= 0;
}
bool t_gt(Interpreter& in, const Value& v, CallArgs& a) {
  const int c = compare_or_fail(in, v, other(in, a), ">");
  return c == 1;
}
bool t_ge(Interpreter& in, const Value& v, CallArgs& a) {
  const int c = compare_or_fail(in, v, other(in, a), ">=");
  return c == 0 || c == 1;
}
bool t_sameas(Interpreter& in, const Value& v, CallArgs& a) {
  return v.same_object(other(in, a));
}

bool t_lower(Interpreter&, const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_string();
  return py_lower(s) == s && py_upper(s) != s;
}
bool t_upper(Interpreter&, const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_string();
  return py_upper(s) == s && py_lower(s) != s;
}

const std::unordered_map<std::string, TestFn>& test_table() {
  static const std::unordered_map<std::string, TestFn> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"string", t_string},
      {"number", t_number},
      {"integer", t_integer},
      {"float", t_float},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"mapping", t_mapping},
      {"sequence", t_sequence},
      {"iterable", t_iterable},
      {"callable", t_callable},
      {"escaped", t_escaped},
      {"even", t_even},
      {"odd", t_odd},
      {"divisibleby", t_divisibleby},
      {"in", t_in},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"sameas", t_sameas},
      {"lower", t_lower},
      {"upper", t_upper},
  };
  return table;
}

}  // namespace

bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  const auto& table = test_table();
  auto it = table.find(name);
  if (it == table.end()) in.fail("TemplateAssertionError: No test named '" + name + "'.");
  return it->second(in, v, args);
}

}  // namespace akv::jinja
