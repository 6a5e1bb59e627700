// Status, StatusOr and the propagation macros.
#include "core/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace laminar {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgumentError("odd value " + std::to_string(x));
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  LAMINAR_ASSIGN_OR_RETURN(int h, Half(x));
  LAMINAR_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  LAMINAR_RETURN_IF_ERROR(Half(x), "checking x");
  return OkStatus();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(OkStatus().ok());
  Status s = NotFoundError("no file a.bin");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: no file a.bin");
  EXPECT_EQ(s.WithContext("loading").message(), "loading: no file a.bin");
  EXPECT_TRUE(OkStatus().WithContext("x").ok());
}

TEST(StatusTest, StatusOrPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd value 3");
  Status c = CheckEven(3);
  EXPECT_EQ(c.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.message(), "checking x: odd value 3");
}

TEST(StatusTest, ErrnoMapsCodes) {
  EXPECT_EQ(ErrnoError("open x", ENOENT).code(), StatusCode::kNotFound);
  EXPECT_NE(ErrnoError("open x", ENOENT).message().find("open x"), std::string::npos);
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  StatusOr<int> r = InternalError("boom");
  EXPECT_DEATH((void)r.value(), "boom");
}

TEST(CheckDeathTest, CheckPrintsMessage) {
  EXPECT_DEATH(LAMINAR_CHECK_EQ(1, 2) << "context here", "context here");
}

}  // namespace
}  // namespace laminar
