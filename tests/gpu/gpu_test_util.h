// Helpers for the gpu tests (ctest label gpu): a CUDA backend or a clean skip that says why, random
// inputs, and host-side bf16 and fp8 rounding for references.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/device.h"
#include "kernels/fp8.h"
#include "tests/sanitizer.h"
#ifdef TINYSERVE_GPU_HOST
#include "tests/gpu_host/executor.h"
#endif

namespace tinyserve {

// True in test_gpu_host (the same tests on the host execution layer of tests/gpu_host, label
// gpu-host), where the largest shapes are cut to keep a CI run within its budget; the awkward sizes
// stay.
#ifdef TINYSERVE_GPU_HOST
inline constexpr bool kOnHostLayer = true;
#else
inline constexpr bool kOnHostLayer = false;
#endif

// Kernels launched so far in this process: the host execution layer counts them; 0 on a GPU.
inline int64_t KernelsRun() {
#ifdef TINYSERVE_GPU_HOST
  return gpu_host::NumKernelsRun();
#else
  return 0;
#endif
}

// True under ASan or TSan (make test's sanitizer runs), where the host layer's model-level tests
// cut their shapes again (each kernel's awkward sizes are the kernel tests' job).
inline constexpr bool kUnderSanitizer = testing_util::kUnderSanitizer;

// A quiet NaN: outputs are poisoned with it, so an element a kernel forgets to write fails.
inline constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// n uninitialised Ts of device memory (cudaMalloc; the test leaks them).
template <typename T>
T* DeviceAlloc(size_t n) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, n * sizeof(T)), cudaSuccess);
  return d;
}

// A device copy of `h` (at least one element allocated, so that an empty vector gives a pointer).
template <typename T>
T* Upload(const std::vector<T>& h) {
  T* d = DeviceAlloc<T>(h.size() > 0 ? h.size() : 1);
  EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

// n floats drawn uniformly from [lo, hi).
inline std::vector<float> Random(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Skips the current test (from SetUp or a test body) when no CUDA device can be used.
#define TS_SKIP_WITHOUT_CUDA()                                                                  \
  do {                                                                                          \
    const StatusOr<int> ts_gpus = ProbeCudaDevices();                                           \
    if (!ts_gpus.ok()) GTEST_SKIP() << "no usable CUDA device: " << ts_gpus.status().message(); \
  } while (0)

// The KV cache is fp32 unless `kv_dtype` says otherwise (the tests against the CPU backend's fp32
// cache); the product's default on CUDA is bf16 (CudaBackendOptions::kv_cache_dtype).
inline std::unique_ptr<Backend> MakeCudaBackend(DType dtype, bool batch_invariant = false,
                                                DType kv_dtype = DType::kFloat32) {
  CudaBackendOptions o;
  o.weight_dtype = dtype;
  o.batch_invariant = batch_invariant;
  o.kv_cache_dtype = kv_dtype;
  StatusOr<std::unique_ptr<Backend>> b = CreateCudaBackend(o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(b).value() : nullptr;
}

// x rounded to bf16 (nearest, ties to even), as __float2bfloat16_rn, back in a float.
inline float RoundToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf / NaN unchanged
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

inline std::vector<float> RoundToBf16(std::vector<float> v) {
  for (float& x : v) x = RoundToBf16(x);
  return v;
}

// Each x rounded to fp8 e4m3 (kernels/fp8.h, checked exhaustively in tests/kernels/fp8_test.cc),
// back in a float.
inline std::vector<float> RoundToFp8(std::vector<float> v) {
  for (float& x : v) x = E4m3ToFloat(FloatToE4m3(x));
  return v;
}

// Succeeds iff |got[i] - want[i]| <= atol + rtol * |want[i]| for all i (NaN fails).
inline ::testing::AssertionResult Close(const std::vector<float>& got,
                                        const std::vector<float>& want, double atol, double rtol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  size_t bad = 0;
  double worst = 0.0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double{got[i]} - double{want[i]});
    if (!(err <= atol + rtol * std::abs(double{want[i]}))) {
      if (bad < 5) first << "\n  [" << i << "] got " << got[i] << " want " << want[i];
      worst = std::max(worst, std::isnan(err) ? std::numeric_limits<double>::infinity() : err);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " values out of tolerance (worst " << worst
         << "):" << first.str();
}

// Succeeds iff got and want are bit-for-bit identical (NaN payloads included).
inline ::testing::AssertionResult Bitwise(const std::vector<float>& got,
                                          const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      if (bad < 5) first << "\n  [" << i << "] got " << got[i] << " want " << want[i];
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " values differ:" << first.str();
}

}  // namespace tinyserve
