// Picking the compute device for --device auto|cpu|cuda.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "kernels/backend.h"

namespace tinyserve {

// Returns the backend for `device`. "auto" uses CUDA when a device works and otherwise falls back
// to the CPU, logging one line that says why; "cuda" without a usable device is an error.
// `dtype` is "" (the device's default: bfloat16 on CUDA, float32 on the CPU), "float32" or
// "bfloat16" (CUDA only: an error with --device cpu, and float32 with a logged line when auto falls
// back to the CPU). `batch_invariant` selects CUDA's batch-invariant GEMM (CudaBackendOptions); the
// CPU backend is batch-invariant whatever it says. `kv_cache_dtype` (vLLM's --kv-cache-dtype):
// "auto" (the weights' dtype: bfloat16 on CUDA by default, float32 on the CPU), "bfloat16" (either
// device: half the bytes a token), "float32"; "fp8" is refused (not implemented yet).
StatusOr<std::unique_ptr<Backend>> SelectBackend(const std::string& device, int cpu_threads,
                                                 const std::string& dtype = "",
                                                 bool batch_invariant = false,
                                                 const std::string& kv_cache_dtype = "auto");

}  // namespace tinyserve
