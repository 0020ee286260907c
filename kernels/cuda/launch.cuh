// TS_LAUNCH(kernel, grid, block, shared_bytes, stream, args...): every kernel launch of
// kernels/cuda goes through it. Under nvcc it is kernel<<<grid, block, shared_bytes, stream>>>(
// args...); compiled as host C++ against the host execution layer (tests/gpu_host, whose
// cuda_runtime.h defines TS_HOST_LAUNCH) it runs the grid on the CPU, one fiber per CUDA thread.
// The launch error is read with cudaGetLastError() in both builds.
#pragma once

#include <cuda_runtime.h>

#if defined(__CUDACC__)
#define TS_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  kernel<<<grid, block, shared_bytes, stream>>>(__VA_ARGS__)
#elif defined(TS_HOST_LAUNCH)
#define TS_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  TS_HOST_LAUNCH(kernel, grid, block, shared_bytes, stream, __VA_ARGS__)
#else
#error "kernels/cuda sources compile with nvcc or against the host execution layer (tests/gpu_host)"
#endif
