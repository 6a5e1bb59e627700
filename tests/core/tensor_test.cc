// DType conversions, shapes and tensors.
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace laminar {
namespace {

TEST(DTypeTest, HalfRoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), h) << "half 0x" << std::hex << h << " -> " << f;
  }
}

TEST(DTypeTest, HalfRoundsToNearestEven) {
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 1.0f / 2048)), 1.0f);  // tie, rounds to even
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 3.0f / 2048)), 1.0f + 4.0f / 2048);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);                                 // overflow to +inf
  EXPECT_EQ(HalfToFloat(FloatToHalf(5.9604645e-08f)), 5.9604645e-08f);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(2.0e-8f), 0);
}

TEST(DTypeTest, BF16) {
  EXPECT_EQ(BF16ToFloat(FloatToBF16(1.5f)), 1.5f);
  EXPECT_EQ(FloatToBF16(1.0f + 1.0f / 256), 0x3f80);  // tie to even
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, Names) {
  DType d;
  ASSERT_TRUE(ParseDType("bf16", &d));
  EXPECT_EQ(d, DType::kBF16);
  EXPECT_FALSE(ParseDType("float", &d));
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
}

TEST(TensorTest, ShapeAndStorage) {
  Tensor t(DType::kF32, {2, 3});
  EXPECT_EQ(t.num_elements(), 6);
  EXPECT_EQ(t.size_bytes(), 24u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  t.data_as<float>()[5] = 7;
  Tensor c = t.Clone();
  EXPECT_EQ(c.data_as<float>()[5], 7);
  c.Reshape({6});
  EXPECT_EQ(c.shape().ToString(), "[6]");
  EXPECT_EQ(Shape{}.num_elements(), 1);
}

TEST(TensorTest, CheckedNumBytes) {
  std::vector<int64_t> ok = {4, 5};
  EXPECT_EQ(*CheckedNumBytes(ok, 2), 40);
  std::vector<int64_t> huge = {1LL << 40, 1LL << 40};
  EXPECT_FALSE(CheckedNumBytes(huge, 4).ok());
  std::vector<int64_t> neg = {3, -1};
  EXPECT_FALSE(CheckedNumBytes(neg, 4).ok());
}

TEST(TensorTest, ToF32) {
  uint16_t half[3] = {FloatToHalf(1.5f), FloatToHalf(-2.0f), 0};
  auto t = ToF32(TensorView(half, DType::kF16, {3}));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->data_as<float>()[1], -2.0f);
  int32_t ints[1] = {1};
  EXPECT_FALSE(ToF32(TensorView(ints, DType::kI32, {1})).ok());
}

}  // namespace
}  // namespace laminar
