// CPU-only build: no CUDA devices.
#include "core/cuda/device.h"

namespace laminar {
int CudaDeviceCount() { return 0; }
std::string CudaDeviceName(int) { return ""; }
bool BuiltWithCuda() { return false; }
}  // namespace laminar
