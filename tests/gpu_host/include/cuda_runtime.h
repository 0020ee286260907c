// Host execution layer (tests/gpu_host): the device side of CUDA for .cu sources compiled as host
// C++ (the runtime API is in cuda_runtime_api.h). Each CUDA thread of a block is a fiber, so
// __syncthreads() is a real barrier and warp operations exchange values between the lanes that
// reach them; a barrier or warp operation that not every named thread reaches is a fault naming
// the kernel, block and thread. Blocks run one after another on the launching thread, so a
// function-local `static thread_local` (what __shared__ expands to) is the running block's shared
// memory. Says nothing about speed or the memory model.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tests/gpu_host/executor.h"
#include "tests/gpu_host/shared_memory.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
// Plain __shared__ declarations work but are not watched; kernels/cuda declares shared memory
// with the TS_SHARED_* macros of kernels/cuda/shared.cuh, whose accesses are checked for races.
#define __shared__ static thread_local

#define threadIdx (::tinyserve::gpu_host::CurrentThreadIdx())
#define blockIdx (::tinyserve::gpu_host::CurrentBlockIdx())
#define blockDim (::tinyserve::gpu_host::CurrentBlockDim())
#define gridDim (::tinyserve::gpu_host::CurrentGridDim())
#define warpSize 32

// kernel<<<grid, block, smem, stream>>>(args...) of the host build (see kernels/cuda/launch.cuh).
#define TS_HOST_LAUNCH(kernel, grid, block, smem, stream, ...)                         \
  ::tinyserve::gpu_host::Launch(                                                       \
      #kernel, grid, block, smem, stream, [](auto... ts_args) { kernel(ts_args...); }, \
      __VA_ARGS__)

inline void __syncthreads() { ::tinyserve::gpu_host::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::tinyserve::gpu_host::WarpOp(::tinyserve::gpu_host::WarpKind::kSync, "__syncwarp", mask, 0, 0,
                                32);
}
inline void __threadfence() {}
inline void __threadfence_block() {}

namespace tinyserve::gpu_host {
template <typename T>
T Shuffle(WarpKind kind, const char* what, unsigned mask, T v, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = WarpOp(kind, what, mask, bits, arg, width);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}
}  // namespace tinyserve::gpu_host

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return ::tinyserve::gpu_host::Shuffle(::tinyserve::gpu_host::WarpKind::kShfl, "__shfl_sync", mask,
                                        v, src_lane, width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::tinyserve::gpu_host::Shuffle(::tinyserve::gpu_host::WarpKind::kShflXor,
                                        "__shfl_xor_sync", mask, v, lane_mask, width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::tinyserve::gpu_host::Shuffle(::tinyserve::gpu_host::WarpKind::kShflDown,
                                        "__shfl_down_sync", mask, v, static_cast<int>(delta),
                                        width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::tinyserve::gpu_host::Shuffle(::tinyserve::gpu_host::WarpKind::kShflUp, "__shfl_up_sync",
                                        mask, v, static_cast<int>(delta), width);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return static_cast<unsigned>(::tinyserve::gpu_host::WarpOp(
      ::tinyserve::gpu_host::WarpKind::kBallot, "__ballot_sync", mask, pred != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int pred) {
  return ::tinyserve::gpu_host::WarpOp(::tinyserve::gpu_host::WarpKind::kBallot, "__any_sync", mask,
                                       pred != 0, 0, 32) != 0;
}
inline int __all_sync(unsigned mask, int pred) {
  return ::tinyserve::gpu_host::WarpOp(::tinyserve::gpu_host::WarpKind::kBallot, "__all_sync", mask,
                                       pred != 0, 0, 32) == mask;
}

// ---- integer and float intrinsics --------------------------------------------------------------
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<uint64_t>(a) * b) >> 32);
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) { return static_cast<int>(__float_as_uint(f)); }
inline float __int_as_float(int i) { return __uint_as_float(static_cast<unsigned>(i)); }
// Four signed byte products of a and b summed into c (sm_61's dp4a), exactly.
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) {
    c += static_cast<int>(static_cast<int8_t>(static_cast<unsigned>(a) >> (8 * i))) *
         static_cast<int>(static_cast<int8_t>(static_cast<unsigned>(b) >> (8 * i)));
  }
  return c;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(unsigned x) { return x == 0 ? 32 : __builtin_clz(x); }
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }
// The fast-math intrinsics, computed exactly (CUDA's are approximations within stated ulps).
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
// Round to nearest, ties to even (the default rounding mode), as CUDA's __double2ull_rn.
inline unsigned long long __double2ull_rn(double x) {
  return static_cast<unsigned long long>(std::nearbyint(x));
}
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

// CUDA's overloaded min/max of device code.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

// ---- atomics: one fiber runs at a time and blocks run one after another, so a plain
// read-modify-write is atomic here; they are counted as atomic by nothing else yet.
template <typename T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T atomicSub(T* p, T v) {
  const T old = *p;
  *p = old - v;
  return old;
}
template <typename T>
T atomicMax(T* p, T v) {
  const T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <typename T>
T atomicMin(T* p, T v) {
  const T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <typename T>
T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  return old;
}
template <typename T>
T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}

// Atomics on watched shared memory (kernels/cuda/shared.cuh): recorded as atomic accesses.
template <typename T>
T atomicAdd(::tinyserve::gpu_host::SharedPtr<T> p, T v) {
  return atomicAdd((*p).AtomicTarget(), v);
}
template <typename T>
T atomicMax(::tinyserve::gpu_host::SharedPtr<T> p, T v) {
  return atomicMax((*p).AtomicTarget(), v);
}
template <typename T>
T atomicMin(::tinyserve::gpu_host::SharedPtr<T> p, T v) {
  return atomicMin((*p).AtomicTarget(), v);
}

// The tensor-core MMA of kernels/cuda/mma.cuh, emulated with the warp shuffles above.
#include "tests/gpu_host/mma_emulation.h"
