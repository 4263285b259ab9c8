// Python's json.dumps over interpreter values, byte for byte as transformers' tojson filter
// produces it (ensure_ascii=False by default, ", "/": " separators, optional indent/sort_keys).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "chat/text.h"
#include "chat/value.h"

namespace akv::jinja {
namespace {

constexpr int kMaxJsonDepth = 512;

void dump_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = utf8_next(s, i);
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7f)) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += '"';
}

std::string key_string(const Value& k) {
  switch (k.kind()) {
    case Kind::String:
      return k.get_string();
    case Kind::None:
      return "null";
    case Kind::Bool:
      return k.get_bool() ? "true" : "false";
    case Kind::Int:
      return std::to_string(k.get_int());
    case Kind::Float:
      return python_float_repr(k.get_float());
    default:
      throw Error(ErrorKind::InvalidArgument,
                  std::string("TypeError: keys must be str, int, float, bool or None, not ") +
                      k.type_name());
  }
}

struct Dumper {
  const JsonDumpOptions& opt;
  std::string item_sep;
  std::string key_sep;
  std::string out;

  void newline(int depth) {
    out += '\n';
    out.append(static_cast<size_t>(opt.indent) * static_cast<size_t>(depth), ' ');
  }

  void dump(const Value& v, int depth) {
    if (depth > kMaxJsonDepth) {
      throw Error(ErrorKind::InvalidArgument, "ValueError: tojson nesting too deep");
    }
    switch (v.kind()) {
      case Kind::None:
        out += "null";
        return;
      case Kind::Bool:
        out += v.get_bool() ? "true" : "false";
        return;
      case Kind::Int:
        out += std::to_string(v.get_int());
        return;
      case Kind::Float: {
        const double d = v.get_float();
        if (std::isnan(d))
          out += "NaN";
        else if (std::isinf(d))
          out += d > 0 ? "Infinity" : "-Infinity";
        else
          out += python_float_repr(d);
        return;
      }
      case Kind::String:
        dump_string(out, v.get_string(), opt.ensure_ascii);
        return;
      case Kind::List: {
        if (v.get_list().is_generator) {
          throw Error(ErrorKind::InvalidArgument,
                      "TypeError: Object of type generator is not JSON serializable");
        }
        const auto& items = v.get_list().items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (opt.indent >= 0) newline(depth + 1);
          dump(items[i], depth + 1);
        }
        if (opt.indent >= 0) newline(depth);
        out += ']';
        return;
      }
      case Kind::Dict: {
        std::vector<std::pair<std::string, const Value*>> items;
        for (const auto& [k, val] : v.get_dict().items) items.emplace_back(key_string(k), &val);
        if (opt.sort_keys) {
          std::stable_sort(items.begin(), items.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        }
        if (items.empty()) {
          out += "{}";
          return;
        }
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (opt.indent >= 0) newline(depth + 1);
          dump_string(out, items[i].first, opt.ensure_ascii);
          out += key_sep;
          dump(*items[i].second, depth + 1);
        }
        if (opt.indent >= 0) newline(depth);
        out += '}';
        return;
      }
      case Kind::Undefined:
      case Kind::Function:
        throw Error(ErrorKind::InvalidArgument, std::string("TypeError: Object of type ") +
                                                    v.type_name() + " is not JSON serializable");
    }
  }
};

}  // namespace

std::string python_json_dumps(const Value& v, const JsonDumpOptions& options) {
  Dumper d{options, options.indent >= 0 ? "," : ", ", ": ", {}};
  if (options.separators) {
    d.item_sep = options.separators->first;
    d.key_sep = options.separators->second;
  }
  d.dump(v, 0);
  return std::move(d.out);
}

}  // namespace akv::jinja
