#include "app/device_select.h"

#include <cstdio>

#include "kernels/device.h"

namespace tinyserve {
namespace {

// The CPU's cache for a checked --kv-cache-dtype: bf16 when asked, else (auto: the CPU's weights
// are fp32) fp32.
DType CpuKvCacheDtype(const std::string& kv_cache_dtype) {
  return kv_cache_dtype == "bfloat16" ? DType::kBFloat16 : DType::kFloat32;
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> SelectBackend(const std::string& device, int cpu_threads,
                                                 const std::string& dtype, bool batch_invariant,
                                                 const std::string& kv_cache_dtype) {
  if (kv_cache_dtype == "fp8_e5m2") {
    return InvalidArgument(
        "--kv-cache-dtype fp8_e5m2 is not implemented; fp8 (fp8_e4m3) is, on --device cuda");
  }
  const bool fp8 = kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3";
  if (kv_cache_dtype != "auto" && kv_cache_dtype != "bfloat16" && kv_cache_dtype != "float32" &&
      !fp8) {
    return InvalidArgument(
        "--kv-cache-dtype must be auto, bfloat16, float32, fp8 or fp8_e4m3, got '" +
        kv_cache_dtype + "'");
  }
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return InvalidArgument("--device must be auto, cpu or cuda, got '" + device + "'");
  }
  if (!dtype.empty() && dtype != "float32" && dtype != "bfloat16") {
    return InvalidArgument("--dtype must be float32 or bfloat16, got '" + dtype + "'");
  }
  if (device == "cpu") {
    if (dtype == "bfloat16") {
      return InvalidArgument("--dtype bfloat16 needs --device cuda; the CPU backend is float32");
    }
    if (fp8) {
      return InvalidArgument(
          "--kv-cache-dtype " + kv_cache_dtype +
          " needs --device cuda; the CPU backend's cache is float32 or bfloat16");
    }
    return CreateCpuBackend(cpu_threads, CpuKvCacheDtype(kv_cache_dtype));
  }
  StatusOr<std::unique_ptr<Backend>> cuda = [&]() -> StatusOr<std::unique_ptr<Backend>> {
    StatusOr<int> gpus = ProbeCudaDevices();
    if (!gpus.ok()) return gpus.status();
    CudaBackendOptions o;
    o.weight_dtype = dtype == "float32" ? DType::kFloat32 : DType::kBFloat16;
    o.kv_cache_dtype = kv_cache_dtype == "auto"      ? o.weight_dtype
                       : kv_cache_dtype == "float32" ? DType::kFloat32
                       : fp8                         ? DType::kFp8E4m3
                                                     : DType::kBFloat16;
    o.batch_invariant = batch_invariant;
    StatusOr<std::unique_ptr<Backend>> b = CreateCudaBackend(o);
    if (!b.ok()) {
      return Status(b.status().code(), "found " + DescribeCudaDevice(0) +
                                           ", but it cannot be used: " + b.status().message());
    }
    return b;
  }();
  if (cuda.ok()) {
    if (fp8) {
      std::fprintf(stderr,
                   "tinyserve: KV cache fp8_e4m3 at scale 1.0 (no calibrated k/v scales are read): "
                   "values past +-448 saturate and below 2^-6 lose precision; logits may move\n");
    }
    return cuda;
  }
  if (device == "cuda") return Unavailable("--device cuda: " + cuda.status().message());
  if (fp8) {
    return Unavailable("--kv-cache-dtype " + kv_cache_dtype + " needs a CUDA device (" +
                       cuda.status().message() +
                       "); the CPU backend's cache is float32 or bfloat16");
  }
  std::fprintf(stderr, "tinyserve: device auto: no usable CUDA device (%s); using the CPU%s\n",
               cuda.status().message().c_str(), dtype == "bfloat16" ? " in float32" : "");
  return CreateCpuBackend(cpu_threads, CpuKvCacheDtype(kv_cache_dtype));
}

}  // namespace tinyserve
