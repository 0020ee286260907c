// Decode-sized Linear on bf16 weights: y [m, n] = x [m, k] w [n, k]^T for m <= 8, x and y fp32, w
// bf16, accumulation in fp32 (x is not rounded to bf16). At such m a GEMM is a weight stream (2
// bytes a weight, 2m flops), which cuBLAS runs at 15-50% of the copy bandwidth on n x k = 2048 x
// 2048 (bench/RESULTS.md); this kernel streams the weights with 16-byte loads: a warp owns R rows
// of w (R = 2, or 4 from m = 3, so that each x load feeds more weights), lane l takes the 8 columns
// at 8 l + 256 i of each, and the warp's partial sums are added by a xor butterfly. Each output
// element's reduction order depends on k alone (its lane's fmaf chain over i, then the butterfly),
// never on m, n or the grid: a row's result is the same bits for every m <= 8. (The CPU twin is the
// CPU backend's Linear: the same products, another order; tests compare within fp32 rounding.)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vec16.cuh"

namespace tinyserve::cuda {
namespace {

constexpr int kWarps = 4;

// grid ceil(n / (kWarps * R)), block kWarps * 32. k % 8 == 0, x and w 16-byte aligned.
template <int M, int R>
__global__ void __launch_bounds__(kWarps * 32)
    SmallMLinearKernel(const float* x, const __nv_bfloat16* w, int32_t n, int32_t k, float* y) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  if (row0 >= n) return;  // the whole warp: no barrier below, only warp shuffles
  float acc[R][M];
  for (int r = 0; r < R; ++r) {
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;
  }
#pragma unroll 4
  for (int32_t c = lane * 8; c < k; c += 256) {
    uint4 wv[R];
    for (int r = 0; r < R; ++r) {
      wv[r] = row0 + r < n ? *reinterpret_cast<const uint4*>(w + (row0 + r) * k + c)
                           : uint4{0, 0, 0, 0};
    }
    for (int m = 0; m < M; ++m) {
      float xv[8];
      Load16(x + static_cast<int64_t>(m) * k + c, xv);
      Load16(x + static_cast<int64_t>(m) * k + c + 4, xv + 4);
      for (int r = 0; r < R; ++r) {
        float wf[8];
        Widen16(wv[r], wf, w);
        for (int e = 0; e < 8; ++e) acc[r][m] = __fmaf_rn(xv[e], wf[e], acc[r][m]);
      }
    }
  }
  for (int o = 16; o > 0; o /= 2) {
    for (int r = 0; r < R; ++r) {
      for (int m = 0; m < M; ++m) acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], o);
    }
  }
  // Every lane holds every sum; lane r * M + m writes (row0 + r, m).
  for (int r = 0; r < R; ++r) {
    for (int m = 0; m < M; ++m) {
      if (lane == (r * M + m) % 32 && row0 + r < n)
        y[static_cast<int64_t>(m) * n + row0 + r] = acc[r][m];
    }
  }
}

template <int M>
void Launch(const float* x, const __nv_bfloat16* w, int32_t n, int32_t k, float* y,
            cudaStream_t stream) {
  constexpr int R = M <= 2 ? 2 : 4;
  const int64_t blocks = (static_cast<int64_t>(n) + kWarps * R - 1) / (kWarps * R);
  // (A name for the launch macro, whose arguments cannot hold the template's comma; GCC calls it
  // unused, as the host build's lambda reads it without a capture.)
  [[maybe_unused]] static constexpr auto* kernel = &SmallMLinearKernel<M, R>;
  TS_LAUNCH(kernel, static_cast<unsigned>(blocks), kWarps * 32, 0, stream, x, w, n, k, y);
}

}  // namespace

bool SmallMLinearApplies(const float* x, const void* w, int32_t m, int32_t k) {
  return m >= 1 && m <= kSmallMLinearRows && k > 0 && k % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

cudaError_t LaunchSmallMLinear(const float* x, const void* w, int32_t m, int32_t n, int32_t k,
                               float* y, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!SmallMLinearApplies(x, w, m, k) || n > (int64_t{1} << 31) / kWarps) {
    return cudaErrorInvalidValue;
  }
  const auto* wb = static_cast<const __nv_bfloat16*>(w);
  using Launcher =
      void (*)(const float*, const __nv_bfloat16*, int32_t, int32_t, float*, cudaStream_t);
  static constexpr Launcher kLaunchers[kSmallMLinearRows] = {
      Launch<1>, Launch<2>, Launch<3>, Launch<4>, Launch<5>, Launch<6>, Launch<7>, Launch<8>};
  kLaunchers[m - 1](x, wb, n, k, y, stream);
  return cudaGetLastError();
}

}  // namespace tinyserve::cuda
