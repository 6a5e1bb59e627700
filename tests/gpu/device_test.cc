// GPU presence: skips without a device; on a GPU machine checks the device is described.
#include "core/cuda/device.h"

#include <gtest/gtest.h>

namespace laminar {
namespace {

TEST(CudaDeviceTest, DescribesEachDevice) {
  int n = CudaDeviceCount();
  if (n == 0) GTEST_SKIP() << "no CUDA device (built with CUDA: " << BuiltWithCuda() << ")";
  for (int i = 0; i < n; ++i) EXPECT_FALSE(CudaDeviceName(i).empty()) << "device " << i;
  EXPECT_TRUE(CudaDeviceName(n).empty());
}

}  // namespace
}  // namespace laminar
