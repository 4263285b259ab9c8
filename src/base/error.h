// Errors from outside input (files, HTTP bodies, headers): thrown at the edge as `Error`,
// caught at start-up and in the HTTP handler wrapper only. Broken invariants use AKV_CHECK.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace akv {

enum class ErrorKind {
  InvalidArgument,  // a bad flag, field or value from the caller
  NotFound,         // a missing file, tensor or id
  BadFormat,        // a file or body that does not parse or validate
  Unsupported,      // well-formed but not something we run (architecture, dtype, feature)
  Io,               // the operating system refused (open, read, mmap, write)
  ResourceExhausted,
  Internal,
};

std::string_view to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace akv
