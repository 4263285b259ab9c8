// UTF-8 helpers and Python str operations (strip, split, replace, case mapping) on UTF-8
// std::string, with Python's semantics: indices and lengths count code points.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace akv::jinja {

// Decodes the code point at s[i] and advances i. Invalid bytes decode as themselves (one byte).
uint32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, uint32_t cp);
size_t utf8_length(std::string_view s);
// Byte offset of every code point, plus s.size() at the end: [n_code_points + 1].
std::vector<size_t> utf8_offsets(std::string_view s);

bool is_python_space(uint32_t cp);

// str.strip/lstrip/rstrip; `chars` nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split / str.rsplit; `sep` nullopt splits on runs of whitespace. maxsplit < 0: no limit.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit);
// str.replace(old, new, count); count < 0: all.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string jinja_title(std::string_view s);    // Jinja's |title filter (word split on -\s({[<)
// Number of non-overlapping occurrences (str.count); empty needle counts n_code_points + 1.
int64_t py_count(std::string_view s, std::string_view needle);
// Code point index of the first occurrence, or -1 (str.find).
int64_t py_find(std::string_view s, std::string_view needle);

}  // namespace akv::jinja
