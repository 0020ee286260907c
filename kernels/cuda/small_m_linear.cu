// Decode-sized Linear on bf16 weights: y [m, n] = x [m, k] w [n, k]^T for m <= 8, x and y fp32, w
// bf16, accumulation in fp32 (x is not rounded to bf16). At such m a GEMM is a weight stream (2
// bytes a weight, 2m flops), which cuBLAS runs at 15-50% of the copy bandwidth on n x k = 2048 x
// 2048 (bench/RESULTS.md); this kernel streams the weights with 16-byte loads: a warp owns R rows
// of w (R = 2, or 4 from m = 3, so that each x load feeds more weights), lane l takes the 8 columns
// at 8 l + 256 i of each, and the warp's partial sums are added by a xor butterfly. Each output
// element's reduction order depends on k alone (its lane's fmaf chain over i, then the butterfly),
// never on m, n or the grid: a row's result is the same bits for every m <= 8. (The CPU twin is the
// CPU backend's Linear: the same products, another order; tests compare within fp32 rounding.)
// The gated form computes the feed-forward's gate and up rows side by side and writes only
// silu(gate) * up (SiluAndMul's bits, one kernel and no [m, 2 * hidden] round trip).
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
// kGated: w is w13 [2 * n, k] (gate rows, then up rows) and y [m, n] = silu(gate) * up, as
// SiluAndMulKernel computes it: the warp's R rows are R / 2 gate rows and the up rows n below
// them, each row's sum the same bits as the plain kernel's.
template <int M, int R, bool kGated>
__global__ void __launch_bounds__(kWarps * 32)
    SmallMLinearKernel(const float* x, const __nv_bfloat16* w, int32_t n, int32_t k, float* y) {
  constexpr int kOut = kGated ? R / 2 : R;  // output rows a warp owns
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t out0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kOut;
  if (out0 >= n) return;  // the whole warp: no barrier below, only warp shuffles
  // Weight row of the warp's row r (-1: past the end).
  auto row_of = [&](int r) -> int64_t {
    const int64_t o = out0 + (kGated ? r % kOut : r);
    if (o >= n) return -1;
    return kGated && r >= kOut ? o + n : o;
  };
  float acc[R][M];
  for (int r = 0; r < R; ++r) {
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;
  }
#pragma unroll 4
  for (int32_t c = lane * 8; c < k; c += 256) {
    uint4 wv[R];
    for (int r = 0; r < R; ++r) {
      const int64_t row = row_of(r);
      wv[r] = row >= 0 ? *reinterpret_cast<const uint4*>(w + row * k + c) : uint4{0, 0, 0, 0};
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
  // Every lane holds every sum; lane r * M + m writes (out0 + r, m).
  for (int r = 0; r < kOut; ++r) {
    for (int m = 0; m < M; ++m) {
      if (lane != (r * M + m) % 32 || out0 + r >= n) continue;
      float v = acc[r][m];
      if constexpr (kGated) {  // SiluAndMulKernel's arithmetic
        v *= 1.0f / (1.0f + expf(-v));
        v = v * acc[r + kOut][m];
      }
      y[static_cast<int64_t>(m) * n + out0 + r] = v;
    }
  }
}

template <int M, bool kGated>
void Launch(const float* x, const __nv_bfloat16* w, int32_t n, int32_t k, float* y,
            cudaStream_t stream) {
  constexpr int R = M <= 2 ? 2 : 4;
  constexpr int kOut = kGated ? R / 2 : R;
  const int64_t blocks = (static_cast<int64_t>(n) + kWarps * kOut - 1) / (kWarps * kOut);
  // (A name for the launch macro, whose arguments cannot hold the template's comma; GCC calls it
  // unused, as the host build's lambda reads it without a capture.)
  [[maybe_unused]] static constexpr auto* kernel = &SmallMLinearKernel<M, R, kGated>;
  TS_LAUNCH(kernel, static_cast<unsigned>(blocks), kWarps * 32, 0, stream, x, w, n, k, y);
}

using Launcher = void (*)(const float*, const __nv_bfloat16*, int32_t, int32_t, float*,
                          cudaStream_t);
template <bool kGated>
constexpr Launcher kLaunchers[kSmallMLinearRows] = {
    Launch<1, kGated>, Launch<2, kGated>, Launch<3, kGated>, Launch<4, kGated>,
    Launch<5, kGated>, Launch<6, kGated>, Launch<7, kGated>, Launch<8, kGated>};

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
  kLaunchers<false>[m - 1](x, static_cast<const __nv_bfloat16*>(w), n, k, y, stream);
  return cudaGetLastError();
}

cudaError_t LaunchSmallMLinearSiluAndMul(const float* x, const void* w13, int32_t m, int32_t hidden,
                                         int32_t k, float* out, cudaStream_t stream) {
  if (hidden <= 0) return cudaSuccess;
  if (!SmallMLinearApplies(x, w13, m, k) || hidden > (int64_t{1} << 30) / kWarps) {
    return cudaErrorInvalidValue;
  }
  kLaunchers<true>[m - 1](x, static_cast<const __nv_bfloat16*>(w13), hidden, k, out, stream);
  return cudaGetLastError();
}

}  // namespace tinyserve::cuda
