#include "chorus/common/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace chorus {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kOk);
  EXPECT_EQ(status.message(), "");
  EXPECT_EQ(status.ToString(), "OK");
  EXPECT_EQ(status.python_error(), nullptr);
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status status = InvalidArgumentError("bad shape [2, 3]");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.ToString(), "INVALID_ARGUMENT: bad shape [2, 3]");
  // Codes are gRPC's numbers, so conversion to the wire is a cast.
  EXPECT_EQ(static_cast<int>(StatusCode::kUnauthenticated), 16);
  EXPECT_EQ(static_cast<int>(StatusCode::kResourceExhausted), 8);
}

TEST(StatusTest, AnnotateAndCopyKeepPythonDetails) {
  Status status =
      InternalError("ValueError: boom").WithPythonError({"ValueError", "boom", "Traceback ..."});
  Status annotated = status.Annotate("calling model");
  Status copy = annotated;
  EXPECT_EQ(copy.message(), "calling model: ValueError: boom");
  ASSERT_NE(copy.python_error(), nullptr);
  EXPECT_EQ(copy.python_error()->type, "ValueError");
  EXPECT_EQ(copy.python_error()->traceback, "Traceback ...");
  EXPECT_TRUE(OkStatus().Annotate("context").ok());
}

TEST(StatusTest, ErrnoErrorMapsCommonErrors) {
  EXPECT_EQ(ErrnoError("open x", ENOENT).code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoError("open x", EACCES).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoError("open x", ENOENT).message(), "open x: No such file or directory");
}

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd");
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  CHORUS_ASSIGN_OR_RETURN(int half, Half(x));
  CHORUS_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

TEST(StatusOrTest, ValueAndErrorPropagation) {
  EXPECT_EQ(*Quarter(12), 3);
  StatusOr<int> odd = Quarter(6);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
}

TEST(StatusOrTest, HoldsMoveOnlyValues) {
  StatusOr<std::unique_ptr<int>> made = std::make_unique<int>(7);
  ASSERT_TRUE(made.ok());
  std::unique_ptr<int> taken = std::move(made).value();
  EXPECT_EQ(*taken, 7);
}

TEST(StatusOrTest, OkStatusIsNotAValue) {
  StatusOr<int> wrong = OkStatus();
  EXPECT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInternal);
}

TEST(StatusOrDeathTest, ValueOfErrorAborts) {
  StatusOr<int> error = NotFoundError("no model");
  EXPECT_DEATH((void)error.value(), "NOT_FOUND: no model");
}

}  // namespace
}  // namespace chorus
