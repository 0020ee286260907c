// bfloat16 as its 16 bits, to and from fp32: the one conversion of the project (model files'
// BF16 tensors, the CPU backend's bf16 KV cache). To bf16 rounds to nearest, ties to even, as torch
// and CUDA's __float2bfloat16_rn do; a NaN stays a (quiet) NaN, infinities stay infinite, values
// past the largest bf16 become infinity. From bf16 is exact (the bits << 16). Pure, no state.
#pragma once

#include <cstdint>
#include <cstring>

namespace tinyserve {

inline float Bf16ToF32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

}  // namespace tinyserve
