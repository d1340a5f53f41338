#include "chorus/common/status_matchers.h"

#include <gtest/gtest-spi.h>

#include <memory>
#include <string>

namespace chorus {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

StatusOr<std::unique_ptr<int>> MakeInt(int value) {
  if (value < 0) return InvalidArgumentError("negative value " + std::to_string(value));
  return std::make_unique<int>(value);
}

TEST(StatusMatchersTest, IsOkAndStatusIsMatchStatusAndStatusOr) {
  EXPECT_THAT(OkStatus(), IsOk());
  EXPECT_THAT(MakeInt(1), IsOk());
  EXPECT_THAT(MakeInt(-1), Not(IsOk()));
  EXPECT_THAT(MakeInt(-1), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(MakeInt(-1), StatusIs(StatusCode::kInvalidArgument, HasSubstr("-1")));
  EXPECT_THAT(NotFoundError("x"), Not(StatusIs(StatusCode::kInvalidArgument)));
  EXPECT_THAT(NotFoundError("model m"), Not(StatusIs(StatusCode::kNotFound, HasSubstr("n/a"))));
}

TEST(StatusMatchersTest, FailuresNameTheStatus) {
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(NotFoundError("no model m")), "NOT_FOUND: no model m");
  EXPECT_FATAL_FAILURE(ASSERT_OK(DataLossError("torn")), "DATA_LOSS: torn");
}

TEST(StatusMatchersTest, AssertOkAndAssignMovesTheValueOut) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<int> made, MakeInt(7));
  ASSERT_NE(made, nullptr);
  EXPECT_EQ(*made, 7);
  int existing = 0;
  ASSERT_OK_AND_ASSIGN(existing, StatusOr<int>(3));
  EXPECT_EQ(existing, 3);
}

// EXPECT_FATAL_FAILURE's statement may not use locals, hence a global.
bool reached_after_error = false;

void AssignsAfterAnError() {
  ASSERT_OK_AND_ASSIGN(auto made, MakeInt(-2));
  reached_after_error = made != nullptr;
}

TEST(StatusMatchersTest, AssertOkAndAssignFailsAndReturnsOnError) {
  EXPECT_FATAL_FAILURE(AssignsAfterAnError(), "INVALID_ARGUMENT: negative value -2");
  EXPECT_FALSE(reached_after_error);
}

}  // namespace
}  // namespace chorus
