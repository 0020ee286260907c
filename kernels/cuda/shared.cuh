// Shared-memory declarations of kernels/cuda, so that the host execution layer (tests/gpu_host)
// can watch every access for races (two threads of a block touching one element between two
// barriers, at least one writing, not both atomically) and bounds. Under nvcc they are plain
// __shared__ declarations and pointers:
//   TS_SHARED_ARRAY(float, red, 32);   __shared__ float red[32];
//   TS_SHARED_VAR(int32_t, seq);       __shared__ int32_t seq;
//   TS_SHARED_PTR(float) p             float* p   (a parameter that receives a shared array)
//   TS_SHARED_DYNAMIC(float, smem);    extern __shared__ float smem[];  (the launch's bytes)
//   TS_SHARED_ARRAY_ALIGNED(__nv_bfloat16, k, 512, 16);  __shared__ __align__(16) ... k[512];
//                                      (for vector loads and stores; the host layer checks no
//                                      alignment)
#pragma once

#include <cuda_runtime.h>
#include <cstdint>

#if defined(__CUDACC__)
#define TS_SHARED_ARRAY(type, name, count) __shared__ type name[count]
#define TS_SHARED_ARRAY_ALIGNED(type, name, count, align) \
  __shared__ __align__(align)                             \
  type name[count]
#define TS_SHARED_VAR(type, name) __shared__ type name
#define TS_SHARED_PTR(type) type*
#define TS_SHARED_DYNAMIC(type, name) extern __shared__ type name[]
#elif defined(TS_HOST_LAUNCH)
#define TS_SHARED_ARRAY(type, name, count) \
  static thread_local ::tinyserve::gpu_host::SharedArray<type, count> name(#name)
#define TS_SHARED_ARRAY_ALIGNED(type, name, count, align) TS_SHARED_ARRAY(type, name, count)
#define TS_SHARED_VAR(type, name) \
  static thread_local ::tinyserve::gpu_host::SharedVar<type> name(#name)
#define TS_SHARED_PTR(type) ::tinyserve::gpu_host::SharedPtr<type>
#define TS_SHARED_DYNAMIC(type, name)                 \
  const ::tinyserve::gpu_host::SharedPtr<type> name = \
      ::tinyserve::gpu_host::DynamicShared<type>(#name)
#else
#error "kernels/cuda sources compile with nvcc or against the host execution layer (tests/gpu_host)"
#endif
