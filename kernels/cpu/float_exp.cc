// ExpF and SiluAndMulRow (float_exp.h): the scalar definition and its AVX-512 and AVX2 forms,
// operation for operation. This file is compiled with -ffp-contract=off (kernels/CMakeLists.txt),
// so neither form fuses a product and an add.
#include "kernels/cpu/float_exp.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
// g++ 12 takes the _mm512_undefined_* that unmasked AVX-512 intrinsics start from for an
// uninitialized read once they are inlined here (a false positive: every lane is written).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tinyserve {
namespace {

constexpr float kMaxX = 0x1.62e42ep+6f;   // 88.7228317...: the largest x with a finite exp
constexpr float kMinX = -0x1.9fe368p+6f;  // -103.9720764...: float(-150 ln 2); below it, +0
constexpr float kLog2e = 0x1.715476p+0f;  // float(log2(e))
constexpr float kLn2Hi = 0.693359375f;    // 9 significant bits: n * kLn2Hi is exact
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

float Pow2(int32_t e) { return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23); }

#if defined(__x86_64__)
__attribute__((target("avx512f"))) inline __m512 Pow2Avx512(__m512i e) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)), 23));
}

// ExpF on sixteen lanes: the in-range sequence on x clamped to [kMinX, kMaxX] (so that every
// lane's integer arithmetic stays in range), then the out-of-range lanes and NaNs replaced.
__attribute__((target("avx512f"))) inline __m512 ExpAvx512(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kMinX)), _mm512_set1_ps(kMaxX));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(kLn2Hi)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(kLn2Lo)));
  const __m512 r2 = _mm512_mul_ps(r, r);
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP1));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP2));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP3));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP4));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP5));
  __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, r2), r), _mm512_set1_ps(1.0f));
  const __m512i ni = _mm512_cvtps_epi32(n);  // n is an integer already: exact
  const __m512i n1 = _mm512_srai_epi32(ni, 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  y = _mm512_mul_ps(_mm512_mul_ps(y, Pow2Avx512(n1)), Pow2Avx512(n2));
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kMaxX), _CMP_GT_OQ), y,
                           _mm512_set1_ps(std::numeric_limits<float>::infinity()));
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kMinX), _CMP_LT_OQ), y,
                           _mm512_setzero_ps());
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

__attribute__((target("avx512f"))) void ExpAvx512Row(const float* x, int32_t n, float* y) {
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, ExpAvx512(_mm512_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = ExpF(x[i]);
}

__attribute__((target("avx512f"))) void SiluAndMulAvx512(const float* g, const float* u, int32_t n,
                                                         float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 gv = _mm512_loadu_ps(g + i);
    const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(gv), _mm512_set1_epi32(INT32_MIN)));  // -g: a sign flip
    const __m512 e = ExpAvx512(neg);
    const __m512 s = _mm512_mul_ps(gv, _mm512_div_ps(one, _mm512_add_ps(one, e)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(u + i)));
  }
  for (; i < n; ++i) out[i] = (g[i] * (1.0f / (1.0f + ExpF(-g[i])))) * u[i];
}

// The same on eight lanes (AVX2 CPUs without AVX-512).
__attribute__((target("avx2"))) inline __m256 Pow2Avx2(__m256i e) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

__attribute__((target("avx2"))) inline __m256 ExpAvx2(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kMinX)), _mm256_set1_ps(kMaxX));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Hi)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Lo)));
  const __m256 r2 = _mm256_mul_ps(r, r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP1));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP2));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP3));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP4));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP5));
  __m256 y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, r2), r), _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  y = _mm256_mul_ps(_mm256_mul_ps(y, Pow2Avx2(n1)), Pow2Avx2(n2));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                       _mm256_cmp_ps(x, _mm256_set1_ps(kMaxX), _CMP_GT_OQ));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(kMinX), _CMP_LT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

__attribute__((target("avx2"))) void ExpAvx2Row(const float* x, int32_t n, float* y) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, ExpAvx2(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = ExpF(x[i]);
}

__attribute__((target("avx2"))) void SiluAndMulAvx2(const float* g, const float* u, int32_t n,
                                                    float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 neg = _mm256_castsi256_ps(
        _mm256_xor_si256(_mm256_castps_si256(gv), _mm256_set1_epi32(INT32_MIN)));
    const __m256 e = ExpAvx2(neg);
    const __m256 s = _mm256_mul_ps(gv, _mm256_div_ps(one, _mm256_add_ps(one, e)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
  }
  for (; i < n; ++i) out[i] = (g[i] * (1.0f / (1.0f + ExpF(-g[i])))) * u[i];
}
#endif

enum class Isa { kPortable, kAvx2, kAvx512 };

Isa BestIsa() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2")) return Isa::kAvx2;
#endif
  return Isa::kPortable;
}

Isa g_isa = BestIsa();  // SetFloatExpIsaForTesting

}  // namespace

float ExpF(float x) {
  if (std::isnan(x)) return x;
  if (x > kMaxX) return std::numeric_limits<float>::infinity();
  if (x < kMinX) return 0.0f;
  const float n = std::nearbyint(x * kLog2e);  // the default rounding mode: nearest, ties even
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  const float r2 = r * r;
  float p = kP0;
  p = p * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  const float y = (p * r2 + r) + 1.0f;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1;  // floor(n / 2)
  return (y * Pow2(n1)) * Pow2(ni - n1);
}

void ExpF(const float* x, int32_t n, float* y) {
#if defined(__x86_64__)
  if (g_isa == Isa::kAvx512) return ExpAvx512Row(x, n, y);
  if (g_isa == Isa::kAvx2) return ExpAvx2Row(x, n, y);
#endif
  for (int32_t i = 0; i < n; ++i) y[i] = ExpF(x[i]);
}

void SiluAndMulRow(const float* g, const float* u, int32_t n, float* out) {
#if defined(__x86_64__)
  if (g_isa == Isa::kAvx512) return SiluAndMulAvx512(g, u, n, out);
  if (g_isa == Isa::kAvx2) return SiluAndMulAvx2(g, u, n, out);
#endif
  for (int32_t i = 0; i < n; ++i) out[i] = (g[i] * (1.0f / (1.0f + ExpF(-g[i])))) * u[i];
}

bool SetFloatExpIsaForTesting(const char* isa) {
  const std::string name = isa;
  const Isa best = BestIsa();
  if (name == "best") {
    g_isa = best;
  } else if (name == "portable") {
    g_isa = Isa::kPortable;
  } else if (name == "avx2" && best >= Isa::kAvx2) {
    g_isa = Isa::kAvx2;
  } else if (name == "avx512" && best >= Isa::kAvx512) {
    g_isa = Isa::kAvx512;
  } else {
    return false;
  }
  return true;
}

}  // namespace tinyserve
