// fields::parse_body: every malformed body is an Error{InvalidArgument} (a 400), never another
// exception (a 500). Found by fuzz/request_parsers_fuzz.cpp.
#include <gtest/gtest.h>

#include "base/error.h"
#include "server/json_fields.h"

namespace akv {
namespace {

ErrorKind kind_of(const std::string& body) {
  try {
    fields::parse_body(body);
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::Internal;  // parsed: not what these tests expect
}

TEST(ParseBody, NumberPastDoubleIsA400) {
  EXPECT_EQ(kind_of(R"({"max_tokens": 1e999})"), ErrorKind::InvalidArgument);
  EXPECT_EQ(kind_of(R"({"temperature": -7777777777777777777777e777})"), ErrorKind::InvalidArgument);
}

TEST(ParseBody, SyntaxErrorsAndNonObjectsAre400s) {
  EXPECT_EQ(kind_of(R"({"a": )"), ErrorKind::InvalidArgument);
  EXPECT_EQ(kind_of("[1, 2]"), ErrorKind::InvalidArgument);
  EXPECT_NO_THROW(fields::parse_body(R"({"max_tokens": 1e300})"));
}

}  // namespace
}  // namespace akv
