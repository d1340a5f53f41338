// Test helpers for Status/StatusOr (GoogleTest). Not for library code.
#ifndef CHORUS_COMMON_STATUS_TESTING_H_
#define CHORUS_COMMON_STATUS_TESTING_H_

#include <gtest/gtest.h>

#include <utility>

// The value of `expr` (a StatusOr); if it is an error, a failure naming it
// and a return from the calling test (a void function). A GNU statement
// expression, so that it can stand inside an expression.
#define VALUE_OR_FAIL(expr)                                   \
  ({                                                          \
    auto result_ = (expr);                                    \
    EXPECT_TRUE(result_.ok()) << result_.status().ToString(); \
    if (!result_.ok()) return;                                \
    std::move(result_).value();                               \
  })

#endif  // CHORUS_COMMON_STATUS_TESTING_H_
