#include "kernels/device.h"

#ifndef TINYSERVE_HAVE_CUDA
namespace tinyserve {

bool BuiltWithCuda() { return false; }

StatusOr<int> ProbeCudaDevices() {
  return Unavailable("this tinyserve was built without the CUDA backend (nvcc not found)");
}

std::string DescribeCudaDevice(int /*index*/) { return "none"; }

StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& /*options*/) {
  return Unavailable("this tinyserve was built without the CUDA backend (nvcc not found)");
}

StatusOr<double> MeasureCublasBf16GemmFlops(int32_t /*n*/) {
  return Unavailable("this tinyserve was built without the CUDA backend (nvcc not found)");
}

}  // namespace tinyserve
#endif
