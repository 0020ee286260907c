// Decode-sized Linear of up to 64 rows on bf16 weights, on tensor cores: y [m, n] fp32 = x [m, k]
// bf16 * w [n, k]^T bf16, accumulated in fp32 (x is the bf16 copy of the activations that cuBLAS
// would read: the same products). The backend runs it for the rows between the small-m kernels'
// (m <= 8, small_m_linear.cu) and 64; cuBLAS takes more.
//
// Why: at such m a GEMM is still a weight stream (2 bytes a weight, 2m flops; an H100 or H200 is
// memory-bound up to m ~ 300 on bf16), and a stream of 16-byte loads feeding mma.sync keeps the
// fused epilogue that cuBLAS cannot: the gated form writes silu(gate) * up and its bf16 copy for
// the down GEMM, so a decode layer of 9 to 64 sequences runs 8 kernels (issue 19 item 4).
//
// Shape: a block is kWarps warps over 16 weight rows (one mma's M; the gated form 8 gate rows and
// the 8 up rows `hidden` below them, so that a lane holds a gate and its up value). Warp w takes
// the 32-column k chunks w, w + kWarps, ...; in a chunk lane (g, t) = (l / 4, l % 4) loads columns
// 8t .. 8t + 7 of weight rows g and g + 8 and of token 8j + g for each 8-token tile j, 16 bytes
// each, and issues two m16n8k16 per tile. Which k columns sit in which mma slots is a permutation
// applied alike to A and B, so the dot products are unchanged (mma.cuh gives the slot layout:
// slots 2t, 2t+1 | 2t+8, 2t+9 of the first mma hold columns 8t .. 8t+3, of the second 8t+4 ..
// 8t+7). The warps' partial tiles are then summed through shared memory in warp order 0, 1, ...
//
// Reduction order of an output element: each warp's mma chain over its chunks (in increasing k),
// then the warps in order. It depends on k alone, never on m, n or the grid, so a token's row is
// the same bits for every m up to 64, and the gated form's gate and up sums are the plain kernel's
// (the host execution layer sums each mma in a fixed order; the hardware's order within an mma is
// unspecified but does not depend on the other rows or columns of the tile).
//
// Bytes: the weights once (n k 2), x once a block from L2 (m k 2 per 16 weight rows: m / 16 times
// the weight bytes); y m n 4. Without a GPU its speed is unmeasured (bench/RESULTS.md).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/shared.cuh"

namespace tinyserve::cuda {
namespace {

constexpr int kWarps = 8;      // warps of a block, each a share of the k chunks
constexpr int kChunk = 32;     // k columns a warp takes a step (4 lanes x 8)
constexpr int kInFlight = 4;   // chunks whose weights a warp loads before it multiplies
constexpr int kTileRows = 16;  // weight rows a block owns (an mma's M)

// The 8 bf16 values at row * k + c of p, or zeros where `in` is false (no address is formed then).
__device__ __forceinline__ uint4 Load16Or0(const __nv_bfloat16* p, int64_t row, int64_t k,
                                           int64_t c, bool in) {
  return in ? *reinterpret_cast<const uint4*>(p + row * k + c) : uint4{0, 0, 0, 0};
}

// grid ceil(n / 16) (gated: ceil(n / 8), n = hidden), block kWarps * 32. NT = ceil(m / 8) token
// tiles. kGated: w is w13 [2 n, k] (gate rows, then up rows); y [m, n] = silu(gate) * up as
// SiluAndMulKernel computes it, and y_bf16 (if not null) its bf16 copy.
template <int NT, bool kGated>
__global__ void __launch_bounds__(kWarps * 32)
    MidMLinearKernel(const __nv_bfloat16* x, int32_t m, const __nv_bfloat16* w, int32_t n,
                     int32_t k, float* y, __nv_bfloat16* y_bf16) {
  // [warp][tile][lane][4]: each warp's accumulators, for the ordered sum over warps.
  TS_SHARED_ARRAY_ALIGNED(float, red, kWarps* NT * 32 * 4, 16);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  // The weight rows of mma rows g and g + 8 (-1: past the end, loaded as zeros).
  const int64_t base = static_cast<int64_t>(blockIdx.x) * (kGated ? kTileRows / 2 : kTileRows);
  int64_t row_lo = base + g < n ? base + g : -1, row_hi;
  if constexpr (kGated) {
    row_hi = row_lo >= 0 ? row_lo + n : -1;
  } else {
    row_hi = base + g + 8 < n ? base + g + 8 : -1;
  }
  float acc[NT][4];
  for (int j = 0; j < NT; ++j) {
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  }
  // Every lane of a warp runs the same steps (the bounds depend on the warp alone): mma.sync and
  // the host layer's shuffles need the whole warp.
  for (int64_t c0 = static_cast<int64_t>(warp) * kChunk; c0 < k;
       c0 += static_cast<int64_t>(kInFlight) * kWarps * kChunk) {
    uint4 wl[kInFlight], wh[kInFlight];
    for (int u = 0; u < kInFlight; ++u) {
      const int64_t c = c0 + static_cast<int64_t>(u) * kWarps * kChunk + 8 * t;
      wl[u] = Load16Or0(w, row_lo, k, c, row_lo >= 0 && c < k);
      wh[u] = Load16Or0(w, row_hi, k, c, row_hi >= 0 && c < k);
    }
    for (int u = 0; u < kInFlight; ++u) {
      const int64_t c = c0 + static_cast<int64_t>(u) * kWarps * kChunk + 8 * t;
      if (c0 + static_cast<int64_t>(u) * kWarps * kChunk >= k) break;  // uniform in the warp
      const uint32_t a0[4] = {wl[u].x, wh[u].x, wl[u].y, wh[u].y};
      const uint32_t a1[4] = {wl[u].z, wh[u].z, wl[u].w, wh[u].w};
      for (int j = 0; j < NT; ++j) {
        const int token = 8 * j + g;
        const uint4 xv = Load16Or0(x, token, k, c, token < m && c < k);
        const uint32_t b0[2] = {xv.x, xv.y}, b1[2] = {xv.z, xv.w};
        MmaBf16M16N8K16(acc[j], a0, b0, acc[j]);
        MmaBf16M16N8K16(acc[j], a1, b1, acc[j]);
      }
    }
  }
  for (int j = 0; j < NT; ++j) {
    for (int i = 0; i < 4; ++i) red[((warp * NT + j) * 32 + lane) * 4 + i] = acc[j][i];
  }
  __syncthreads();
  // Element i of lane l in tile j: mma row g + 8 (i / 2), token 8 j + 2 t + i % 2.
  auto sum = [&](int j, int l, int i) {
    float s = red[(j * 32 + l) * 4 + i];
    for (int v = 1; v < kWarps; ++v) s += red[((v * NT + j) * 32 + l) * 4 + i];
    return s;
  };
  if constexpr (kGated) {
    for (int e = threadIdx.x; e < NT * 32 * 2; e += kWarps * 32) {
      const int j = e / 64, l = (e / 2) % 32, p = e % 2;
      const int64_t row = base + l / 4;
      const int token = 8 * j + 2 * (l % 4) + p;
      if (token >= m || row >= n) continue;
      float v = sum(j, l, p);  // SiluAndMulKernel's arithmetic
      v *= 1.0f / (1.0f + expf(-v));
      v = v * sum(j, l, p + 2);
      y[static_cast<int64_t>(token) * n + row] = v;
      if (y_bf16 != nullptr) y_bf16[static_cast<int64_t>(token) * n + row] = __float2bfloat16_rn(v);
    }
  } else {
    for (int e = threadIdx.x; e < NT * 32 * 4; e += kWarps * 32) {
      const int j = e / 128, l = (e / 4) % 32, i = e % 4;
      const int64_t row = base + l / 4 + 8 * (i / 2);
      const int token = 8 * j + 2 * (l % 4) + i % 2;
      if (token >= m || row >= n) continue;
      y[static_cast<int64_t>(token) * n + row] = sum(j, l, i);
    }
  }
}

template <int NT, bool kGated>
void Launch(const __nv_bfloat16* x, int32_t m, const __nv_bfloat16* w, int32_t n, int32_t k,
            float* y, __nv_bfloat16* y_bf16, cudaStream_t stream) {
  constexpr int64_t kRows = kGated ? kTileRows / 2 : kTileRows;
  const int64_t blocks = (static_cast<int64_t>(n) + kRows - 1) / kRows;
  // (A name for the launch macro, whose arguments cannot hold the template's comma.)
  [[maybe_unused]] static constexpr auto* kernel = &MidMLinearKernel<NT, kGated>;
  TS_LAUNCH(kernel, static_cast<unsigned>(blocks), kWarps * 32, 0, stream, x, m, w, n, k, y,
            y_bf16);
}

using Launcher = void (*)(const __nv_bfloat16*, int32_t, const __nv_bfloat16*, int32_t, int32_t,
                          float*, __nv_bfloat16*, cudaStream_t);
template <bool kGated>
constexpr Launcher kLaunchers[kMidMLinearRows / 8] = {
    Launch<1, kGated>, Launch<2, kGated>, Launch<3, kGated>, Launch<4, kGated>,
    Launch<5, kGated>, Launch<6, kGated>, Launch<7, kGated>, Launch<8, kGated>};

}  // namespace

bool MidMLinearApplies(const void* x, const void* w, int32_t m, int32_t k) {
  return m >= 1 && m <= kMidMLinearRows && k > 0 && k % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

cudaError_t LaunchMidMLinear(const void* x, const void* w, int32_t m, int32_t n, int32_t k,
                             float* y, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!MidMLinearApplies(x, w, m, k)) return cudaErrorInvalidValue;
  kLaunchers<false>[(m - 1) / 8](static_cast<const __nv_bfloat16*>(x), m,
                                 static_cast<const __nv_bfloat16*>(w), n, k, y, nullptr, stream);
  return cudaGetLastError();
}

cudaError_t LaunchMidMLinearSiluAndMul(const void* x, const void* w13, int32_t m, int32_t hidden,
                                       int32_t k, float* out, void* out_bf16, cudaStream_t stream) {
  if (hidden <= 0) return cudaSuccess;
  if (!MidMLinearApplies(x, w13, m, k) || hidden > (int64_t{1} << 30)) {
    return cudaErrorInvalidValue;
  }
  kLaunchers<true>[(m - 1) / 8](static_cast<const __nv_bfloat16*>(x), m,
                                static_cast<const __nv_bfloat16*>(w13), hidden, k, out,
                                static_cast<__nv_bfloat16*>(out_bf16), stream);
  return cudaGetLastError();
}

}  // namespace tinyserve::cuda
