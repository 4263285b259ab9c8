#include "base/error.h"

namespace akv {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return "invalid argument";
    case ErrorKind::NotFound: return "not found";
    case ErrorKind::BadFormat: return "bad format";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::Io: return "i/o error";
    case ErrorKind::ResourceExhausted: return "resource exhausted";
    case ErrorKind::Internal: return "internal error";
  }
  return "unknown error";
}

}  // namespace akv
