// The batch-invariant GEMM (CudaBackendOptions::batch_invariant): y [m, n] = x [m, k] * w [n, k]^T
// with fp32 x and fp32 or bf16 w, fp32 y. Its CPU twin is the CPU backend's GEMM (issue 15), and
// the contract they share is the order of the arithmetic, not a tolerance: every output element is
//
//   float acc = 0.0f;
//   for (p = 0; p < k; ++p) acc = fmaf(x[i * k + p], float(w[j * k + p]), acc);
//   y[i * n + j] = acc;
//
// one sequential chain of fused multiply-adds over k in increasing order, whatever m, n, the tile
// shape or the grid (no split-K, no tree reduction, no tensor cores; __fmaf_rn is never contracted
// or reassociated by nvcc). bf16 weights are widened to fp32 exactly, and the activations stay fp32
// (the cuBLAS path rounds them to bf16). So, given bitwise equal inputs, the result is bitwise
// equal to the CPU's, and a row's result does not depend on which other rows are in the batch.
//
// Tiling: a block computes a kBM x kBN tile of y, walking k in chunks of kBK that are staged in
// shared memory (x and w transposed to [kBK][rows], padded against bank conflicts); the next chunk
// is fetched into registers while the current one is used. Each thread owns kTM x kTN outputs
// (rows ty + r * kThreadsY, columns tx + c * kThreadsX) in registers. Out-of-range rows and columns
// read zeros and are never stored; the last partial chunk runs only its kc < kBK real steps, so no
// padding ever enters an element's chain (fmaf(0, w, -0.0f) is +0.0f, and 0 * inf is NaN).
//
// The tile shape is picked from m (a narrow one for decode-sized m), which is allowed precisely
// because the per-element order above does not depend on it; keep it that way. Equality with the
// CPU also needs denormals kept, as nvcc does by default: --use_fast_math or -ftz=true would flush
// them in __fmaf_rn.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/shared.cuh"

namespace tinyserve::cuda {
namespace {

__device__ __forceinline__ float Widen(float v) { return v; }
__device__ __forceinline__ float Widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <int kBM, int kBN, int kBK, int kTM, int kTN>
struct Tile {
  static constexpr int kBm = kBM, kBn = kBN, kBk = kBK, kTm = kTM, kTn = kTN;
  static constexpr int kThreadsX = kBN / kTN, kThreadsY = kBM / kTM;
  static constexpr int kThreads = kThreadsX * kThreadsY;
  static constexpr int kXPerThread = kBM * kBK / kThreads;  // x values each thread stages
  static constexpr int kWPerThread = kBN * kBK / kThreads;  // w values each thread stages
  static_assert(kBM % kTM == 0 && kBN % kTN == 0, "tile must divide into thread blocks");
  static_assert(kBM * kBK % kThreads == 0 && kBN * kBK % kThreads == 0, "even staging");
};

// Prefill and any m > kSmallM: 64 x 64 tiles, 256 threads of 4 x 4 outputs.
using LargeTile = Tile<64, 64, 16, 4, 4>;
// Decode-sized m <= kSmallM: 8 x 32 tiles over longer k chunks (a bf16 row chunk is 128 bytes),
// 256 threads of one output each, a warp per row, so that n / 32 blocks share the weight stream;
// the warps of rows past m only help to fetch.
using SmallTile = Tile<8, 32, 64, 1, 1>;
constexpr int32_t kSmallM = 8;

// grid (ceil(n / kBn), ceil(m / kBm)), block T::kThreads.
template <typename T, typename W>
__global__ void __launch_bounds__(T::kThreads)
    InvariantGemmKernel(const float* __restrict__ x, const W* __restrict__ w, int32_t m, int32_t n,
                        int32_t k, float* __restrict__ y) {
  // xs [kBk][kBm + 1], ws [kBk][kBn + 1] (a padding column against bank conflicts), flattened.
  TS_SHARED_ARRAY(float, xs, T::kBk*(T::kBm + 1));
  TS_SHARED_ARRAY(float, ws, T::kBk*(T::kBn + 1));
  const int tid = threadIdx.x;
  const int tx = tid % T::kThreadsX, ty = tid / T::kThreadsX;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * T::kBm;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * T::kBn;

  float xr[T::kXPerThread], wr[T::kWPerThread];
  // Fetches chunk [k0, k0 + kBk) into registers: element idx = tid + i * kThreads of the tile,
  // k fastest (consecutive threads read consecutive addresses of one row).
  auto fetch = [&](int32_t k0) {
#pragma unroll
    for (int i = 0; i < T::kXPerThread; ++i) {
      const int idx = tid + i * T::kThreads, r = idx / T::kBk, p = idx % T::kBk;
      const int64_t gr = row0 + r;
      xr[i] = gr < m && k0 + p < k ? x[gr * k + k0 + p] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < T::kWPerThread; ++i) {
      const int idx = tid + i * T::kThreads, c = idx / T::kBk, p = idx % T::kBk;
      const int64_t gc = col0 + c;
      wr[i] = gc < n && k0 + p < k ? Widen(w[gc * k + k0 + p]) : 0.0f;
    }
  };
  auto stage = [&]() {
#pragma unroll
    for (int i = 0; i < T::kXPerThread; ++i) {
      const int idx = tid + i * T::kThreads;
      xs[(idx % T::kBk) * (T::kBm + 1) + idx / T::kBk] = xr[i];
    }
#pragma unroll
    for (int i = 0; i < T::kWPerThread; ++i) {
      const int idx = tid + i * T::kThreads;
      ws[(idx % T::kBk) * (T::kBn + 1) + idx / T::kBk] = wr[i];
    }
  };

  float acc[T::kTm][T::kTn];
#pragma unroll
  for (int r = 0; r < T::kTm; ++r) {
#pragma unroll
    for (int c = 0; c < T::kTn; ++c) acc[r][c] = 0.0f;
  }
  // One step p of every owned element's chain.
  auto step = [&](int p) {
    float a[T::kTm], b[T::kTn];
#pragma unroll
    for (int r = 0; r < T::kTm; ++r) a[r] = xs[p * (T::kBm + 1) + ty + r * T::kThreadsY];
#pragma unroll
    for (int c = 0; c < T::kTn; ++c) b[c] = ws[p * (T::kBn + 1) + tx + c * T::kThreadsX];
#pragma unroll
    for (int r = 0; r < T::kTm; ++r) {
#pragma unroll
      for (int c = 0; c < T::kTn; ++c) acc[r][c] = __fmaf_rn(a[r], b[c], acc[r][c]);
    }
  };

  // A thread whose first row is past m owns no stored output: it skips the arithmetic (for
  // SmallTile a whole warp does).
  const bool has_rows = row0 + ty < m;
  if (k > 0) fetch(0);
  for (int32_t k0 = 0; k0 < k; k0 += T::kBk) {
    stage();
    __syncthreads();
    if (k0 + T::kBk < k) fetch(k0 + T::kBk);  // in flight while this chunk is used
    const int32_t kc = min(T::kBk, k - k0);
    if (!has_rows) {
      // nothing to compute; stay for the barriers
    } else if (kc == T::kBk) {
#pragma unroll 16  // fully unrolled, the 64-step chunk of SmallTile spilled registers
      for (int p = 0; p < T::kBk; ++p) step(p);
    } else {
      for (int p = 0; p < kc; ++p) step(p);  // the real steps of the last chunk only
    }
    __syncthreads();  // the next stage() overwrites xs and ws
  }

#pragma unroll
  for (int r = 0; r < T::kTm; ++r) {
    const int64_t gr = row0 + ty + r * T::kThreadsY;
    if (gr >= m) continue;
#pragma unroll
    for (int c = 0; c < T::kTn; ++c) {
      const int64_t gc = col0 + tx + c * T::kThreadsX;
      if (gc < n) y[gr * n + gc] = acc[r][c];
    }
  }
}

template <typename T, typename W>
cudaError_t Launch(const float* x, const W* w, int32_t m, int32_t n, int32_t k, float* y,
                   cudaStream_t stream) {
  const dim3 grid((n + T::kBn - 1) / T::kBn, (m + T::kBm - 1) / T::kBm);
  if (grid.y > 65535) return cudaErrorInvalidValue;
  // No comma inside TS_LAUNCH's arguments; the host layer's launch reads it without odr-use.
  [[maybe_unused]] constexpr auto kernel = &InvariantGemmKernel<T, W>;
  TS_LAUNCH(kernel, grid, T::kThreads, 0, stream, x, w, m, n, k, y);
  return cudaGetLastError();
}

template <typename W>
cudaError_t LaunchFor(const float* x, const W* w, int32_t m, int32_t n, int32_t k, float* y,
                      cudaStream_t stream) {
  // Either tile gives every element the same chain; this only picks the faster shape.
  return m <= kSmallM ? Launch<SmallTile>(x, w, m, n, k, y, stream)
                      : Launch<LargeTile>(x, w, m, n, k, y, stream);
}

}  // namespace

cudaError_t LaunchInvariantGemm(const float* x, const void* w, bool bf16, int32_t m, int32_t n,
                                int32_t k, float* y, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  if (k < 0) return cudaErrorInvalidValue;
  if (bf16) return LaunchFor(x, static_cast<const __nv_bfloat16*>(w), m, n, k, y, stream);
  return LaunchFor(x, static_cast<const float*>(w), m, n, k, y, stream);
}

}  // namespace tinyserve::cuda
