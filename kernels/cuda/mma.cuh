// One warp's bf16 tensor-core multiply-accumulate of shape m16n8k16 with fp32 accumulation (PTX
// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`, sm_80 on), with the register layouts the
// PTX ISA documents for it, so that a kernel can work on the fragments in registers (the online
// softmax of flash_prefill.cu) rather than through shared memory. Lane l has g = l / 4 and
// t = l % 4; a register of two bf16 values holds the lower column (or row) in its low 16 bits:
//   A [16 x 16] row-major, 4 registers: a[0] row g,     columns 2t, 2t+1
//                                       a[1] row g + 8, columns 2t, 2t+1
//                                       a[2] row g,     columns 2t + 8, 2t + 9
//                                       a[3] row g + 8, columns 2t + 8, 2t + 9
//   B [16 x 8] (k x n), 2 registers:    b[0] rows 2t, 2t+1 of column g; b[1] rows 2t + 8, 2t + 9
//   C, D [16 x 8] fp32, 4 floats:       c[0], c[1] row g, columns 2t, 2t+1; c[2], c[3] row g + 8
// Every lane of the warp calls it (it is a warp operation). Products of two bf16 values are exact
// in fp32; the order in which the hardware sums the 16 products and c is not specified, so results
// are compared with a tolerance. On the host execution layer (tests/gpu_host) the same layouts are
// exchanged with warp shuffles and each element is summed as c + a0 b0 + a1 b1 + ... in order
// (tests/gpu_host/mma_emulation.h, which the host layer's cuda_runtime.h brings in).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tinyserve::cuda {

// d = a * b + c (d may alias c).
__device__ __forceinline__ void MmaBf16M16N8K16(float (&d)[4], const uint32_t (&a)[4],
                                                const uint32_t (&b)[2], const float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#elif defined(TS_HOST_LAUNCH)
  ::tinyserve::gpu_host::EmulateMmaBf16M16N8K16(d, a, b, c);
#elif defined(__CUDA_ARCH__)
  __trap();  // below sm_80: the host never launches a tensor-core kernel there
#endif
}

// Two floats rounded to bf16 (nearest even) in one register: lo in the low 16 bits.
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  const __nv_bfloat16 l = __float2bfloat16_rn(lo), h = __float2bfloat16_rn(hi);
  uint16_t lb, hb;
  memcpy(&lb, &l, 2);
  memcpy(&hb, &h, 2);
  return static_cast<uint32_t>(lb) | (static_cast<uint32_t>(hb) << 16);
}

// The two bf16 values of a register, widened exactly.
__device__ __forceinline__ float Bf16Lo(uint32_t r) { return __uint_as_float(r << 16); }
__device__ __forceinline__ float Bf16Hi(uint32_t r) { return __uint_as_float(r & 0xffff0000u); }

}  // namespace tinyserve::cuda
