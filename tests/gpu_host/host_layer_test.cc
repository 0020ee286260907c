// The host execution layer itself (tests/gpu_host): CUDA semantics it must get right (barriers,
// warp primitives, bf16/half rounding, cuBLAS's column-major GEMM, graph record-and-replay), and
// proof that its checks fail: deliberately broken small kernels (a divergent barrier, an early exit
// before a barrier, an off-by-one on a partial block writing out of bounds, wrong shuffle masks,
// an allocation / a synchronous copy / a synchronize inside a capture), each caught with a message
// naming what went wrong; shared-memory races (a missing barrier, a counter without atomics).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/shared.cuh"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu_host/executor.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TS_TEST_ASAN 1
#endif

namespace tinyserve {
namespace {

using ::testing::HasSubstr;

// ---- kernels that are right ----------------------------------------------------------------

// out[0] = sum of 0..n-1 through shared memory and barriers (a tree reduction).
__global__ void TreeSum(int* out) {
  __shared__ int buf[1024];
  buf[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = buf[0] + static_cast<int>(blockIdx.x);
}

// Every warp primitive, per lane: out[lane * 8 + j].
__global__ void WarpPrimitives(int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int* o = out + threadIdx.x * 8;
  o[0] = __shfl_sync(0xffffffffu, lane * 10, 3);
  o[1] = __shfl_xor_sync(0xffffffffu, lane * 10, 5);
  o[2] = __shfl_down_sync(0xffffffffu, lane * 10, 4);
  o[3] = __shfl_up_sync(0xffffffffu, lane * 10, 2);
  o[4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  o[5] = __any_sync(0xffffffffu, lane == 31);
  o[6] = __all_sync(0xffffffffu, lane < 31);
  // Half the warp, with its own mask.
  if (lane < 16) {
    o[7] = __shfl_xor_sync(0x0000ffffu, lane, 1, 16);
  } else {
    o[7] = -1;
  }
}

// A shared histogram by atomics, then a rotate through shared memory with the barrier it needs.
__global__ void SharedDoneRight(int* out) {
  TS_SHARED_ARRAY(int, buf, 64);
  TS_SHARED_ARRAY(unsigned, hist, 4);
  if (threadIdx.x < 4) hist[threadIdx.x] = 0;
  buf[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  atomicAdd(&hist[threadIdx.x % 4], 1u);
  out[threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x];
  __syncthreads();
  if (threadIdx.x < 4) out[64 + threadIdx.x] = static_cast<int>(hist[threadIdx.x]);
}

// Reverses each block's slice through dynamic shared memory (blockDim ints of it).
__global__ void ReverseThroughDynamicShared(const int* x, int* out) {
  TS_SHARED_DYNAMIC(int, smem);
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  smem[threadIdx.x] = x[i];
  __syncthreads();
  out[i] = smem[blockDim.x - 1 - threadIdx.x];
}

// ---- kernels that are wrong ------------------------------------------------------------------

__global__ void SharedRotateWithoutBarrier(int* out) {
  TS_SHARED_ARRAY(int, buf, 64);
  buf[threadIdx.x] = 0;
  __syncthreads();
  buf[threadIdx.x] = static_cast<int>(threadIdx.x);
  // (the __syncthreads() that belongs here is missing)
  out[threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x];
}

__global__ void SharedCounterWithoutAtomics(int* out) {
  TS_SHARED_VAR(int, count);
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  count = count + 1;  // every thread: a read-modify-write race
  __syncthreads();
  out[threadIdx.x] = count;
}

// Block 1 reads what block 0 left in shared memory (it happens to stay on this layer).
__global__ void SharedReadBeforeWrite(int* out) {
  TS_SHARED_ARRAY(int, carry, 1);
  if (blockIdx.x == 0 && threadIdx.x == 0) carry[0] = 7;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = carry[0];
}

__global__ void SharedIndexPastTheEnd(int* out) {
  TS_SHARED_ARRAY(int, buf, 32);
  buf[threadIdx.x] = 1;  // 33 threads
  out[threadIdx.x] = 0;
}

__global__ void DivergentBarrier(int* out) {
  if (threadIdx.x < 16) __syncthreads();  // half the block never gets there
  out[threadIdx.x] = 1;
}

__global__ void ExitBeforeBarrier(const float* x, int n, float* out) {
  __shared__ float tile[64];
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;  // the partial last block loses threads before the barrier
  tile[threadIdx.x] = x[i];
  __syncthreads();
  out[i] = tile[(threadIdx.x + 1) % blockDim.x];
}

__global__ void OffByOneCopy(const float* x, int n, float* out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i <= n) out[i] = x[i < n ? i : 0];  // i == n writes one past the end
}

__global__ void HalfMaskReadsOutside(int* out) {
  int v = static_cast<int>(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_xor_sync(0x0000ffffu, v, 16);  // lane ^ 16 is not in the mask
  out[threadIdx.x] = v;
}

__global__ void FullMaskPartialWarp(float* out) {
  float v = 1.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

__global__ void MaskWithoutCaller(int* out) {
  out[threadIdx.x] = __shfl_sync(0xfffffffeu, 1, 1);  // lane 0 is not in its own mask
}

__global__ void ShuffleUnderDivergence(int* out) {
  int v = 1;
  if (threadIdx.x % 2 == 0) v = __shfl_xor_sync(0xffffffffu, v, 1);  // odd lanes never come
  out[threadIdx.x] = v;
}

__global__ void Fill(float* out, float value, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = value;
}

__global__ void AddOne(const float* x, int n, float* out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = x[i] + 1.0f;
}

class HostLayerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_THAT(gpu_host::TakeFaults(), ::testing::IsEmpty()); }
  void TearDown() override { gpu_host::TakeFaults(); }

  // The single fault the last launch caused.
  static std::string OneFault() {
    std::vector<std::string> f = gpu_host::TakeFaults();
    EXPECT_EQ(f.size(), 1u);
    return f.empty() ? std::string() : f[0];
  }
};

TEST_F(HostLayerTest, BarriersOrderSharedMemoryAcrossAThousandThreads) {
  int* d = DeviceAlloc<int>(3);
  TS_LAUNCH(TreeSum, 3, 1024, 0, nullptr, d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  int h[3];
  ASSERT_EQ(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int b = 0; b < 3; ++b) EXPECT_EQ(h[b], 1023 * 1024 / 2 + b);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST_F(HostLayerTest, WarpPrimitivesFollowCuda) {
  int* d = DeviceAlloc<int>(64 * 8);
  TS_LAUNCH(WarpPrimitives, 1, 64, 0, nullptr, d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> h(64 * 8);
  ASSERT_EQ(cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    const int* o = &h[t * 8];
    SCOPED_TRACE("thread " + std::to_string(t));
    EXPECT_EQ(o[0], 30);
    EXPECT_EQ(o[1], (lane ^ 5) * 10);
    EXPECT_EQ(o[2], lane + 4 < 32 ? (lane + 4) * 10 : lane * 10);  // past the end: own value
    EXPECT_EQ(o[3], lane >= 2 ? (lane - 2) * 10 : lane * 10);
    EXPECT_EQ(static_cast<unsigned>(o[4]), ballot);
    EXPECT_EQ(o[5], 1);
    EXPECT_EQ(o[6], 0);
    EXPECT_EQ(o[7], lane < 16 ? lane ^ 1 : -1);
  }
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST_F(HostLayerTest, ConversionsRoundToNearestEvenAsCuda) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 100000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    EXPECT_EQ(__bfloat162float(__float2bfloat16_rn(f)), RoundToBf16(f)) << u;
  }
  EXPECT_EQ(__float2bfloat16_rn(NAN).bits, 0x7fff);
  EXPECT_EQ(__float2bfloat16_rn(1.00390625f).bits, 0x3f80);  // a tie: to even (down)
  EXPECT_EQ(__float2bfloat16_rn(1.01171875f).bits, 0x3f82);  // a tie: to even (up)
  struct Conversion {
    float f;
    uint16_t h;
  };
  for (const Conversion& c :
       std::vector<Conversion>{{1.0f, 0x3c00},
                               {-2.0f, 0xc000},
                               {65504.0f, 0x7bff},
                               {65519.0f, 0x7bff},
                               {65520.0f, 0x7c00},             // rounds up to inf
                               {1.0f + 0x1p-11f, 0x3c00},      // tie to even: down
                               {1.0f + 3 * 0x1p-11f, 0x3c02},  // tie to even: up
                               {0x1p-14f, 0x0400},
                               {0x1p-24f, 0x0001},
                               {0x1p-25f, 0x0000},  // tie to even: zero
                               {3 * 0x1p-25f, 0x0002},
                               {-0.0f, 0x8000},
                               {INFINITY, 0x7c00}}) {
    EXPECT_EQ(__float2half_rn(c.f).bits, c.h) << c.f;
    if (c.h != 0x7c00 && c.f == static_cast<float>(__half2float(__half{c.h}))) {
      EXPECT_EQ(__half2float(__half{c.h}), c.f);
    }
  }
  EXPECT_EQ(__half2float(__half{0x0001}), 0x1p-24f);
  EXPECT_EQ(__half2float(__half{0x7bff}), 65504.0f);
}

// cuBLAS's column-major contract with transposes, leading dimensions past the rows, and beta.
TEST_F(HostLayerTest, CublasGemmFollowsColumnMajorSemantics) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate_v2(&h), CUBLAS_STATUS_SUCCESS);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  const int m = 5, n = 3, k = 7, lda = 9, ldb = 8, ldc = 6;
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      std::vector<float> a(lda * 9), b(ldb * 9), c(ldc * n);
      for (float& x : a) x = d(rng);
      for (float& x : b) x = d(rng);
      for (float& x : c) x = d(rng);
      std::vector<float> want = c;
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) {
          double s = 0.0;
          for (int l = 0; l < k; ++l) {
            const float av = ta == CUBLAS_OP_N ? a[i + l * lda] : a[l + i * lda];
            const float bv = tb == CUBLAS_OP_N ? b[l + j * ldb] : b[j + l * ldb];
            s += double{av} * bv;
          }
          want[i + j * ldc] = static_cast<float>(0.5 * s + 2.0 * c[i + j * ldc]);
        }
      }
      float *da = DeviceAlloc<float>(a.size()), *db = DeviceAlloc<float>(b.size()),
            *dc = DeviceAlloc<float>(c.size());
      cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice);
      const float alpha = 0.5f, beta = 2.0f;
      ASSERT_EQ(cublasSgemm_v2(h, ta, tb, m, n, k, &alpha, da, lda, db, ldb, &beta, dc, ldc),
                CUBLAS_STATUS_SUCCESS);
      std::vector<float> got(c.size());
      cudaMemcpy(got.data(), dc, got.size() * 4, cudaMemcpyDeviceToHost);
      EXPECT_TRUE(Close(got, want, 1e-5, 1e-5)) << "ta " << ta << " tb " << tb;
      cudaFree(da);
      cudaFree(db);
      cudaFree(dc);
    }
  }
  // A leading dimension below the rows is invalid, as in cuBLAS.
  const float one = 1.0f;
  EXPECT_EQ(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, nullptr, 3, nullptr, 4, &one,
                           nullptr, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  cublasDestroy_v2(h);
}

TEST_F(HostLayerTest, InvalidLaunchConfigurationIsALaunchError) {
  int* d = DeviceAlloc<int>(1);
  TS_LAUNCH(TreeSum, 1, 1025, 0, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky
  cudaFree(d);
}

// ---- the checks fail ---------------------------------------------------------------------------

TEST_F(HostLayerTest, ADivergentBarrierIsAFaultNamingKernelBlockAndThread) {
  int* d = DeviceAlloc<int>(32);
  TS_LAUNCH(DivergentBarrier, 2, 32, 0, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);  // sticky
  const std::string f = OneFault();
  EXPECT_THAT(f, HasSubstr("kernel DivergentBarrier, block (0,0,0)"));
  EXPECT_THAT(f, HasSubstr("__syncthreads is not reached by thread (16,0,0), which has exited"));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(d);
}

TEST_F(HostLayerTest, AnEarlyExitBeforeABarrierInThePartialBlockIsAFault) {
  const int n = 100;  // blocks of 64: the second one has 36 live threads
  float *x = DeviceAlloc<float>(n), *out = DeviceAlloc<float>(n);
  cudaMemset(x, 0, n * 4);
  TS_LAUNCH(ExitBeforeBarrier, 2, 64, 0, nullptr, x, n, out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  const std::string f = OneFault();
  EXPECT_THAT(f, HasSubstr("kernel ExitBeforeBarrier, block (1,0,0)"));
  EXPECT_THAT(f, HasSubstr("not reached by thread (36,0,0), which has exited"));
  cudaFree(x);
  cudaFree(out);
}

TEST_F(HostLayerTest, AnOffByOneWritePastAnAllocationIsCaught) {
  const int n = 100;
  float *x = DeviceAlloc<float>(n), *out = DeviceAlloc<float>(n);
  cudaMemset(x, 0, n * 4);
#ifdef TS_TEST_ASAN
  // Poisoned guard zones: AddressSanitizer stops at the write itself.
  EXPECT_DEATH(
      {
        TS_LAUNCH(OffByOneCopy, 2, 64, 0, nullptr, x, n, out);
        cudaDeviceSynchronize();
      },
      "AddressSanitizer");
#else
  TS_LAUNCH(OffByOneCopy, 2, 64, 0, nullptr, x, n, out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  const std::string f = OneFault();
  EXPECT_THAT(f, HasSubstr("out-of-bounds write into the guard zone of device allocation"));
  EXPECT_THAT(f, HasSubstr("(400 bytes at"));
  EXPECT_THAT(f, HasSubstr("at byte offset 400, found after kernel OffByOneCopy"));
#endif
  cudaFree(x);
  cudaFree(out);
}

TEST_F(HostLayerTest, WrongShuffleMasksAreFaults) {
  int* d = DeviceAlloc<int>(64);
  float* f = DeviceAlloc<float>(64);
  TS_LAUNCH(HalfMaskReadsOutside, 1, 32, 0, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(OneFault(), HasSubstr("kernel HalfMaskReadsOutside, block (0,0,0), thread (0,0,0): "
                                    "__shfl_xor_sync with mask 0x0000ffff reads lane 16, which is "
                                    "not in the mask"));

  TS_LAUNCH(FullMaskPartialWarp, 1, 48, 0, nullptr, f);  // the second warp has 16 lanes
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(OneFault(), HasSubstr("thread (32,0,0): __shfl_xor_sync with mask 0xffffffff: lane "
                                    "16 is not a thread of the block (blockDim 48)"));

  TS_LAUNCH(MaskWithoutCaller, 1, 32, 0, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(OneFault(), HasSubstr("thread (0,0,0): __shfl_sync with mask 0xfffffffe leaves out "
                                    "the calling lane 0"));

  TS_LAUNCH(ShuffleUnderDivergence, 1, 32, 0, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(OneFault(), HasSubstr("__shfl_xor_sync with mask 0xffffffff: lane 1 (thread "
                                    "(1,0,0)) has exited"));
  cudaFree(d);
  cudaFree(f);
}

TEST_F(HostLayerTest, SharedMemoryWithBarriersAndAtomicsIsNoRace) {
  int* d = DeviceAlloc<int>(68);
  TS_LAUNCH(SharedDoneRight, 2, 64, 0, nullptr, d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> h(68);
  cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(h[t], (t + 1) % 64);
  for (int b = 0; b < 4; ++b) EXPECT_EQ(h[64 + b], 16);
  cudaFree(d);
}

TEST_F(HostLayerTest, SharedMemoryRacesBadIndicesAndUndefinedReadsAreFaults) {
  int* d = DeviceAlloc<int>(64);
  TS_LAUNCH(SharedRotateWithoutBarrier, 1, 64, 0, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(OneFault(), HasSubstr("kernel SharedRotateWithoutBarrier, block (0,0,0), thread "
                                    "(1,0,0): shared-memory race on buf[1]: it writes what thread "
                                    "(0,0,0) read since the last __syncthreads"));

  TS_LAUNCH(SharedCounterWithoutAtomics, 1, 64, 0, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(OneFault(), HasSubstr("thread (1,0,0): shared-memory race on count[0]: it reads what "
                                    "thread (0,0,0) wrote since the last __syncthreads"));

  TS_LAUNCH(SharedReadBeforeWrite, 2, 32, 0, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(OneFault(), HasSubstr("kernel SharedReadBeforeWrite, block (1,0,0), thread (0,0,0): "
                                    "shared carry[0]: it reads an element no thread of this block "
                                    "has written"));

  TS_LAUNCH(SharedIndexPastTheEnd, 1, 33, 0, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(OneFault(), HasSubstr("thread (32,0,0): shared array buf[32] indexed at 32"));
  cudaFree(d);
}

TEST_F(HostLayerTest, DynamicSharedMemoryHoldsTheLaunchsBytes) {
  std::vector<int> h(96);
  for (int i = 0; i < 96; ++i) h[i] = i * 3;
  int *x = DeviceAlloc<int>(96), *out = DeviceAlloc<int>(96);
  cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
  TS_LAUNCH(ReverseThroughDynamicShared, 3, 32, 32 * sizeof(int), nullptr, x, out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> got(96);
  cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost);
  for (int b = 0; b < 3; ++b) {
    for (int t = 0; t < 32; ++t) EXPECT_EQ(got[b * 32 + t], h[b * 32 + 31 - t]);
  }
  // Two ints short: the last two threads index past the launch's bytes.
  TS_LAUNCH(ReverseThroughDynamicShared, 3, 32, 30 * sizeof(int), nullptr, x, out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(OneFault(), HasSubstr("kernel ReverseThroughDynamicShared, block (0,0,0), thread "
                                    "(30,0,0): shared array smem[30] indexed at 30"));
  cudaFree(x);
  cudaFree(out);
}

TEST_F(HostLayerTest, GraphsReplayTheirLaunchesAndCopiesOnNewInputs) {
  const int n = 70;
  float *x = DeviceAlloc<float>(n), *y = DeviceAlloc<float>(n);
  std::vector<float> host(n, 1.0f), out(n);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(x, host.data(), n * 4, cudaMemcpyHostToDevice, s), cudaSuccess);
  TS_LAUNCH(AddOne, 2, 64, 0, s, x, n, y);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  cudaGraphDestroy(g);
  const int64_t before = gpu_host::NumKernelsRun();
  EXPECT_EQ(gpu_host::NumKernelsRun(), before);  // recording ran nothing
  for (float v : {5.0f, -3.0f}) {
    std::fill(host.begin(), host.end(), v);  // the recorded copy reads the host buffer at replay
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaMemcpy(out.data(), y, n * 4, cudaMemcpyDeviceToHost);
    EXPECT_EQ(out, std::vector<float>(n, v + 1.0f));
  }
  EXPECT_EQ(gpu_host::NumKernelsRun(), before + 2);
  cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
  cudaFree(x);
  cudaFree(y);
}

TEST_F(HostLayerTest, WhatCaptureForbidsInvalidatesTheCapture) {
  float* x = DeviceAlloc<float>(8);
  float h[8] = {};
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  for (int what = 0; what < 3; ++what) {
    SCOPED_TRACE("case " + std::to_string(what));
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    TS_LAUNCH(Fill, 1, 8, 0, s, x, 2.0f, 8);
    if (what == 0) {
      void* p = nullptr;
      EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
      EXPECT_EQ(p, nullptr);
    } else if (what == 1) {
      EXPECT_EQ(cudaMemcpy(h, x, sizeof(h), cudaMemcpyDeviceToHost),
                cudaErrorStreamCaptureUnsupported);
    } else {
      EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    }
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(g, nullptr);
    cudaGetLastError();
  }
  // Nothing recorded ran: x still holds what cudaMalloc left (all bits set).
  ASSERT_EQ(cudaMemcpy(h, x, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::isnan(h[0]));
  cudaStreamDestroy(s);
  cudaFree(x);
}

TEST_F(HostLayerTest, CopiesOutsideAnAllocationAreRejected) {
  float* x = DeviceAlloc<float>(8);
  std::vector<float> h(9);
  EXPECT_EQ(cudaMemcpy(x, h.data(), 9 * 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h.data(), x + 1, 8 * 4, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h.data(), x, 8 * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaGetLastError();
  cudaFree(x);
}

}  // namespace
}  // namespace tinyserve
