// Expression evaluation: names, literals, attribute/item access, slicing, calls, filters, tests
// and Python's operator semantics (int/float arithmetic, str/list concatenation, `in`).
#include <cmath>

#include "base/error.h"
#include "chat/interpreter.h"
#include "chat/text.h"

namespace akv::jinja {
namespace {

std::string undefined_message(const Value& v) {
  return "UndefinedError: '" + (v.undefined_name().empty() ? "value" : v.undefined_name()) +
         "' is undefined";
}

int64_t python_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t python_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

int64_t as_int(const Value& v) {
  return v.is_bool() ? int64_t{v.get_bool()} : v.get_int();
}

// Python's `'fmt' % args` for %s %r %d %i %f %%.
std::string percent_format(Interpreter& in, const std::string& fmt, const Value& args) {
  std::vector<Value> values;
  if (args.is_list() && args.get_list().is_tuple)
    values = args.get_list().items;
  else
    values.push_back(args);
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) in.fail("ValueError: incomplete format");
    const char c = fmt[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) in.fail("TypeError: not enough arguments for format string");
    const Value& v = values[next++];
    if (c == 's')
      out += v.str();
    else if (c == 'r')
      out += v.repr();
    else if ((c == 'd' || c == 'i') && v.is_number())
      out += std::to_string(static_cast<int64_t>(v.to_double()));
    else if (c == 'f' && v.is_number()) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%f", v.to_double());
      out += buf;
    } else {
      in.fail(std::string("ValueError: unsupported format character '") + c + "'");
    }
  }
  if (next < values.size())
    in.fail("TypeError: not all arguments converted during string formatting");
  return out;
}

}  // namespace

Value Interpreter::lookup(const std::string& name, const Scope& scope) const {
  for (const Scope* s = &scope; s; s = s->parent.get()) {
    if (const Value* v = s->find_local(name)) return *v;
  }
  for (const auto& [k, v] : globals_) {
    if (k == name) return v;
  }
  return Value::undefined(name);
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail(undefined_message(obj));
  if (obj.is_dict()) {
    if (!obj.get_dict().is_namespace) {
      Value m = find_method(*this, obj, name);
      if (!m.is_undefined()) return m;
    }
    if (const Value* v = obj.get_dict().find(name)) return *v;
    return Value::undefined(name);
  }
  if (obj.is_string() || obj.is_list()) return find_method(*this, obj, name);
  return Value::undefined(name);
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail(undefined_message(obj));
  if (obj.is_dict()) {
    if (const Value* v = obj.get_dict().find(key)) return *v;
    if (key.is_string() && !obj.get_dict().is_namespace)
      return find_method(*this, obj, key.get_string());
    return Value::undefined(key.is_string() ? key.get_string() : key.repr());
  }
  if (obj.is_list() && obj.get_list().is_generator) {
    fail("TypeError: 'generator' object is not subscriptable");
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = as_int(key);
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.get_list().items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(std::string("[").append(std::to_string(as_int(key))).append("]"));
      return obj.get_list().items[static_cast<size_t>(i)];
    }
    const std::vector<size_t> off = utf8_offsets(obj.get_string());
    const auto n = static_cast<int64_t>(off.size()) - 1;
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined(std::string("[").append(std::to_string(as_int(key))).append("]"));
    const auto k = static_cast<size_t>(i);
    return Value(obj.get_string().substr(off[k], off[k + 1] - off[k]));
  }
  if (key.is_string()) return get_attr(obj, key.get_string());
  return Value::undefined(key.repr());
}

std::vector<Value> Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return {};
    case Kind::List:
      return v.get_list().items;
    case Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& [k, e] : v.get_dict().items) keys.push_back(k);
      return keys;
    }
    case Kind::String: {
      std::vector<Value> chars;
      const std::string& s = v.get_string();
      for (size_t i = 0; i < s.size();) {
        const size_t start = i;
        utf8_next(s, i);
        chars.emplace_back(s.substr(start, i - start));
      }
      return chars;
    }
    default:
      fail(std::string("TypeError: '") + v.type_name() + "' object is not iterable");
  }
}

Value Interpreter::call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) fail(undefined_message(fn));
  if (!fn.is_function())
    fail(std::string("TypeError: '") + fn.type_name() + "' object is not callable");
  step();
  return fn.get_function().fn(*this, args);
}

bool Interpreter::run_test(const std::string& name, const Value& v, CallArgs& args) {
  return apply_test(*this, name, v, args);
}

Value Interpreter::run_filter(const std::string& name, const Value& v, CallArgs& args) {
  return apply_filter(*this, name, v, args);
}

void Interpreter::eval_args(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope,
                            CallArgs& out) {
  for (size_t i = first; i < e.args.size(); ++i) out.positional.push_back(eval(*e.args[i], scope));
  if (e.star_args) {
    for (Value& v : iterate(eval(*e.star_args, scope))) out.positional.push_back(std::move(v));
  }
  for (const auto& [k, v] : e.kwargs) out.keyword.emplace_back(k, eval(*v, scope));
  if (e.star_kwargs) {
    const Value d = eval(*e.star_kwargs, scope);
    if (!d.is_dict())
      fail(std::string("TypeError: argument after ** must be a mapping, not ") + d.type_name());
    for (const auto& [k, v] : d.get_dict().items) out.keyword.emplace_back(k.str(), v);
  }
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  step();
  switch (e.kind) {
    case ExprKind::Literal:
      return e.literal;
    case ExprKind::Name:
      return lookup(e.name, *scope);
    case ExprKind::BlockValue:
      return lookup("\x01block", *scope);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const ExprPtr& a : e.args) items.push_back(eval(*a, scope));
      return e.kind == ExprKind::List ? Value::list(std::move(items))
                                      : Value::tuple(std::move(items));
    }
    case ExprKind::Dict: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i], scope);
        d.get_dict().set(std::move(k), eval(*e.args[i + 1], scope));
      }
      return d;
    }
    case ExprKind::Attr: {
      Value obj = eval(*e.args[0], scope);
      at(e.line, e.column);
      return get_attr(obj, e.name);
    }
    case ExprKind::Item: {
      Value obj = eval(*e.args[0], scope);
      Value key = eval(*e.args[1], scope);
      at(e.line, e.column);
      return get_item(obj, key);
    }
    case ExprKind::Slice:
      return eval_slice(e, scope);
    case ExprKind::Call: {
      Value fn = eval(*e.args[0], scope);
      CallArgs args;
      eval_args(e, 1, scope, args);
      at(e.line, e.column);
      return call(fn, args);
    }
    case ExprKind::Filter: {
      Value v = eval(*e.args[0], scope);
      CallArgs args;
      eval_args(e, 1, scope, args);
      at(e.line, e.column);
      return apply_filter(*this, e.name, v, args);
    }
    case ExprKind::Test: {
      Value v = eval(*e.args[0], scope);
      CallArgs args;
      eval_args(e, 1, scope, args);
      at(e.line, e.column);
      return Value(apply_test(*this, e.name, v, args) != e.negated);
    }
    case ExprKind::Unary: {
      Value v = eval(*e.args[0], scope);
      at(e.line, e.column);
      if (e.name == "not") return Value(!v.truthy());
      if (v.is_undefined()) fail(undefined_message(v));
      if (!v.is_number())
        fail("TypeError: bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      if (e.name == "+") return v.is_bool() ? Value(as_int(v)) : v;
      if (v.is_float()) return Value(-v.get_float());
      if (as_int(v) == INT64_MIN) fail("OverflowError: integer overflow");
      return Value(-as_int(v));
    }
    case ExprKind::Binary:
      return eval_binary(e, scope);
    case ExprKind::Cond: {
      if (eval(*e.args[1], scope).truthy()) return eval(*e.args[0], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined();
    }
  }
  return Value::undefined();
}

Value Interpreter::eval_slice(const Expr& e, const std::shared_ptr<Scope>& scope) {
  Value obj = eval(*e.args[0], scope);
  Value parts[3];
  for (int i = 0; i < 3; ++i) {
    parts[i] = e.args[static_cast<size_t>(i) + 1] ? eval(*e.args[static_cast<size_t>(i) + 1], scope)
                                                  : Value::none();
  }
  at(e.line, e.column);
  if (obj.is_undefined()) fail(undefined_message(obj));
  for (const Value& p : parts) {
    if (!p.is_none() && !p.is_int() && !p.is_bool()) {
      fail("TypeError: slice indices must be integers or None");
    }
  }
  const bool is_str = obj.is_string();
  if (obj.is_list() && obj.get_list().is_generator) {
    fail("TypeError: 'generator' object is not subscriptable");
  }
  if (!is_str && !obj.is_list())
    fail(std::string("TypeError: '") + obj.type_name() + "' object is not subscriptable");
  std::vector<size_t> off;
  int64_t n;
  if (is_str) {
    off = utf8_offsets(obj.get_string());
    n = static_cast<int64_t>(off.size()) - 1;
  } else {
    n = static_cast<int64_t>(obj.get_list().items.size());
  }
  const int64_t step_by = parts[2].is_none() ? 1 : as_int(parts[2]);
  if (step_by == 0) fail("ValueError: slice step cannot be zero");
  auto clamp = [&](const Value& p, int64_t dflt, int64_t lo, int64_t hi) {
    if (p.is_none()) return dflt;
    int64_t i = as_int(p);
    if (i < 0) i += n;
    return std::clamp(i, lo, hi);
  };
  int64_t start, stop;
  if (step_by > 0) {
    start = clamp(parts[0], 0, 0, n);
    stop = clamp(parts[1], n, 0, n);
  } else {
    start = clamp(parts[0], n - 1, -1, n - 1);
    stop = clamp(parts[1], -1, -1, n - 1);
    if (!parts[1].is_none() && as_int(parts[1]) < -n) stop = -1;
  }
  if (is_str && step_by == 1) {
    if (stop <= start) return Value("");
    return Value(
        obj.get_string().substr(off[static_cast<size_t>(start)],
                                off[static_cast<size_t>(stop)] - off[static_cast<size_t>(start)]));
  }
  std::string s;
  std::vector<Value> items;
  for (int64_t i = start; step_by > 0 ? i < stop : i > stop; i += step_by) {
    step();
    const auto k = static_cast<size_t>(i);
    if (is_str)
      s.append(obj.get_string(), off[k], off[k + 1] - off[k]);
    else
      items.push_back(obj.get_list().items[k]);
  }
  if (is_str) return Value(std::move(s));
  return obj.get_list().is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

Value Interpreter::eval_binary(const Expr& e, const std::shared_ptr<Scope>& scope) {
  const std::string& op = e.name;
  Value a = eval(*e.args[0], scope);
  if (op == "and") return a.truthy() ? eval(*e.args[1], scope) : a;
  if (op == "or") return a.truthy() ? a : eval(*e.args[1], scope);
  Value b = eval(*e.args[1], scope);
  at(e.line, e.column);
  if (op == "==") return Value(a == b);
  if (op == "!=") return Value(!(a == b));
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string())
        fail(std::string("TypeError: 'in <string>' requires string as left operand, not ") +
             a.type_name());
      found = b.get_string().find(a.get_string()) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& x : b.get_list().items) found = found || x == a;
    } else if (b.is_dict()) {
      found = b.get_dict().find(a) != nullptr;
    } else if (!b.is_undefined()) {
      fail(std::string("TypeError: argument of type '") + b.type_name() + "' is not iterable");
    }
    return Value(found == (op == "in"));
  }
  if (op == "~") {
    std::string s = a.str();
    b.append_str(s);
    check_size(s);
    return Value(std::move(s));
  }
  if (a.is_undefined()) fail(undefined_message(a));
  if (b.is_undefined()) fail(undefined_message(b));
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    const std::optional<int> c = compare_values(a, b);
    if (!c)
      fail("TypeError: '" + op + "' not supported between instances of '" + a.type_name() +
           "' and '" + b.type_name() + "'");
    if (*c == 2) return Value(false);  // NaN
    if (op == "<") return Value(*c < 0);
    if (op == ">") return Value(*c > 0);
    if (op == "<=") return Value(*c <= 0);
    return Value(*c >= 0);
  }
  const std::string type_error = "TypeError: unsupported operand type(s) for " + op + ": '" +
                                 a.type_name() + "' and '" + b.type_name() + "'";
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float() && op != "/") {
      const int64_t x = as_int(a), y = as_int(b);
      int64_t r = 0;
      bool overflow = false;
      if (op == "+")
        overflow = __builtin_add_overflow(x, y, &r);
      else if (op == "-")
        overflow = __builtin_sub_overflow(x, y, &r);
      else if (op == "*")
        overflow = __builtin_mul_overflow(x, y, &r);
      else if (op == "//" || op == "%") {
        if (y == 0) fail("ZeroDivisionError: integer division or modulo by zero");
        if (x == INT64_MIN && y == -1)
          overflow = true;
        else
          r = op == "//" ? python_floordiv(x, y) : python_mod(x, y);
      } else if (op == "**") {
        if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
        r = 1;
        for (int64_t i = 0; i < y && !overflow; ++i) {
          overflow = __builtin_mul_overflow(r, x, &r);
          if (r == 0 || r == 1) break;
          if (r == -1) {
            r = (y % 2 == 0) ? 1 : -1;
            break;
          }
        }
      }
      if (overflow) fail("OverflowError: integer overflow");
      return Value(r);
    }
    const double x = a.to_double(), y = b.to_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "/") {
      if (y == 0) fail("ZeroDivisionError: division by zero");
      return Value(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail("ZeroDivisionError: float modulo");
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      if (op == "%") return Value(m);
      const double div = (x - m) / y;
      double floored = std::floor(div);
      if (div - floored > 0.5) floored += 1.0;
      return Value(floored);
    }
    if (op == "**") return Value(std::pow(x, y));
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      std::string s = a.get_string() + b.get_string();
      check_size(s);
      step(static_cast<int64_t>(s.size() / 256));
      return Value(std::move(s));
    }
    if (a.is_list() && b.is_list()) {
      std::vector<Value> items = a.get_list().items;
      items.insert(items.end(), b.get_list().items.begin(), b.get_list().items.end());
      step(static_cast<int64_t>(items.size()));
      return a.get_list().is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    if (a.is_string())
      fail(std::string("TypeError: can only concatenate str (not \"") + b.type_name() +
           "\") to str");
    if (a.is_list())
      fail(std::string("TypeError: can only concatenate list (not \"") + b.type_name() +
           "\") to list");
  }
  if (op == "*") {
    const Value* seq =
        a.is_string() || a.is_list() ? &a : (b.is_string() || b.is_list() ? &b : nullptr);
    const Value* count = seq == &a ? &b : &a;
    if (seq && (count->is_int() || count->is_bool())) {
      const int64_t n = std::max<int64_t>(0, as_int(*count));
      if (seq->is_string()) {
        const std::string& s = seq->get_string();
        step(n);
        if (!s.empty() && static_cast<uint64_t>(n) > limits_.max_output_bytes / s.size()) {
          check_size(limits_.max_output_bytes + 1);
        }
        std::string r;
        for (int64_t i = 0; i < n; ++i) r += s;
        return Value(std::move(r));
      }
      const auto& src = seq->get_list().items;
      step(n);
      step(n * static_cast<int64_t>(src.size()));
      std::vector<Value> items;
      for (int64_t i = 0; i < n; ++i) items.insert(items.end(), src.begin(), src.end());
      return Value::list(std::move(items));
    }
  }
  if (op == "%" && a.is_string()) {
    std::string s = percent_format(*this, a.get_string(), b);
    check_size(s);
    return Value(std::move(s));
  }
  fail(type_error);
}

}  // namespace akv::jinja
