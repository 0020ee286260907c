// Host execution layer (tests/gpu_host): the tensor-core MMA of kernels/cuda/mma.cuh (m16n8k16,
// bf16 inputs, fp32 accumulation) for .cu sources compiled as host C++. The lanes exchange their
// fragments with warp shuffles in the register layouts the PTX ISA documents (the contract in
// mma.cuh), so a kernel that puts an element in the wrong register gets a wrong product here as on
// the GPU, and a lane that does not reach the MMA is a fault (the shuffles are warp operations).
// Each element of d is c + a0 b0 + a1 b1 + ... + a15 b15 summed in that order with fmaf (the
// hardware's order is unspecified). Blocks must be one-dimensional (lane = threadIdx.x % 32).
#pragma once

#include <cmath>
#include <cstdint>

namespace tinyserve::gpu_host {

inline void EmulateMmaBf16M16N8K16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                   const float (&c)[4]) {
  const auto lo = [](uint32_t r) { return __uint_as_float(r << 16); };
  const auto hi = [](uint32_t r) { return __uint_as_float(r & 0xffff0000u); };
  const auto pair = [](uint32_t x, uint32_t y) {
    return static_cast<uint64_t>(x) | (static_cast<uint64_t>(y) << 32);
  };
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  float arow[2][16];  // rows g and g + 8 of A
  for (int q = 0; q < 4; ++q) {
    // Lane 4g + q holds columns 2q, 2q + 1 (a[0], a[1]) and 2q + 8, 2q + 9 (a[2], a[3]).
    const uint64_t x = __shfl_sync(0xffffffffu, pair(a[0], a[1]), 4 * g + q);
    const uint64_t y = __shfl_sync(0xffffffffu, pair(a[2], a[3]), 4 * g + q);
    const uint32_t r0 = static_cast<uint32_t>(x), r1 = static_cast<uint32_t>(x >> 32);
    const uint32_t r2 = static_cast<uint32_t>(y), r3 = static_cast<uint32_t>(y >> 32);
    arow[0][2 * q] = lo(r0), arow[0][2 * q + 1] = hi(r0);
    arow[1][2 * q] = lo(r1), arow[1][2 * q + 1] = hi(r1);
    arow[0][2 * q + 8] = lo(r2), arow[0][2 * q + 9] = hi(r2);
    arow[1][2 * q + 8] = lo(r3), arow[1][2 * q + 9] = hi(r3);
  }
  float bcol[2][16];  // columns 2t and 2t + 1 of B
  for (int j = 0; j < 2; ++j) {
    const int n = 2 * t + j;
    for (int q = 0; q < 4; ++q) {
      // Lane 4n + q holds rows 2q, 2q + 1 (b[0]) and 2q + 8, 2q + 9 (b[1]) of column n.
      const uint64_t x = __shfl_sync(0xffffffffu, pair(b[0], b[1]), 4 * n + q);
      const uint32_t r0 = static_cast<uint32_t>(x), r1 = static_cast<uint32_t>(x >> 32);
      bcol[j][2 * q] = lo(r0), bcol[j][2 * q + 1] = hi(r0);
      bcol[j][2 * q + 8] = lo(r1), bcol[j][2 * q + 9] = hi(r1);
    }
  }
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const float* ar = arow[i / 2];
    const float* bc = bcol[i % 2];
    float acc = c[i];
    for (int k = 0; k < 16; ++k) acc = std::fma(ar[k], bc[k], acc);
    out[i] = acc;
  }
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

}  // namespace tinyserve::gpu_host
