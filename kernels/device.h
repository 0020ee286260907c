// Device discovery: which compute devices this process can use. Compiles without nvcc.
#pragma once

#include <memory>
#include <string>

#include "engine/status.h"
#include "kernels/backend.h"

namespace tinyserve {

// True iff this binary was built with the CUDA backend sources.
bool BuiltWithCuda();

// Returns the number of usable CUDA devices (>= 1), or a non-OK status saying why none can be used
// ("built without CUDA", "cudaGetDeviceCount: no CUDA-capable device is detected (error 100)",
// ...).
StatusOr<int> ProbeCudaDevices();

// A one-line description of CUDA device `index` (name, memory, compute capability).
std::string DescribeCudaDevice(int index);

struct CudaBackendOptions {
  int device = 0;
  // What UploadWeight stores matrices in: bf16 (GEMMs on bf16 tensor cores, fp32 accumulation and
  // outputs; activations rounded to bf16 for the GEMM) or fp32 (parity with the CPU).
  DType weight_dtype = DType::kBFloat16;
};

// The CUDA backend (kernels/cuda/cuda_backend.cu) on one device, with its own stream and cuBLAS
// handle; or why it cannot be had (no device, built without CUDA, a CUDA error).
StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options);

}  // namespace tinyserve
