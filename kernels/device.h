// Device discovery: which compute devices this process can use. Compiles without nvcc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
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
  // GEMMs (Gemm and Linear, fp32 and bf16 weights) by tinyserve's own kernel instead of cuBLAS:
  // each output element is one fmaf chain over k in increasing order, as the CPU backend's GEMM,
  // so a row's result is the same whatever the batch (and bitwise equal to the CPU on equal fp32
  // inputs). With bf16 weights the activations stay fp32 (cuBLAS gets them rounded to bf16).
  // Slower than cuBLAS (no tensor cores); see bench/RESULTS.md. Off by default, as vLLM's
  // VLLM_BATCH_INVARIANT.
  bool batch_invariant = false;
  // GEMMs of decode-sized rows on bf16 weights by tinyserve's weight-stream kernels: up to 8 rows
  // small_m_linear.cu (CUDA cores, x kept fp32), up to 64 mid_m_linear.cu (tensor cores), each with
  // the feed-forward's SiLU-and-mul fused. False: cuBLAS for every m (benchmarks compare the two).
  bool decode_gemm_kernels = true;
  // The KV cache's elements (vLLM's --kv-cache-dtype): bf16 (half the bytes and twice the tokens
  // of fp32; attention reads them widened to fp32 and computes in fp32), fp32, or fp8 e4m3 (a
  // quarter of fp32's bytes; kernels/fp8.h; scale 1.0, as vLLM without calibrated scales).
  DType kv_cache_dtype = DType::kBFloat16;
};

// Benchmarks: the dense bf16 x bf16 -> fp32 (fp32 accumulate) cuBLAS GemmEx rate on device 0 at
// m = n = k = `n`, on random inputs, in FLOP/s (best of 5 runs of 10 calls). cuBLAS is loaded as
// the backend loads it (dlopen), so a benchmark binary needs no cuBLAS at link time. Every CUDA and
// cuBLAS return is checked; an error is returned, never a made-up rate.
StatusOr<double> MeasureCublasBf16GemmFlops(int32_t n);

// The CUDA backend (kernels/cuda/cuda_backend.cu) on one device, with its own stream and cuBLAS
// handle; or why it cannot be had (no device, built without CUDA, a CUDA error).
StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options);

}  // namespace tinyserve
