// Tree-walking Jinja2 interpreter with transformers' environment: Undefined (not strict) for
// missing names, raise_exception / strftime_now / namespace / range globals, Python-compatible
// printing. Internal to src/chat; ChatTemplate is the public face. One Interpreter per render.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/ast.h"
#include "chat/render_limits.h"
#include "chat/value.h"

namespace akv::jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find_local(std::string_view name) const;
  void set(const std::string& name, Value value);
};

class Interpreter {
 public:
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  Interpreter(const RenderLimits& limits, Clock clock);

  // Renders `body` with `context` (a dict) as the top-level variables.
  std::string render(const Body& body, const Value& context);

  // For builtins: throws Error(InvalidArgument, "line L, column C: <message>") at the node being
  // evaluated.
  [[noreturn]] void fail(const std::string& message) const;
  // Counts `n` steps against max_steps.
  void step(int64_t n = 1);
  // Throws when `s` is longer than max_output_bytes.
  void check_size(const std::string& s) const { check_size(s.size()); }
  void check_size(size_t n_bytes) const;
  const RenderLimits& limits() const { return limits_; }

  Value call(const Value& fn, CallArgs& args);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  // Python iteration: list items, dict keys, string characters; Undefined is empty.
  std::vector<Value> iterate(const Value& v);
  bool run_test(const std::string& name, const Value& v, CallArgs& args);
  Value run_filter(const std::string& name, const Value& v, CallArgs& args);
  std::chrono::system_clock::time_point now() const { return clock_(); }

 private:
  enum class Flow { Normal, Break, Continue };

  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_binary(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_slice(const Expr& e, const std::shared_ptr<Scope>& scope);
  void eval_args(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope, CallArgs& out);
  Value lookup(const std::string& name, const Scope& scope) const;

  Flow exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  void exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope, Value v);
  void assign(const Stmt& s, Scope& scope, const Value& v);
  Value make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string name);
  std::string render_block(const Body& body, const std::shared_ptr<Scope>& scope);
  void append_output(std::string& out, const Value& v);
  void at(int line, int column) {
    line_ = line;
    column_ = column;
  }

  RenderLimits limits_;
  Clock clock_;
  std::shared_ptr<Scope> root_;
  std::vector<std::pair<std::string, Value>> globals_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
  int column_ = 0;
};

// Builtin tables (filters.cpp, builtin_tests.cpp, methods.cpp, globals.cpp).
Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
// A bound method of a str/list/dict value, or Undefined when `obj` has no method `name`.
Value find_method(Interpreter& in, const Value& obj, const std::string& name);
std::vector<std::pair<std::string, Value>> make_globals();

}  // namespace akv::jinja
