// Statement execution: output, if, for (loop object, filters, unpacking, break/continue), set,
// macros and call blocks, filter blocks, scopes. Expressions are in eval.cpp.
#include "chat/interpreter.h"

#include <algorithm>

#include "base/error.h"

namespace akv::jinja {

const Value* Scope::find_local(std::string_view name) const {
  for (const auto& [k, v] : vars) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

Interpreter::Interpreter(const RenderLimits& limits, Clock clock)
    : limits_(limits), clock_(std::move(clock)), globals_(make_globals()) {}

std::string Interpreter::render(const Body& body, const Value& context) {
  root_ = std::make_shared<Scope>();
  if (context.is_dict()) {
    for (const auto& [k, v] : context.get_dict().items) {
      if (k.is_string()) root_->set(k.get_string(), v);
    }
  }
  std::string out;
  exec(body, root_, out);
  root_.reset();
  return out;
}

void Interpreter::fail(const std::string& message) const {
  throw Error(ErrorKind::InvalidArgument, "line " + std::to_string(line_) + ", column " +
                                              std::to_string(column_) + ": " + message);
}

void Interpreter::step(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    throw Error(ErrorKind::ResourceExhausted,
                "line " + std::to_string(line_) + ": template exceeded " +
                    std::to_string(limits_.max_steps) + " evaluation steps");
  }
}

void Interpreter::check_size(size_t n_bytes) const {
  if (n_bytes > limits_.max_output_bytes) {
    throw Error(ErrorKind::ResourceExhausted,
                "line " + std::to_string(line_) + ": template output exceeds " +
                    std::to_string(limits_.max_output_bytes) + " bytes");
  }
}

void Interpreter::append_output(std::string& out, const Value& v) {
  v.append_str(out);
  check_size(out);
}

std::string Interpreter::render_block(const Body& body, const std::shared_ptr<Scope>& scope) {
  std::string out;
  exec(body, scope, out);
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const std::shared_ptr<Scope>& scope,
                                    std::string& out) {
  for (const StmtPtr& s : body) {
    const Flow f = exec_stmt(*s, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                         std::string& out) {
  at(s.line, s.column);
  step();
  switch (s.kind) {
    case StmtKind::Text:
      out += s.text;
      check_size(out);
      return Flow::Normal;
    case StmtKind::Output:
      append_output(out, eval(*s.expr, scope));
      return Flow::Normal;
    case StmtKind::If:
      return exec(eval(*s.expr, scope).truthy() ? s.body : s.else_body, scope, out);
    case StmtKind::For:
      return exec_for(s, scope, out);
    case StmtKind::Set:
      exec_set(s, scope, eval(*s.expr, scope));
      return Flow::Normal;
    case StmtKind::SetBlock: {
      Value v(render_block(s.body, scope));
      if (s.filter) {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        inner->set("\x01block", std::move(v));
        v = eval(*s.filter, inner);
      }
      exec_set(s, scope, std::move(v));
      return Flow::Normal;
    }
    case StmtKind::Macro:
      scope->set(s.text, make_macro(s, scope, s.text));
      return Flow::Normal;
    case StmtKind::CallBlock: {
      const Expr& call = *s.expr;
      Value callee = eval(*call.args[0], scope);
      CallArgs args;
      eval_args(call, 1, scope, args);
      args.keyword.emplace_back("caller", make_macro(s, scope, "caller"));
      at(s.line, s.column);
      append_output(out, this->call(callee, args));
      return Flow::Normal;
    }
    case StmtKind::FilterBlock: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      inner->set("\x01block", Value(render_block(s.body, scope)));
      append_output(out, eval(*s.filter, inner));
      return Flow::Normal;
    }
    case StmtKind::Break:
      return Flow::Break;
    case StmtKind::Continue:
      return Flow::Continue;
    case StmtKind::Scope: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (size_t i = 0; i < s.targets.size(); ++i) {
        inner->set(s.targets[i], eval(*s.defaults[i], scope));
      }
      return exec(s.body, inner, out);
    }
  }
  return Flow::Normal;
}

void Interpreter::assign(const Stmt& s, Scope& scope, const Value& v) {
  if (s.targets.size() == 1 && !s.targets_tuple) {
    scope.set(s.targets[0], v);
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() > s.targets.size()) {
    fail("ValueError: too many values to unpack (expected " + std::to_string(s.targets.size()) +
         ")");
  }
  if (items.size() < s.targets.size()) {
    fail("ValueError: not enough values to unpack (expected " + std::to_string(s.targets.size()) +
         ", got " + std::to_string(items.size()) + ")");
  }
  for (size_t i = 0; i < items.size(); ++i) scope.set(s.targets[i], items[i]);
}

void Interpreter::exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope, Value v) {
  if (s.text.empty()) {
    assign(s, *scope, v);
    return;
  }
  const Value target = lookup(s.targets[0], *scope);
  if (!target.is_dict() || !target.get_dict().is_namespace) {
    fail("TemplateRuntimeError: cannot assign attribute on non-namespace object");
  }
  if (reaches(v, &target.get_dict())) fail("ValueError: a namespace cannot contain itself");
  target.get_dict().set(Value(s.text), std::move(v));
}

namespace {

Value make_loop(const std::vector<Value>& items, size_t i) {
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  Value loop = Value::dict();
  DictData& d = loop.get_dict();
  d.items.reserve(12);
  d.items.emplace_back(Value("index"), Value(k + 1));
  d.items.emplace_back(Value("index0"), Value(k));
  d.items.emplace_back(Value("revindex"), Value(n - k));
  d.items.emplace_back(Value("revindex0"), Value(n - k - 1));
  d.items.emplace_back(Value("first"), Value(i == 0));
  d.items.emplace_back(Value("last"), Value(k == n - 1));
  d.items.emplace_back(Value("length"), Value(n));
  d.items.emplace_back(Value("depth"), Value(1));
  d.items.emplace_back(Value("depth0"), Value(0));
  if (i > 0) d.items.emplace_back(Value("previtem"), items[i - 1]);
  if (k + 1 < n) d.items.emplace_back(Value("nextitem"), items[i + 1]);
  d.items.emplace_back(Value("cycle"), Value::function("cycle", [k](Interpreter& in, CallArgs& a) {
                         if (a.positional.empty()) in.fail("TypeError: no items for cycling given");
                         return a.positional[static_cast<size_t>(k) % a.positional.size()];
                       }));
  int depth = 0;
  for (const auto& [key, v] : d.items) depth = std::max(depth, value_depth(v));
  d.depth = depth + 1;
  return loop;
}

}  // namespace

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                        std::string& out) {
  std::vector<Value> items = iterate(eval(*s.expr, scope));
  if (s.cond) {
    std::vector<Value> kept;
    for (Value& item : items) {
      step();
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      assign(s, *probe, item);
      if (eval(*s.cond, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    exec(s.else_body, inner, out);
    return Flow::Normal;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    at(s.line, s.column);
    step();
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    assign(s, *inner, items[i]);
    inner->set("loop", make_loop(items, i));
    if (exec(s.body, inner, out) == Flow::Break) break;
  }
  return Flow::Normal;
}

// Macros and call-block callers: a function that binds its parameters in a scope whose parent
// is the defining scope (or the top level once that scope has ended) and renders its body.
Value Interpreter::make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope,
                              std::string name) {
  std::weak_ptr<Scope> defined_in = scope;
  const Stmt* macro = &s;
  return Value::function(name, [macro, defined_in, name](Interpreter& in, CallArgs& args) {
    auto local = std::make_shared<Scope>();
    local->parent = defined_in.lock();
    if (!local->parent) local->parent = in.root_;
    std::vector<Value> varargs;
    for (size_t i = macro->targets.size(); i < args.positional.size(); ++i) {
      varargs.push_back(args.positional[i]);
    }
    Value kwargs = Value::dict();
    for (auto& [k, v] : args.keyword) {
      const bool is_param =
          std::find(macro->targets.begin(), macro->targets.end(), k) != macro->targets.end();
      if (k == "caller")
        local->set("caller", v);
      else if (!is_param)
        kwargs.get_dict().set(Value(k), v);
    }
    for (size_t i = 0; i < macro->targets.size(); ++i) {
      const std::string& p = macro->targets[i];
      if (const Value* v = args.get(i, p)) {
        local->set(p, *v);
      } else if (macro->defaults[i]) {
        local->set(p, in.eval(*macro->defaults[i], local));
      } else {
        local->set(p, Value::undefined(p));
      }
    }
    local->set("varargs", Value::tuple(std::move(varargs)));
    local->set("kwargs", std::move(kwargs));
    if (++in.call_depth_ > in.limits_.max_call_depth) {
      --in.call_depth_;
      throw Error(ErrorKind::ResourceExhausted, "macro '" + name + "' nested deeper than " +
                                                    std::to_string(in.limits_.max_call_depth) +
                                                    " calls");
    }
    std::string out;
    try {
      in.exec(macro->body, local, out);
    } catch (...) {
      --in.call_depth_;
      throw;
    }
    --in.call_depth_;
    return Value(std::move(out));
  });
}

}  // namespace akv::jinja
