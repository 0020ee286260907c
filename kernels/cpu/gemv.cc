#include "kernels/cpu/gemv.h"

#include <cstddef>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tinyserve {
namespace {

void GemvPortable(const float* w, const float* x, int32_t k, int32_t j0, int32_t j1, float* y) {
  for (int32_t j = j0; j < j1; ++j) {
    const float* row = w + static_cast<size_t>(j) * k;
    float acc = 0.0f;
    for (int32_t p = 0; p < k; ++p) acc += row[p] * x[p];
    y[j] = acc;
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) inline float HorizontalSum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Four rows at a time, two accumulators per row (8 FMA chains in flight), x reused from L1.
__attribute__((target("avx2,fma"))) void GemvAvx2(const float* w, const float* x, int32_t k,
                                                  int32_t j0, int32_t j1, float* y) {
  const int32_t k16 = k / 16 * 16;
  int32_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    const float* r0 = w + static_cast<size_t>(j) * k;
    const float* r1 = r0 + k;
    const float* r2 = r1 + k;
    const float* r3 = r2 + k;
    __m256 a0 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps();
    __m256 a1 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps();
    __m256 a3 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
    for (int32_t p = 0; p < k16; p += 16) {
      const __m256 x0 = _mm256_loadu_ps(x + p), x1 = _mm256_loadu_ps(x + p + 8);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + p), x0, a0);
      b0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + p + 8), x1, b0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + p), x0, a1);
      b1 = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + p + 8), x1, b1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + p), x0, a2);
      b2 = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + p + 8), x1, b2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(r3 + p), x0, a3);
      b3 = _mm256_fmadd_ps(_mm256_loadu_ps(r3 + p + 8), x1, b3);
    }
    float s0 = HorizontalSum(_mm256_add_ps(a0, b0)), s1 = HorizontalSum(_mm256_add_ps(a1, b1));
    float s2 = HorizontalSum(_mm256_add_ps(a2, b2)), s3 = HorizontalSum(_mm256_add_ps(a3, b3));
    for (int32_t p = k16; p < k; ++p) {
      s0 += r0[p] * x[p];
      s1 += r1[p] * x[p];
      s2 += r2[p] * x[p];
      s3 += r3[p] * x[p];
    }
    y[j] = s0;
    y[j + 1] = s1;
    y[j + 2] = s2;
    y[j + 3] = s3;
  }
  if (j < j1) GemvPortable(w, x, k, j, j1, y);
}

bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

}  // namespace

void GemvRows(const float* w, const float* x, int32_t k, int32_t j0, int32_t j1, float* y) {
#if defined(__x86_64__)
  if (HasAvx2Fma()) {
    GemvAvx2(w, x, k, j0, j1, y);
    return;
  }
#endif
  GemvPortable(w, x, k, j0, j1, y);
}

}  // namespace tinyserve
