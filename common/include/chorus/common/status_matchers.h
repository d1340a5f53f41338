// GoogleTest support for Status and StatusOr, in abseil's shape. Test code only.
//
//   ASSERT_OK(DoThing());                    EXPECT_OK(status_or);
//   ASSERT_OK_AND_ASSIGN(auto model, Model::Load(...));
//   EXPECT_THAT(Parse("x"), StatusIs(StatusCode::kInvalidArgument, HasSubstr("x")));
#ifndef CHORUS_COMMON_STATUS_MATCHERS_H_
#define CHORUS_COMMON_STATUS_MATCHERS_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>
#include <utility>

#include "chorus/common/status.h"

namespace chorus {

inline void PrintTo(const Status& status, std::ostream* os) { *os << status.ToString(); }
template <typename T>
void PrintTo(const StatusOr<T>& status_or, std::ostream* os) {
  *os << (status_or.ok() ? "OK with a value" : status_or.status().ToString());
}

namespace testing_internal {

inline const Status& GetStatus(const Status& status) { return status; }
template <typename T>
const Status& GetStatus(const StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace testing_internal

// Matches an OK Status, or a StatusOr holding a value.
MATCHER(IsOk, negation ? "is not OK" : "is OK") {
  return ::chorus::testing_internal::GetStatus(arg).ok();
}

// Matches a Status or StatusOr whose code is `code` (and whose message matches
// `message_matcher`, a string matcher, when given).
MATCHER_P(StatusIs, code,
          std::string(negation ? "has a code other than " : "has code ") +
              ::chorus::StatusCodeName(code)) {
  return ::chorus::testing_internal::GetStatus(arg).code() == code;
}
MATCHER_P2(StatusIs, code, message_matcher,
           std::string(negation ? "does not have code " : "has code ") +
               ::chorus::StatusCodeName(code) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message_matcher, negation)) {
  const Status& status = ::chorus::testing_internal::GetStatus(arg);
  return status.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, status.message(), result_listener);
}

}  // namespace chorus

#define EXPECT_OK(expr) EXPECT_THAT((expr), ::chorus::IsOk())
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::chorus::IsOk())

// Evaluates `expr` (a StatusOr); on error, fails the test and returns from
// the calling function (which must return void); else moves the value into
// `lhs`, which may declare a variable: ASSERT_OK_AND_ASSIGN(auto x, F());
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  CHORUS_ASSERT_OK_AND_ASSIGN_IMPL_(CHORUS_STATUS_CONCAT_(status_or_value_, __LINE__), lhs, expr)
#define CHORUS_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                      \
  ASSERT_THAT(tmp, ::chorus::IsOk());                     \
  lhs = std::move(tmp).value()

#endif  // CHORUS_COMMON_STATUS_MATCHERS_H_
