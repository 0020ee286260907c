// Host execution layer (tests/gpu_host): __half and its conversions, rounding as CUDA's (float ->
// half to nearest, ties to even, subnormals included; overflow to inf; NaN -> 0x7fff).
#pragma once

#include <cstdint>
#include <cstring>

struct __half {
  uint16_t bits;
};

inline __half __float2half_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return {0x7fff};
  if (u >= 0x47800000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65536: inf
  if (u < 0x38800000u) {  // below 2^-14: a subnormal half; the FPU's add rounds to nearest even
    float a;
    std::memcpy(&a, &u, 4);
    const float magic = 0.5f;  // 2^-1: its ulp is 2^-24, the half subnormal step
    const float r = a + magic;
    uint32_t rb;
    std::memcpy(&rb, &r, 4);
    return {static_cast<uint16_t>(sign | (rb - 0x3f000000u))};
  }
  const uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000fffu + odd;  // rebias the exponent (-112 << 23) and round at bit 13
  return {static_cast<uint16_t>(sign | (u >> 13))};
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float __half2float(__half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu, mant = h.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else {
    const float f = static_cast<float>(mant) * 0x1p-24f;
    std::memcpy(&u, &f, 4);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
