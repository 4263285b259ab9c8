// Python str semantics over UTF-8; case mapping from utf8proc (simple, one-to-one mappings).
#include "chat/text.h"

#include <utf8proc.h>

#include <algorithm>

namespace akv::jinja {

uint32_t utf8_next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) -> int {
    if (i + k >= s.size()) return -1;
    const auto b = static_cast<unsigned char>(s[i + k]);
    return (b & 0xC0) == 0x80 ? (b & 0x3F) : -1;
  };
  if (b0 < 0x80) {
    i += 1;
    return b0;
  }
  int n = 0;
  uint32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 1;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 2;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 3;
    cp = b0 & 0x07;
  } else {
    i += 1;
    return b0;
  }
  for (int k = 1; k <= n; ++k) {
    const int c = cont(static_cast<size_t>(k));
    if (c < 0) {
      i += 1;
      return b0;
    }
    cp = (cp << 6) | static_cast<uint32_t>(c);
  }
  i += static_cast<size_t>(n) + 1;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    utf8_next(s, i);
    ++n;
  }
  return n;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  for (size_t i = 0; i < s.size();) {
    offsets.push_back(i);
    utf8_next(s, i);
  }
  offsets.push_back(s.size());
  return offsets;
}

bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

namespace {

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) cps.push_back(utf8_next(s, i));
  return cps;
}

template <typename F>
std::string map_code_points(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = utf8_next(s, i);
    const uint32_t mapped = f(cp);
    if (mapped == cp) {
      out.append(s.substr(start, i - start));
    } else {
      utf8_append(out, mapped);
    }
  }
  return out;
}

uint32_t to_upper(uint32_t cp) {
  return static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
uint32_t to_lower(uint32_t cp) {
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
uint32_t to_title(uint32_t cp) {
  return static_cast<uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}
bool is_cased(uint32_t cp) {
  return to_upper(cp) != cp || to_lower(cp) != cp || to_title(cp) != cp;
}

}  // namespace

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  const std::vector<uint32_t> strip_set = chars ? decode(*chars) : std::vector<uint32_t>{};
  auto strippable = [&](uint32_t cp) {
    if (!chars) return is_python_space(cp);
    return std::find(strip_set.begin(), strip_set.end(), cp) != strip_set.end();
  };
  const std::vector<size_t> off = utf8_offsets(s);
  size_t begin = 0, end = off.size() - 1;  // code point indices
  auto cp_at = [&](size_t k) {
    size_t i = off[k];
    return utf8_next(s, i);
  };
  if (left) {
    while (begin < end && strippable(cp_at(begin))) ++begin;
  }
  if (right) {
    while (end > begin && strippable(cp_at(end - 1))) --end;
  }
  return std::string(s.substr(off[begin], off[end] - off[begin]));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos || sep->empty()) break;
      parts.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    parts.emplace_back(s.substr(pos));
    return parts;
  }
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    // skip whitespace
    while (j < s.size()) {
      size_t k = j;
      if (!is_python_space(utf8_next(s, k))) break;
      j = k;
    }
    if (j >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      parts.emplace_back(s.substr(j));  // the remainder keeps its trailing whitespace
      return parts;
    }
    size_t k = j;
    while (k < s.size()) {
      size_t m = k;
      if (is_python_space(utf8_next(s, m))) break;
      k = m;
    }
    parts.emplace_back(s.substr(j, k - j));
    i = k;
  }
  return parts;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> parts;
  if (sep && !sep->empty()) {
    size_t end = s.size();
    while (static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  // whitespace rsplit with a limit: split everything, then rejoin the head.
  std::vector<std::string> all = py_split(s, std::nullopt, -1);
  if (static_cast<int64_t>(all.size()) <= maxsplit + 1) return all;
  const size_t n_head = all.size() - static_cast<size_t>(maxsplit);
  // The head keeps its original inner whitespace: find where the tail words start.
  size_t pos = s.size();
  for (size_t w = all.size(); w > n_head; --w) pos = s.rfind(all[w - 1], pos - 1);
  std::string head = py_strip(s.substr(0, pos), std::nullopt, true, true);
  parts.push_back(head);
  for (size_t w = n_head; w < all.size(); ++w) parts.push_back(all[w]);
  return parts;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count) {
  std::string out;
  if (old.empty()) {
    int64_t n = 0;
    size_t i = 0;
    while (i <= s.size()) {
      if (count < 0 || n < count) {
        out.append(repl);
        ++n;
      }
      if (i == s.size()) break;
      const size_t start = i;
      utf8_next(s, i);
      out.append(s.substr(start, i - start));
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    pos = hit + old.size();
    ++n;
  }
  out.append(s.substr(pos));
  return out;
}

std::string py_upper(std::string_view s) {
  return map_code_points(s, to_upper);
}
std::string py_lower(std::string_view s) {
  return map_code_points(s, to_lower);
}

std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_code_points(s, [&](uint32_t cp) {
    const uint32_t r = prev_cased ? to_lower(cp) : to_title(cp);
    prev_cased = is_cased(cp);
    return r;
  });
}

std::string py_capitalize(std::string_view s) {
  bool first = true;
  return map_code_points(s, [&](uint32_t cp) {
    const uint32_t r = first ? to_title(cp) : to_lower(cp);
    first = false;
    return r;
  });
}

std::string jinja_title(std::string_view s) {
  // Words start after a run of - whitespace ( { [ <; each word: first char upper, rest lower.
  bool word_start = true;
  return map_code_points(s, [&](uint32_t cp) {
    const bool sep =
        cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_python_space(cp);
    uint32_t r = cp;
    if (!sep) r = word_start ? to_upper(cp) : to_lower(cp);
    word_start = sep;
    return r;
  });
}

int64_t py_count(std::string_view s, std::string_view needle) {
  if (needle.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(needle); pos != std::string_view::npos;
       pos = s.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

int64_t py_find(std::string_view s, std::string_view needle) {
  const size_t hit = s.find(needle);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, hit)));
}

}  // namespace akv::jinja
