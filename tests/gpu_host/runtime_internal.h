// Internals shared by the host execution layer's files (executor.cc, runtime.cc, cublas.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>

namespace tinyserve::gpu_host {

// Records a sticky fault: stderr, TakeFaults(), and cudaErrorLaunchFailure from then on.
void RecordFault(const std::string& message);

// Runs a kernel's grid now (executor.cc).
void ExecuteKernel(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                   const std::function<void()>& body);

// Runs `op` now, or records it when `stream` is capturing. `name` names it in messages.
cudaError_t Enqueue(cudaStream_t stream, const char* name, std::function<cudaError_t()> op);

// cudaSuccess iff [ptr, ptr + bytes) lies in one live device allocation; else records why.
cudaError_t CheckDeviceRange(const void* ptr, size_t bytes, const char* what);

}  // namespace tinyserve::gpu_host
