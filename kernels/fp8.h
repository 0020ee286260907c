// fp8 e4m3 (OCP FP8 E4M3, NVIDIA's __nv_fp8_e4m3): 1 sign, 4 exponent (bias 7), 3 mantissa bits;
// no infinities, NaN = S.1111.111, largest finite 448, subnormals m * 2^-9. The KV cache's fp8
// elements (--kv-cache-dtype fp8), the same functions on the host and the device.
//
// FloatToE4m3 rounds to nearest, ties to even, and saturates to +-448 (NVIDIA's __NV_SATFINITE:
// infinities too); NaN stays NaN. E4m3ToFloat is exact (every e4m3 value is a float, and a bf16).
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define TS_FP8_FN __host__ __device__ __forceinline__
#else
#define TS_FP8_FN inline
#endif

namespace tinyserve {

// One e4m3 value as stored in the cache.
struct Fp8E4m3 {
  uint8_t bits;
};

TS_FP8_FN uint8_t FloatToE4m3(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7fu;               // NaN
  if (a >= 0x43e00000u) return sign | 0x7eu;              // >= 448 (and inf): the largest finite
  const int32_t e = static_cast<int32_t>(a >> 23) - 127;  // the float's exponent
  if (e >= -6) {                                          // an e4m3 normal (or rounds up to 448)
    const uint32_t m = a & 0x7fffffu;
    uint32_t bits = (static_cast<uint32_t>(e + 7) << 3) | (m >> 20);
    const uint32_t rest = m & 0xfffffu, half = 0x80000u;
    if (rest > half || (rest == half && (bits & 1u) != 0)) ++bits;  // a carry lifts the exponent
    return sign | static_cast<uint8_t>(bits > 0x7eu ? 0x7eu : bits);
  }
  // Below 2^-6: the multiple of 2^-9 nearest |x| (8 of them is the smallest normal, 0x08).
  if (e < -127 + 1) return sign;  // zero or a float subnormal: far below 2^-10
  const uint32_t significand = (a & 0x7fffffu) | 0x800000u;  // |x| = significand * 2^(e - 23)
  const int32_t shift = 14 - e;                              // |x| * 2^9 = significand >> shift
  if (shift >= 25) return sign;                              // |x| * 2^9 < 1/2
  uint32_t q = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u) != 0)) ++q;
  return sign | static_cast<uint8_t>(q);
}

TS_FP8_FN float E4m3ToFloat(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t a = b & 0x7fu;
  uint32_t bits;
  if (a == 0x7fu) {
    bits = sign | 0x7fc00000u;  // NaN
  } else if (a < 0x08u) {       // subnormal: a * 2^-9, exact in a float
    float f = static_cast<float>(a) * 0.001953125f;
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  } else {
    bits = sign | ((a + (120u << 3)) << 20);  // exponent + (127 - 7), mantissa in place
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace tinyserve
