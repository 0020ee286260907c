// CUDA device discovery (see kernels/device.h). Any CUDA error, including "no device" (error 100)
// and a missing or too-old driver (errors 34, 35), means: no usable device, fall back to the CPU.
#include <cuda_runtime.h>

#include <string>

#include "kernels/device.h"

namespace tinyserve {

bool BuiltWithCuda() { return true; }

StatusOr<int> ProbeCudaDevices() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later probes start clean
    return Unavailable(std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err) + " (error " +
                       std::to_string(static_cast<int>(err)) + ")");
  }
  if (count == 0) return Unavailable("cudaGetDeviceCount: 0 CUDA devices");
  return count;
}

std::string DescribeCudaDevice(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "unknown CUDA device";
  return std::string(prop.name) + ", " + std::to_string(prop.totalGlobalMem >> 20) + " MiB, sm_" +
         std::to_string(prop.major) + std::to_string(prop.minor);
}

}  // namespace tinyserve
