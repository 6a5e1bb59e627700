// CUDA build: device discovery through the runtime API; failures mean "no device".
#include <cuda_runtime.h>

#include <cstdio>

#include "core/cuda/device.h"

namespace laminar {

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error from a missing driver
    return 0;
  }
  return n;
}

std::string CudaDeviceName(int index) {
  if (index < 0 || index >= CudaDeviceCount()) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "";
  char buf[320];
  std::snprintf(buf, sizeof(buf), "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

bool BuiltWithCuda() { return true; }

}  // namespace laminar
