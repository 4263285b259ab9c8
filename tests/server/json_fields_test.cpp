// fields::parse_body: every malformed body is an Error{InvalidArgument} (a 400), never another
// exception (a 500). Found by fuzz/request_parsers_fuzz.cpp.
#include <gtest/gtest.h>

#include <string>

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

// An integer field given a number outside int64 (as a float, or an integer past INT64_MAX) is
// named as out of range; converting it was undefined behaviour (UBSan in the fuzz build).
TEST(RequireInt, ValuesPastInt64AreOutOfRangeNotConverted) {
  const auto refusal = [](const std::string& body) -> std::string {
    try {
      fields::require_int(fields::parse_body(body), "max_tokens", "", 1, 1000);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  for (const char* body : {R"({"max_tokens": 2.2222222222222222e88})", R"({"max_tokens": -3e30})",
                           R"({"max_tokens": 18446744073709551615})", R"({"max_tokens": 9223372036854775808.0})"})
    EXPECT_NE(refusal(body).find("Input should be between 1 and 1000"), std::string::npos) << body;
  EXPECT_NE(refusal(R"({"max_tokens": 2.5})").find("valid integer"), std::string::npos);
  EXPECT_EQ(fields::require_int(fields::parse_body(R"({"max_tokens": 1000.0})"), "max_tokens", "", 1, 1000), 1000);
}

}  // namespace
}  // namespace akv
