// GPU presence, so that GPU tests and GPU paths can skip cleanly on machines without one.
#pragma once

#include <string>

namespace laminar {

// Number of CUDA devices usable by this process; 0 when the build has no CUDA, no driver is
// installed or no device is visible. Never fails.
int CudaDeviceCount();
// "NVIDIA H200 (sm_90, 139.8 GiB)" for device `index`, or "" when it does not exist.
std::string CudaDeviceName(int index);
// Whether this binary was built with CUDA kernels.
bool BuiltWithCuda();

}  // namespace laminar
