#include "chorus/common/numbers.h"

#include <gtest/gtest.h>

namespace chorus {
namespace {

TEST(NumbersTest, ParsesDigitsAndRefusesAllElseWithoutThrowing) {
  EXPECT_EQ(ParseNonNegativeInt64("0"), 0);
  EXPECT_EQ(ParseNonNegativeInt64("007"), 7);
  EXPECT_EQ(ParseNonNegativeInt64("9223372036854775807"), INT64_MAX);
  // What std::stoll would throw on, or accept partly.
  for (const char* bad : {"", "9223372036854775808", "99999999999999999999999", "-1", "+1", " 1",
                          "1 ", "1a", "0x10", "1.5"}) {
    EXPECT_EQ(ParseNonNegativeInt64(bad), std::nullopt) << '"' << bad << '"';
  }
}

}  // namespace
}  // namespace chorus
