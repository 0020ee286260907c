#include "app/device_select.h"

#include <cstdio>

#include "kernels/device.h"

namespace tinyserve {

StatusOr<std::unique_ptr<Backend>> SelectBackend(const std::string& device, int cpu_threads) {
  if (device == "cpu") return CreateCpuBackend(cpu_threads);
  if (device != "auto" && device != "cuda") {
    return InvalidArgument("--device must be auto, cpu or cuda, got '" + device + "'");
  }
  StatusOr<int> gpus = ProbeCudaDevices();
  if (gpus.ok()) {
    // The CUDA model backend arrives with the CUDA issue; until then a GPU cannot run the model.
    const std::string why =
        "found " + DescribeCudaDevice(0) + ", but this build has no CUDA model backend yet";
    if (device == "cuda") return Unavailable("--device cuda: " + why);
    std::fprintf(stderr, "tinyserve: device auto: %s; using the CPU\n", why.c_str());
    return CreateCpuBackend(cpu_threads);
  }
  if (device == "cuda") return Unavailable("--device cuda: " + gpus.status().message());
  std::fprintf(stderr, "tinyserve: device auto: no usable CUDA device (%s); using the CPU\n",
               gpus.status().message().c_str());
  return CreateCpuBackend(cpu_threads);
}

}  // namespace tinyserve
