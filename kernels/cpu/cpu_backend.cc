// The CPU backend: fp32 ops over host memory on one thread pool; the packed GEMM of
// kernels/cpu/packed_gemm.h for every matrix product. The KV cache holds fp32 or (asked for) bf16
// elements; attention widens bf16 exactly and computes in fp32 in the same order. The attention
// loops have AVX2 / AVX-512 forms that give the portable loops' bits (this file is compiled with
// -ffp-contract=off, kernels/CMakeLists.txt): q.k eight keys at a time, the value sums in
// registers for a prompt's tokens (their sequence's cache is reused from L2) and streamed row by
// row for a decode token (its cache comes from memory once).
//
// Numerics follow llama2.c's run.c where it matters for token-exact parity: sequential float
// accumulation in RMSNorm and attention, division by sqrtf(head_dim), powf/cosf/sinf RoPE. The
// softmax and SiLU take exp from ExpF (float_exp.h): under 1 ulp from exp, the same bits on every
// machine and vector width (libm's expf is neither fixed nor vectorised).
//
// Batch invariance: every reduction has one order per output element that depends on nothing but
// that element's own inputs. RMSNorm sums a row left to right; attention sums a (token, head)'s
// scores, exponentials and values over positions 0..pos in order, the same for a decode token,
// a prefill chunk of any length and keys that came from the prefix cache; the GEMM is one fma chain
// over k per element. Threads split rows, (token, head) pairs or output panels, never a
// reduction. So a request's logits are bit-identical whatever the batch, chunking, block size,
// cache state, preemptions and thread count (tests/integration/batch_invariance_test.cc).
#include <sys/mman.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

#include "base/bf16.h"

#include "kernels/backend.h"
#include "kernels/cpu/float_exp.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tinyserve {
namespace {

// RMSNorm of R consecutive rows (row stride dim), each as run.c does it: the squares summed left
// to right in one float, then out[j] = weight[j] * (inv * x[j]). One row's sum is a chain of dim
// dependent adds, so a row alone waits on the adder's latency (~1 us at dim 768); R rows side by
// side run R chains at once. Every row gets the bits it gets alone (RmsNormRows<1>).
template <int R>
void RmsNormRows(const float* x, const float* weight, int32_t dim, float eps, float* out) {
  float ss[R];
  for (int r = 0; r < R; ++r) ss[r] = 0.0f;
  for (int32_t j = 0; j < dim; ++j) {
    for (int r = 0; r < R; ++r) {
      const float v = x[static_cast<size_t>(r) * dim + j];
      ss[r] += v * v;
    }
  }
  for (int r = 0; r < R; ++r) {
    float inv = ss[r] / static_cast<float>(dim);
    inv += eps;
    inv = 1.0f / std::sqrt(inv);
    const float* xr = x + static_cast<size_t>(r) * dim;
    float* outr = out + static_cast<size_t>(r) * dim;
    for (int32_t j = 0; j < dim; ++j) outr[j] = weight[j] * (inv * xr[j]);
  }
}

// Rows per RmsNormRows call (and per thread-pool item) in RmsNorm and AddRmsNorm.
constexpr int32_t kNormRows = 8;

// Rows [first, first + count) of x through RmsNormRows: kNormRows at a time, the rest one by one.
void RmsNormRowGroup(const float* x, const float* weight, int32_t count, int32_t dim, float eps,
                     float* out) {
  if (count == kNormRows) {
    RmsNormRows<kNormRows>(x, weight, dim, eps, out);
    return;
  }
  for (int32_t r = 0; r < count; ++r) {
    RmsNormRows<1>(x + static_cast<size_t>(r) * dim, weight, dim, eps,
                   out + static_cast<size_t>(r) * dim);
  }
}

// A KV cache element: fp32, or bf16 kept as its 16 bits (kv_cache_dtype() bf16), written with
// F32ToBf16 and widened exactly with Bf16ToF32 (base/bf16.h); attention computes in fp32 either
// way.
using Bf16Bits = uint16_t;
inline float Widen(float x) { return x; }
inline float Widen(Bf16Bits b) { return Bf16ToF32(b); }

// sum of a[i] * b[i] over i < n in a fixed order that depends on n only: eight lane sums (lane l
// takes i = l, l + 8, ... in order; a product, then an add), combined as an 8-lane vector's
// horizontal sum does, ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), then
// the tail i >= n - n % 8 in order. Eight independent chains instead of one: attention's q.k
// was latency-bound on one (34% of a batch-32 decode step).
template <typename T>
float LaneDotPortable(const float* a, const T* b, int32_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int32_t n8 = n - n % 8;
  for (int32_t i = 0; i < n8; i += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += a[i + l] * Widen(b[i + l]);
  }
  float sum =
      ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  for (int32_t i = n8; i < n; ++i) sum += a[i] * Widen(b[i]);
  return sum;
}

// out[i] += a * v[i] for i < n: a product, then an add, per element.
template <typename T>
void AxpyPortable(float a, const T* v, int32_t n, float* out) {
  for (int32_t i = 0; i < n; ++i) out[i] += a * Widen(v[i]);
}

// a[u * len + p] for u < heads, p < len, each row softmaxed in place: its max taken in order of p
// (std::max), subtracted, ExpF, the sum taken in order of p, then each element divided by it. The
// max and sum chains of up to kSoftmaxChains rows run side by side, positions outer, so a decode
// token's heads do not wait on one another's add latency; each row's chain is the same either way.
constexpr int32_t kSoftmaxChains = 16;
inline void SoftmaxRows(float* a, int32_t heads, int32_t len) {
  for (int32_t u0 = 0; u0 < heads; u0 += kSoftmaxChains) {
    const int32_t g = std::min(kSoftmaxChains, heads - u0);
    float* rows = a + static_cast<size_t>(u0) * len;
    float chain[kSoftmaxChains];
    for (int32_t u = 0; u < g; ++u) chain[u] = -INFINITY;
    for (int32_t p = 0; p < len; ++p) {
      for (int32_t u = 0; u < g; ++u)
        chain[u] = std::max(chain[u], rows[u * static_cast<size_t>(len) + p]);
    }
    for (int32_t u = 0; u < g; ++u) {
      float* r = rows + static_cast<size_t>(u) * len;
      for (int32_t p = 0; p < len; ++p) r[p] -= chain[u];
      ExpF(r, len, r);
      chain[u] = 0.0f;
    }
    for (int32_t p = 0; p < len; ++p) {
      for (int32_t u = 0; u < g; ++u) chain[u] += rows[u * static_cast<size_t>(len) + p];
    }
    for (int32_t u = 0; u < g; ++u) {
      float* r = rows + static_cast<size_t>(u) * len;
      for (int32_t p = 0; p < len; ++p) r[p] /= chain[u];
    }
  }
}

#if defined(__x86_64__)
// Eight (sixteen) elements of a cache row widened to fp32.
__attribute__((target("avx2"))) inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
// A bf16 row's eight elements, in order, exactly: the 16 bytes in both halves of a ymm register
// (a load, no ALU operation), then one byte shuffle puts each element's two bytes in the top half
// of its lane and zeroes the bottom (vpmovzxwd and a shift took two, the shift on one pipe of
// Zen's four).
__attribute__((target("avx2"))) inline __m256 Load8(const Bf16Bits* p) {
  const __m256i w =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i up = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,  //
                                      -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
  return _mm256_castsi256_ps(_mm256_shuffle_epi8(w, up));
}
__attribute__((target("avx512f"))) inline __m512 Load16(const float* p) {
  return _mm512_loadu_ps(p);
}
__attribute__((target("avx512f"))) inline __m512 Load16(const Bf16Bits* p) {
  // (The maskz forms: g++ 12 warns that the plain ones' _mm512_undefined_epi32 is uninitialized.)
  const __m512i w =
      _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16));
}

// LaneDotPortable's bits with the eight lanes in one ymm register (this file is compiled with
// -ffp-contract=off, so the product and the add stay two roundings).
template <typename T>
__attribute__((target("avx2"))) inline float LaneDotAvx2(const float* a, const T* b, int32_t n) {
  __m256 lane = _mm256_setzero_ps();
  const int32_t n8 = n - n % 8;
  for (int32_t i = 0; i < n8; i += 8) {
    lane = _mm256_add_ps(lane, _mm256_mul_ps(_mm256_loadu_ps(a + i), Load8(b + i)));
  }
  // (l0 + l4, l1 + l5, l2 + l6, l3 + l7), then ((l0 + l4) + (l2 + l6), (l1 + l5) + (l3 + l7)).
  const __m128 v = _mm_add_ps(_mm256_castps256_ps128(lane), _mm256_extractf128_ps(lane, 1));
  const __m128 w = _mm_add_ps(v, _mm_movehl_ps(v, v));
  float sum = _mm_cvtss_f32(_mm_add_ss(w, _mm_shuffle_ps(w, w, 1)));
  for (int32_t i = n8; i < n; ++i) sum += a[i] * Widen(b[i]);
  return sum;
}

// Lane j of the result is LaneDotAvx2's horizontal sum of v[j]:
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), for eight vectors at once.
__attribute__((target("avx2"))) inline __m256 HorizontalSums8(const __m256 v[8]) {
  // Halves: s_jk = [v_j's (l0 + l4, l1 + l5, l2 + l6, l3 + l7), v_k's the same] for k = j + 4.
  __m256 s[4];
  for (int j = 0; j < 4; ++j) {
    s[j] = _mm256_add_ps(_mm256_permute2f128_ps(v[j], v[j + 4], 0x20),
                         _mm256_permute2f128_ps(v[j], v[j + 4], 0x31));
  }
  // Pairs: per 128-bit half, (x0 + x2, x1 + x3) of two vectors side by side.
  const __m256 t01 = _mm256_add_ps(_mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 t23 = _mm256_add_ps(_mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // Last: (x0 + x2) + (x1 + x3), in lanes 0, 1, 2, 3 (v0 ... v3) and 4 ... 7 (v4 ... v7).
  return _mm256_add_ps(_mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// G consecutive heads' attention outputs, each head's head_dim (= 16 * NV) accumulators in
// registers over all positions: out_u[i] = ((0 + a_u[0] * v_0[i]) + a_u[1] * v_1[i]) + ..., a
// product, then an add, as AxpyPortable over the positions in order gives. Positions outer, so the
// G heads' slices of a value row (adjacent) are read together and rows follow each other in order.
// a_u = a + u * len; rows(p) is position p's value row, head u's slice at + v_off[u]; out_u = out +
// u * 16 * NV.
template <int NV, int G, typename Rows>
__attribute__((target("avx512f"))) void WeightedValuesAvx512(const float* a, int32_t len,
                                                             const int32_t* v_off, const Rows& rows,
                                                             float* out) {
  __m512 acc[G][NV];
  for (int u = 0; u < G; ++u) {
    for (int j = 0; j < NV; ++j) acc[u][j] = _mm512_setzero_ps();
  }
  for (int32_t p = 0; p < len; ++p) {
    const auto* row = rows(p);
    for (int u = 0; u < G; ++u) {
      const __m512 ap = _mm512_set1_ps(a[static_cast<size_t>(u) * len + p]);
      const auto* v = row + v_off[u];
      for (int j = 0; j < NV; ++j)
        acc[u][j] = _mm512_add_ps(acc[u][j], _mm512_mul_ps(ap, Load16(v + 16 * j)));
    }
  }
  for (int u = 0; u < G; ++u) {
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(out + (u * NV + j) * 16, acc[u][j]);
  }
}

// Heads per WeightedValuesAvx512 call for NV vectors a head: up to 24 accumulators.
constexpr int HeadGroup(int nv) { return nv <= 3 ? 8 : 24 / nv; }

// heads consecutive heads through WeightedValuesAvx512<NV, HeadGroup(NV)>, the rest one by one.
template <int NV, typename Rows>
void WeightedValuesGroups(int32_t heads, const float* a, int32_t len, const int32_t* v_off,
                          const Rows& rows, float* out) {
  constexpr int kG = HeadGroup(NV);
  int32_t u = 0;
  for (; u + kG <= heads; u += kG) {
    WeightedValuesAvx512<NV, kG>(a + static_cast<size_t>(u) * len, len, v_off + u, rows,
                                 out + u * 16 * NV);
  }
  for (; u < heads; ++u) {
    WeightedValuesAvx512<NV, 1>(a + static_cast<size_t>(u) * len, len, v_off + u, rows,
                                out + u * 16 * NV);
  }
}

// Sixteen fp32 columns at out as two vectors of the even and the odd columns (and back): how
// WeightedValuesAvx2 keeps a bf16 cache's columns, which widen as two vectors that way (Bf16Pair).
__attribute__((target("avx2"))) inline void LoadEvenOdd(const float* out, __m256& even,
                                                        __m256& odd) {
  const __m256 x = _mm256_loadu_ps(out), y = _mm256_loadu_ps(out + 8);
  const __m256 a = _mm256_permute2f128_ps(x, y, 0x20);  // columns 0-3, 8-11
  const __m256 b = _mm256_permute2f128_ps(x, y, 0x31);  // columns 4-7, 12-15
  even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
  odd = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
}
__attribute__((target("avx2"))) inline void StoreEvenOdd(__m256 even, __m256 odd, float* out) {
  const __m256 lo = _mm256_unpacklo_ps(even, odd);  // columns 0-3, 8-11
  const __m256 hi = _mm256_unpackhi_ps(even, odd);  // columns 4-7, 12-15
  _mm256_storeu_ps(out, _mm256_permute2f128_ps(lo, hi, 0x20));
  _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}
// Sixteen bf16 elements widened exactly: the even ones (shifted up) and the odd ones (masked),
// two integer operations and no shuffle (vpmovzxwd costs a shuffle a vector).
__attribute__((target("avx2"))) inline void Bf16Pair(const Bf16Bits* p, __m256& even, __m256& odd) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// WeightedValuesAvx512's order on AVX2, over positions [p0, p1) and the 8 * NV columns of each
// head from c0: G heads x NV vectors of 8 columns in ymm accumulators (at most 12), each starting
// from +0 when p0 == 0 or else from what out holds (the same chain, continued), so that a run of
// positions at a time keeps a few value blocks in cache while every head of an item passes over
// them. a_u = a + u * len; head u's columns at rows(p) + v_off[u] + c0 and out + u * out_stride +
// c0. On a bf16 cache each pair of vectors holds 16 columns as the even and the odd ones
// (Bf16Pair); only the registers differ, never a column's chain.
template <int NV, int G, typename Rows>
__attribute__((target("avx2"))) void WeightedValuesAvx2(const float* a, int32_t len, int32_t p0,
                                                        int32_t p1, int32_t c0,
                                                        const int32_t* v_off, const Rows& rows,
                                                        float* out, int32_t out_stride) {
  static_assert(NV * G <= 12, "12 accumulators, the broadcast and a product of 16 ymm registers");
  // A bf16 cache's columns in pairs of vectors (even, odd), the last one of an odd NV alone.
  constexpr bool kBf16 =
      std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(rows(0))>>, Bf16Bits>;
  constexpr int kPairs = kBf16 ? NV / 2 : 0;
  __m256 acc[G][NV];
  for (int u = 0; u < G; ++u) {
    const float* o = out + static_cast<size_t>(u) * out_stride + c0;
    for (int j = 0; j < NV; ++j) acc[u][j] = _mm256_setzero_ps();
    if (p0 == 0) continue;
    for (int i = 0; i < kPairs; ++i) LoadEvenOdd(o + 16 * i, acc[u][2 * i], acc[u][2 * i + 1]);
    for (int j = 2 * kPairs; j < NV; ++j) acc[u][j] = _mm256_loadu_ps(o + 8 * j);
  }
  for (int32_t p = p0; p < p1; ++p) {
    const auto* row = rows(p);
    for (int u = 0; u < G; ++u) {
      const __m256 ap = _mm256_set1_ps(a[static_cast<size_t>(u) * len + p]);
      const auto* v = row + v_off[u] + c0;
      if constexpr (kBf16) {
        for (int i = 0; i < kPairs; ++i) {
          __m256 even, odd;
          Bf16Pair(v + 16 * i, even, odd);
          acc[u][2 * i] = _mm256_add_ps(acc[u][2 * i], _mm256_mul_ps(ap, even));
          acc[u][2 * i + 1] = _mm256_add_ps(acc[u][2 * i + 1], _mm256_mul_ps(ap, odd));
        }
      }
      for (int j = 2 * kPairs; j < NV; ++j)
        acc[u][j] = _mm256_add_ps(acc[u][j], _mm256_mul_ps(ap, Load8(v + 8 * j)));
    }
  }
  for (int u = 0; u < G; ++u) {
    float* o = out + static_cast<size_t>(u) * out_stride + c0;
    for (int i = 0; i < kPairs; ++i) StoreEvenOdd(acc[u][2 * i], acc[u][2 * i + 1], o + 16 * i);
    for (int j = 2 * kPairs; j < NV; ++j) _mm256_storeu_ps(o + 8 * j, acc[u][j]);
  }
}

// out[u * head_dim + i] for u < heads, i < head_dim (a multiple of 8): the weighted value sums of
// WeightedValuesAvx512's order on AVX2, positions outer and every head of the item inner, so that
// each value row is read once, whole and in order (a decode step reads the cache from memory:
// a stream the prefetchers follow). The sums stay in L1 (heads * head_dim floats), a load and a
// store a vector a position. On a bf16 cache the sums of 16 columns are kept in scratch as the
// even and the odd ones (Bf16Pair) and put in order at the end; scratch [heads * head_dim].
template <typename T, typename Rows>
__attribute__((target("avx2"))) void WeightedValuesAvx2Stream(int32_t heads, int32_t head_dim,
                                                              const float* a, int32_t len,
                                                              const int32_t* v_off,
                                                              const Rows& rows, float* out,
                                                              float* scratch) {
  constexpr bool kBf16 = std::is_same_v<T, Bf16Bits>;
  const int32_t paired = kBf16 ? head_dim - head_dim % 16 : 0;  // columns kept even/odd
  float* acc = kBf16 ? scratch : out;
  std::fill(acc, acc + static_cast<size_t>(heads) * head_dim, 0.0f);
  for (int32_t p = 0; p < len; ++p) {
    const T* row = rows(p);
    for (int32_t u = 0; u < heads; ++u) {
      const __m256 ap = _mm256_set1_ps(a[static_cast<size_t>(u) * len + p]);
      const T* v = row + v_off[u];
      float* o = acc + static_cast<size_t>(u) * head_dim;
      int32_t c = 0;
      if constexpr (kBf16) {
        for (; c < paired; c += 16) {
          __m256 even, odd;
          Bf16Pair(v + c, even, odd);
          _mm256_storeu_ps(o + c, _mm256_add_ps(_mm256_loadu_ps(o + c), _mm256_mul_ps(ap, even)));
          _mm256_storeu_ps(o + c + 8,
                           _mm256_add_ps(_mm256_loadu_ps(o + c + 8), _mm256_mul_ps(ap, odd)));
        }
      }
      for (; c < head_dim; c += 8)
        _mm256_storeu_ps(o + c,
                         _mm256_add_ps(_mm256_loadu_ps(o + c), _mm256_mul_ps(ap, Load8(v + c))));
    }
  }
  if constexpr (kBf16) {
    for (int32_t u = 0; u < heads; ++u) {
      const float* o = acc + static_cast<size_t>(u) * head_dim;
      float* d = out + static_cast<size_t>(u) * head_dim;
      for (int32_t c = 0; c < paired; c += 16)
        StoreEvenOdd(_mm256_loadu_ps(o + c), _mm256_loadu_ps(o + c + 8), d + c);
      std::copy(o + paired, o + head_dim, d + paired);
    }
  }
}

// Positions a WeightedValuesAvx2 call covers: 32 rows of a 64-wide fp32 head are 8 KiB a head.
constexpr int32_t kValuePositionRun = 32;

// heads consecutive heads of head_dim = 8 * nv columns through WeightedValuesAvx2: groups of
// 12 / NV heads where a head fits in 12 accumulators (NV = nv), else each head in column slices
// of 8 vectors (NV = 8, then the rest); the positions a run at a time.
template <int NV, typename Rows>
void WeightedValuesAvx2Slices(int32_t heads, int32_t head_dim, const float* a, int32_t len,
                              int32_t p0, int32_t p1, int32_t c0, const int32_t* v_off,
                              const Rows& rows, float* out) {
  constexpr int kG = 12 / NV;
  int32_t u = 0;
  for (; u + kG <= heads; u += kG) {
    WeightedValuesAvx2<NV, kG>(a + static_cast<size_t>(u) * len, len, p0, p1, c0, v_off + u, rows,
                               out + static_cast<size_t>(u) * head_dim, head_dim);
  }
  for (; u < heads; ++u) {
    WeightedValuesAvx2<NV, 1>(a + static_cast<size_t>(u) * len, len, p0, p1, c0, v_off + u, rows,
                              out + static_cast<size_t>(u) * head_dim, head_dim);
  }
}

template <typename Rows>
void WeightedValuesAvx2Run(int32_t nv, int32_t heads, int32_t head_dim, const float* a, int32_t len,
                           int32_t p0, int32_t p1, int32_t c0, const int32_t* v_off,
                           const Rows& rows, float* out) {
#define TS_NV(N) \
  case N:        \
    return WeightedValuesAvx2Slices<N>(heads, head_dim, a, len, p0, p1, c0, v_off, rows, out);
  switch (nv) {
    TS_NV(1)
    TS_NV(2)
    TS_NV(3)
    TS_NV(4)
    TS_NV(5)
    TS_NV(6)
    TS_NV(7)
    TS_NV(8)
    TS_NV(9)
    TS_NV(10)
    TS_NV(11)
    TS_NV(12)
    default:
      std::abort();  // nv is 1 ... 12
  }
#undef TS_NV
}

// out[u * head_dim + i] for u < heads, i < head_dim (a multiple of 8): the weighted value sums
// of WeightedValuesAvx512's order, on AVX2.
template <typename Rows>
void WeightedValuesAvx2All(int32_t heads, int32_t head_dim, const float* a, int32_t len,
                           const int32_t* v_off, const Rows& rows, float* out) {
  const int32_t nv = head_dim / 8;
  for (int32_t p0 = 0; p0 < len; p0 += kValuePositionRun) {
    const int32_t p1 = std::min(len, p0 + kValuePositionRun);
    if (nv <= 12) {
      WeightedValuesAvx2Run(nv, heads, head_dim, a, len, p0, p1, 0, v_off, rows, out);
      continue;
    }
    for (int32_t c = 0; c < nv; c += 8) {
      WeightedValuesAvx2Run(std::min<int32_t>(8, nv - c), heads, head_dim, a, len, p0, p1, 8 * c,
                            v_off, rows, out);
    }
  }
}

#endif

// att[u * len + p] = LaneDot(q of head h0 + u, key row p's slice for that head) / denom, for
// u < heads and p < len; key_row(p) is position p's key row (all kv heads). Positions outer, so
// each key row is read once and in order.
template <typename KeyRow>
void ScoresPortable(const float* qt, int32_t h0, int32_t heads, int32_t kv_mul, int32_t head_dim,
                    float denom, int32_t len, const KeyRow& key_row, float* att) {
  for (int32_t p = 0; p < len; ++p) {
    const auto* krow = key_row(p);
    for (int32_t u = 0; u < heads; ++u) {
      const int32_t h = h0 + u;
      att[static_cast<size_t>(u) * len + p] =
          LaneDotPortable(qt + h * head_dim, krow + (h / kv_mul) * head_dim, head_dim) / denom;
    }
  }
}

#if defined(__x86_64__)
template <typename KeyRow>
__attribute__((target("avx2"))) void ScoresAvx2(const float* qt, int32_t h0, int32_t heads,
                                                int32_t kv_mul, int32_t head_dim, float denom,
                                                int32_t len, const KeyRow& key_row, float* att) {
  int32_t p = 0;
  if (head_dim % 8 == 0) {
    // Eight positions at a time: eight keys' lane sums side by side, then their eight horizontal
    // sums in one transposing reduction (LaneDotAvx2's tree, each sum in its own lane) and one
    // vector division. The same bits as one position at a time, with the reduction's latency
    // shared by eight keys.
    const __m256 vdenom = _mm256_set1_ps(denom);
    for (; p + 8 <= len; p += 8) {
      decltype(key_row(0)) rows[8];
      for (int j = 0; j < 8; ++j) rows[j] = key_row(p + j);
      for (int32_t u = 0; u < heads; ++u) {
        const int32_t h = h0 + u;
        const float* qh = qt + h * head_dim;
        const int32_t off = (h / kv_mul) * head_dim;
        __m256 lane[8];
        for (int j = 0; j < 8; ++j) lane[j] = _mm256_setzero_ps();
        for (int32_t i = 0; i < head_dim; i += 8) {
          const __m256 qv = _mm256_loadu_ps(qh + i);
          for (int j = 0; j < 8; ++j)
            lane[j] = _mm256_add_ps(lane[j], _mm256_mul_ps(qv, Load8(rows[j] + off + i)));
        }
        const __m256 sums = HorizontalSums8(lane);
        _mm256_storeu_ps(att + static_cast<size_t>(u) * len + p, _mm256_div_ps(sums, vdenom));
      }
    }
  }
  for (; p < len; ++p) {
    const auto* krow = key_row(p);
    for (int32_t u = 0; u < heads; ++u) {
      const int32_t h = h0 + u;
      att[static_cast<size_t>(u) * len + p] =
          LaneDotAvx2(qt + h * head_dim, krow + (h / kv_mul) * head_dim, head_dim) / denom;
    }
  }
}

// WeightedValuesGroups<nv> for 1 <= nv <= kMaxValueVectors (head_dim 16 ... 128).
constexpr int32_t kMaxValueVectors = 8;
template <typename Rows>
void WeightedValues(int32_t nv, int32_t heads, const float* a, int32_t len, const int32_t* v_off,
                    const Rows& rows, float* out) {
  switch (nv) {
    case 1:
      return WeightedValuesGroups<1>(heads, a, len, v_off, rows, out);
    case 2:
      return WeightedValuesGroups<2>(heads, a, len, v_off, rows, out);
    case 3:
      return WeightedValuesGroups<3>(heads, a, len, v_off, rows, out);
    case 4:
      return WeightedValuesGroups<4>(heads, a, len, v_off, rows, out);
    case 5:
      return WeightedValuesGroups<5>(heads, a, len, v_off, rows, out);
    case 6:
      return WeightedValuesGroups<6>(heads, a, len, v_off, rows, out);
    case 7:
      return WeightedValuesGroups<7>(heads, a, len, v_off, rows, out);
    case 8:
      return WeightedValuesGroups<8>(heads, a, len, v_off, rows, out);
    default:
      std::abort();  // callers check nv first
  }
}
#else
template <typename KeyRow>
void ScoresAvx2(const float* qt, int32_t h0, int32_t heads, int32_t kv_mul, int32_t head_dim,
                float denom, int32_t len, const KeyRow& key_row, float* att) {
  ScoresPortable(qt, h0, heads, kv_mul, head_dim, denom, len, key_row, att);
}
constexpr int32_t kMaxValueVectors = 0;
template <typename Rows>
void WeightedValues(int32_t, int32_t, const float*, int32_t, const int32_t*, const Rows&, float*) {
  std::abort();  // never called: kMaxValueVectors is 0
}
template <typename Rows>
void WeightedValuesAvx2All(int32_t, int32_t, const float*, int32_t, const int32_t*, const Rows&,
                           float*) {
  std::abort();  // never called: no AVX2 off x86-64
}
template <typename T, typename Rows>
void WeightedValuesAvx2Stream(int32_t, int32_t, const float*, int32_t, const int32_t*, const Rows&,
                              float*, float*) {
  std::abort();  // never called: no AVX2 off x86-64
}
#endif

// Heads of one attention work item the vector value path takes (more: the portable loops).
constexpr int32_t kMaxHeads = 256;

// The widest attention kernels the CPU backend may use (SetCpuAttentionIsaForTesting): 2 =
// AVX-512 where the CPU has it, 1 = AVX2 at most, 0 = the portable loops.
int g_attention_isa = 2;

class CpuBackend final : public Backend {
 public:
  CpuBackend(int num_threads, DType kv_dtype) : kv_dtype_(kv_dtype) {
    if (kv_dtype != DType::kFloat32 && kv_dtype != DType::kBFloat16) {
      std::fprintf(stderr, "tinyserve: the CPU backend's KV cache is float32 or bfloat16, not %s\n",
                   DTypeName(kv_dtype));
      std::abort();
    }
    if (num_threads <= 0)
      num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    num_threads_ = num_threads;
    pool_ = std::make_unique<ThreadPool>(num_threads_);
  }

  std::string name() const override {
    return "cpu (fp32" + std::string(kv_dtype_ == DType::kBFloat16 ? ", bf16 KV cache" : "") +
           ", " + std::to_string(num_threads_) + " threads, packed " + PackedGemmIsa() +
           " gemm, batch-invariant)";
  }

  DType kv_cache_dtype() const override { return kv_dtype_; }

  bool is_host() const override { return true; }

  void* Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    // 64-byte alignment for vector loads; calloc-like zeroing. Buffers of 2 MiB and more are
    // 2 MiB-aligned and asked to be backed by transparent huge pages (before the first touch):
    // streaming hundreds of MB of weights per token through 4 KiB pages costs a TLB miss a page.
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t align = bytes >= kHuge ? kHuge : 64;
    const size_t rounded = (bytes + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (p == nullptr) return nullptr;
    if (align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);
    std::memset(p, 0, rounded);
    return p;
  }
  void Deallocate(void* ptr) override { std::free(ptr); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  Status Synchronize() override { return Status::Ok(); }

  void Embedding(const float* table, const int32_t* ids, int32_t n, int32_t dim,
                 float* out) override {
    for (int32_t t = 0; t < n; ++t) {
      std::memcpy(out + static_cast<size_t>(t) * dim, table + static_cast<size_t>(ids[t]) * dim,
                  sizeof(float) * dim);
    }
  }

  // Norms are shared out from this many elements: a batch-32 decode step's (32 x 768 for
  // stories110M) were ~1% of the step on one thread while the other waited.
  static constexpr int64_t kShareNormsFrom = 16384;

  void RmsNorm(const float* x, const float* weight, int32_t n, int32_t dim, float eps,
               float* out) override {
    const int32_t groups = (n + kNormRows - 1) / kNormRows;
    For(static_cast<int64_t>(n) * dim > kShareNormsFrom, groups, [&](int64_t g) {
      const size_t first = static_cast<size_t>(g) * kNormRows * dim;
      const int32_t count = std::min<int32_t>(kNormRows, n - static_cast<int32_t>(g) * kNormRows);
      RmsNormRowGroup(x + first, weight, count, dim, eps, out + first);
    });
  }

  void AddRmsNorm(float* residual, const float* delta, const float* weight, int32_t n, int32_t dim,
                  float eps, float* out) override {
    const int32_t groups = (n + kNormRows - 1) / kNormRows;
    For(static_cast<int64_t>(n) * dim > kShareNormsFrom, groups, [&](int64_t g) {
      const size_t first = static_cast<size_t>(g) * kNormRows * dim;
      const int32_t count = std::min<int32_t>(kNormRows, n - static_cast<int32_t>(g) * kNormRows);
      float* r = residual + first;
      const float* d = delta + first;
      for (size_t j = 0; j < static_cast<size_t>(count) * dim; ++j) r[j] += d[j];
      RmsNormRowGroup(r, weight, count, dim, eps, out + first);
    });
  }

  // The weights are packed once here, for the GEMM (panel16 layout, packed_gemm.h).
  WeightRef UploadMatrix(const float* host, int32_t rows, int32_t cols) override {
    void* p = Allocate(PackedFloats(rows, cols) * sizeof(float));
    if (p == nullptr) return {};
    PackPanels(host, rows, cols, static_cast<float*>(p));
    return {p, DType::kFloat32, WeightLayout::kPanel16, rows, cols};
  }

  // Quantized weights stay where they are (a mapped GGUF file) and are read there, except Q8_0,
  // Q4_K and Q6_K parts of whole groups of 8 rows, which the SIMD kernels read from an
  // interleaved copy made here (RepackRows8: Q4_K 2.8% larger than its blocks, the others the
  // same size; the original stays for the embedding and the portable path). One allocation holds
  // the header and the copies.
  WeightRef UploadQuantMatrix(const QuantPart* parts, int32_t num_parts, int32_t cols) override {
    if (num_parts < 1 || num_parts > QuantMatrix::kMaxParts) return {};
    auto interleaved = [&](int32_t p) {
      return HasRows8Layout(parts[p].type) && parts[p].rows > 0 && parts[p].rows % 8 == 0;
    };
    constexpr size_t kHeader = (sizeof(QuantMatrix) + 63) / 64 * 64;
    size_t bytes = kHeader;
    for (int32_t p = 0; p < num_parts; ++p) {
      if (interleaved(p)) bytes += Rows8Bytes(parts[p].type, parts[p].rows, cols);
    }
    auto* base = static_cast<uint8_t*>(Allocate(bytes));
    if (base == nullptr) return {};
    auto* h = new (base) QuantMatrix{};
    h->cols = cols;
    h->num_parts = num_parts;
    uint8_t* copy = base + kHeader;
    for (int32_t p = 0; p < num_parts; ++p) {
      const auto* blocks = static_cast<const uint8_t*>(parts[p].blocks);
      h->parts[p] = {parts[p].type, blocks, parts[p].rows};
      if (interleaved(p)) {
        RepackRows8(parts[p].type, blocks, parts[p].rows, cols, copy);
        h->parts[p].rows8 = copy;
        copy += Rows8Bytes(parts[p].type, parts[p].rows, cols);
      }
      h->rows += parts[p].rows;
    }
    return {h, DType::kFloat32, WeightLayout::kGgmlBlocks, h->rows, cols};
  }

  void Linear(const float* x, WeightRef w, int32_t m, int32_t n, int32_t k, float* y) override {
    if (w.layout == WeightLayout::kGgmlBlocks) {
      QuantLinear(x, *static_cast<const QuantMatrix*>(w.data), m, y,
                  [this](int64_t items, const std::function<void(int64_t)>& fn) {
                    pool_->ParallelFor(items, fn);
                  });
      return;
    }
    if (w.layout != WeightLayout::kPanel16) {
      Gemm(x, static_cast<const float*>(w.data), m, n, k, y);
      return;
    }
    PackedGemm(x, static_cast<const float*>(w.data), m, n, k, y);
  }

  void EmbeddingLookup(WeightRef table, const int32_t* ids, int32_t n, int32_t dim,
                       float* out) override {
    if (table.layout == WeightLayout::kGgmlBlocks) {
      QuantEmbedding(*static_cast<const QuantMatrix*>(table.data), ids, n, out);
      return;
    }
    if (table.layout != WeightLayout::kPanel16) {
      Embedding(static_cast<const float*>(table.data), ids, n, dim, out);
      return;
    }
    const float* packed = static_cast<const float*>(table.data);
    for (int32_t t = 0; t < n; ++t)
      UnpackRow(packed, dim, ids[t], out + static_cast<size_t>(t) * dim);
  }

  // A row-major w is packed first (tests and tools; the model's weights come packed).
  void Gemm(const float* x, const float* w, int32_t m, int32_t n, int32_t k, float* y) override {
    if (m <= 0 || n <= 0) return;
    const size_t floats = PackedFloats(n, k);
    if (gemm_scratch_floats_ < floats) {
      gemm_scratch_.reset(static_cast<float*>(Allocate(floats * sizeof(float))));
      gemm_scratch_floats_ = gemm_scratch_ ? floats : 0;
      if (!gemm_scratch_) {  // no memory for a packed copy: the order contract, unpacked
        GemmReference(x, w, m, n, k, y);
        return;
      }
    }
    PackPanels(w, n, k, gemm_scratch_.get());
    PackedGemm(x, gemm_scratch_.get(), m, n, k, y);
  }

  void AddBias(float* y, const float* bias, int32_t m, int32_t n) override {
    For(static_cast<int64_t>(m) * n > 65536, m, [&](int64_t i) {
      float* row = y + i * n;
      for (int32_t j = 0; j < n; ++j) row[j] += bias[j];
    });
  }

  void Rope(float* q, int32_t q_stride, float* k, int32_t k_stride, const int32_t* positions,
            int32_t n, int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
            const float* inv_freq, RopeStyle style) override {
    const bool parallel = static_cast<int64_t>(n) * (num_heads + num_kv_heads) * head_dim > 65536;
    For(parallel, n, [&](int64_t t) {
      RopeToken(q + t * q_stride, k + t * k_stride, positions[t], num_heads, num_kv_heads, head_dim,
                inv_freq, style);
    });
  }

  void WriteKvCache(const float* k, const float* v, int32_t stride, const int64_t* slots, int32_t n,
                    int32_t kv_width, void* k_cache_raw, void* v_cache_raw,
                    KvScales /*scales: the CPU has no fp8 cache*/) override {
    // Rows are independent (a slot is written by one token): a prefill's rows shared out.
    For(static_cast<int64_t>(n) * kv_width > 65536, n, [&](int64_t t) {
      WriteKvRow(k + static_cast<size_t>(t) * stride, v + static_cast<size_t>(t) * stride, slots[t],
                 kv_width, k_cache_raw, v_cache_raw);
    });
  }

  // Decode steps (every sequence one query token, at least 8 of them: the attention's work item
  // is a token, all its heads) fuse the three: each item ropes its token's q and k, writes its
  // k and v row, then attends, so the rope and the cache writes are shared out over the threads
  // with the attention instead of running before it on one. A token's item reads only its own
  // sequence's rows, the row it wrote last; each step is the unfused ops' arithmetic, so the
  // bits are the same (CpuAttentionTest.FusedRopeWriteAndAttendGivesTheBitsOfTheOpsInTurn).
  // Other steps run the three in turn.
  void RopeWriteKvAndAttend(float* q, float* k, const float* v, int32_t stride,
                            const int64_t* slots, const AttentionMetadata& meta, int32_t num_heads,
                            int32_t num_kv_heads, int32_t head_dim, const float* inv_freq,
                            RopeStyle style, void* k_cache, void* v_cache, float* out,
                            KvScales scales) override {
    bool decode = meta.num_tokens >= kTokensPerItemFrom && meta.num_tokens == meta.num_seqs;
    for (int32_t s = 0; decode && s < meta.num_seqs; ++s)
      decode = meta.query_start[s + 1] - meta.query_start[s] == 1;
    if (!decode) {
      Backend::RopeWriteKvAndAttend(q, k, v, stride, slots, meta, num_heads, num_kv_heads, head_dim,
                                    inv_freq, style, k_cache, v_cache, out, scales);
      return;
    }
    const int32_t kv_width = num_kv_heads * head_dim;
    const std::function<void(int32_t)> prepare = [&](int32_t t) {
      float* kt = k + static_cast<size_t>(t) * stride;
      RopeToken(q + static_cast<size_t>(t) * stride, kt, meta.positions[t], num_heads, num_kv_heads,
                head_dim, inv_freq, style);
      WriteKvRow(kt, v + static_cast<size_t>(t) * stride, slots[t], kv_width, k_cache, v_cache);
    };
    if (kv_dtype_ == DType::kBFloat16) {
      Attend(q, stride, static_cast<const Bf16Bits*>(k_cache),
             static_cast<const Bf16Bits*>(v_cache), meta, num_heads, num_kv_heads, head_dim, out,
             &prepare);
    } else {
      Attend(q, stride, static_cast<const float*>(k_cache), static_cast<const float*>(v_cache),
             meta, num_heads, num_kv_heads, head_dim, out, &prepare);
    }
  }

  void PagedAttention(const float* q, int32_t q_stride, const void* k_cache, const void* v_cache,
                      const AttentionMetadata& meta, int32_t num_heads, int32_t num_kv_heads,
                      int32_t head_dim, float* out, KvScales /*scales: no fp8 cache*/) override {
    if (kv_dtype_ == DType::kBFloat16) {
      Attend(q, q_stride, static_cast<const Bf16Bits*>(k_cache),
             static_cast<const Bf16Bits*>(v_cache), meta, num_heads, num_kv_heads, head_dim, out);
    } else {
      Attend(q, q_stride, static_cast<const float*>(k_cache), static_cast<const float*>(v_cache),
             meta, num_heads, num_kv_heads, head_dim, out);
    }
  }

  void SiluAndMul(const float* gate_up, int32_t n, int32_t hidden, float* out) override {
    // An exp per element: worth sharing from a few thousand (a batch-32 decode step has 65536).
    For(n > 1 && static_cast<int64_t>(n) * hidden >= 8192, n, [&](int64_t t) {
      const float* g = gate_up + t * 2 * hidden;
      SiluAndMulRow(g, g + hidden, hidden, out + t * hidden);
    });
  }

  // Sampling and scoring: the default's CPU sampler, its rows shared out over the pool. A row's
  // token and logprobs depend on nothing but that row, its spec and history (cpu_sampler.h), so
  // which thread takes it changes no result; each thread has its own sampler (Backend's
  // per-thread one) and the rows' inputs are only read.
  Status SampleRows(const float* logits, int32_t vocab, const SampleRow* rows, int32_t n,
                    TokenLogprobs* out) override {
    if (!ShareRows(n, vocab)) return Backend::SampleRows(logits, vocab, rows, n, out);
    return EachRow(n, [&](int64_t i) {
      return Backend::SampleRows(logits + i * vocab, vocab, rows + i, 1, out + i);
    });
  }
  Status ScoreRows(const float* logits, int32_t vocab, const int32_t* targets,
                   const int32_t* num_top, int32_t n, TokenLogprobs* out) override {
    if (!ShareRows(n, vocab)) return Backend::ScoreRows(logits, vocab, targets, num_top, n, out);
    return EachRow(n, [&](int64_t i) {
      return Backend::ScoreRows(logits + i * vocab, vocab, targets + i, num_top + i, 1, out + i);
    });
  }

  void GatherRows(const float* x, const int32_t* rows, int32_t m, int32_t dim,
                  float* out) override {
    for (int32_t i = 0; i < m; ++i) {
      std::memcpy(out + static_cast<size_t>(i) * dim, x + static_cast<size_t>(rows[i]) * dim,
                  sizeof(float) * dim);
    }
  }

  void AbsMax(const float* x, int32_t n, int32_t cols, int32_t stride, float* out) override {
    float m = 0.0f;
    for (int32_t t = 0; t < n; ++t) {
      const float* row = x + static_cast<size_t>(t) * stride;
      for (int32_t c = 0; c < cols; ++c) m = std::fmax(m, std::fabs(row[c]));
    }
    out[0] = m;
  }

 private:
  // Attention work items hold all of a token's heads from this many tokens (else one head each).
  static constexpr int32_t kTokensPerItemFrom = 8;

  // Rope on one token's q heads [num_heads, head_dim] and k heads [num_kv_heads, head_dim].
  static void RopeToken(float* qt, float* kt, int32_t pos, int32_t num_heads, int32_t num_kv_heads,
                        int32_t head_dim, const float* inv_freq, RopeStyle style) {
    const int32_t half = head_dim / 2;
    thread_local std::vector<float> cosv, sinv;
    cosv.resize(half);
    sinv.resize(half);
    for (int32_t i = 0; i < half; ++i) {
      // As run.c and HF: angle = pos * inv_freq, in float.
      const float val = static_cast<float>(pos) * inv_freq[i];
      cosv[i] = std::cos(val);
      sinv[i] = std::sin(val);
    }
    auto rotate = [&](float* head) {
      for (int32_t i = 0; i < half; ++i) {
        const int32_t a = style == RopeStyle::kInterleaved ? 2 * i : i;
        const int32_t b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
        const float v0 = head[a], v1 = head[b];
        head[a] = v0 * cosv[i] - v1 * sinv[i];
        head[b] = v0 * sinv[i] + v1 * cosv[i];
      }
    };
    for (int32_t h = 0; h < num_heads; ++h) rotate(qt + h * head_dim);
    for (int32_t h = 0; h < num_kv_heads; ++h) rotate(kt + h * head_dim);
  }

  // One token's k and v rows [kv_width] into the caches at `slot` (skipped when slot < 0).
  void WriteKvRow(const float* kt, const float* vt, int64_t slot, int32_t kv_width,
                  void* k_cache_raw, void* v_cache_raw) const {
    if (slot < 0) return;
    if (kv_dtype_ == DType::kBFloat16) {
      Bf16Bits* kc = static_cast<Bf16Bits*>(k_cache_raw) + slot * kv_width;
      Bf16Bits* vc = static_cast<Bf16Bits*>(v_cache_raw) + slot * kv_width;
      for (int32_t i = 0; i < kv_width; ++i) {
        kc[i] = F32ToBf16(kt[i]);
        vc[i] = F32ToBf16(vt[i]);
      }
    } else {
      std::memcpy(static_cast<float*>(k_cache_raw) + slot * kv_width, kt, sizeof(float) * kv_width);
      std::memcpy(static_cast<float*>(v_cache_raw) + slot * kv_width, vt, sizeof(float) * kv_width);
    }
  }

  // PagedAttention over a cache of T (float, or Bf16Bits when kv_cache_dtype() is bf16).
  // `prepare` (null: none) runs first in each work item, with its token: only when an item holds
  // all of a token's heads (RopeWriteKvAndAttend).
  template <typename T>
  void Attend(const float* q, int32_t q_stride, const T* k_cache, const T* v_cache,
              const AttentionMetadata& meta, int32_t num_heads, int32_t num_kv_heads,
              int32_t head_dim, float* out, const std::function<void(int32_t)>* prepare = nullptr) {
    const int32_t kv_mul = num_heads / num_kv_heads;
    const int32_t kv_width = num_kv_heads * head_dim;
    const float denom = std::sqrt(static_cast<float>(head_dim));
    const int32_t bs = meta.block_size;
    const size_t table_stride = static_cast<size_t>(
        meta.table_stride != nullptr ? *meta.table_stride : meta.max_blocks_per_seq);
    // Row -> sequence map, so (token, head) pairs can be spread over threads evenly.
    std::vector<int32_t> seq_of(meta.num_tokens);
    for (int32_t s = 0; s < meta.num_seqs; ++s) {
      for (int32_t t = meta.query_start[s]; t < meta.query_start[s + 1]; ++t) seq_of[t] = s;
    }
    // A work item is (token, a run of heads_per_item heads). Many tokens: all heads of a token
    // in one item, so each key and value row (every head's, contiguous) is read once and in
    // order; few tokens (decode at small batch): one head per item, so the threads share them.
    // Every head's arithmetic is the same either way (the bits do not depend on the grouping).
    const int32_t heads_per_item = meta.num_tokens >= kTokensPerItemFrom ? num_heads : 1;
    const int32_t items_per_token = num_heads / heads_per_item;
    const int64_t work = static_cast<int64_t>(meta.num_tokens) * items_per_token;
    // Threads only when there is enough to share: each parallel region costs a barrier.
    int64_t flops = 0;
    for (int32_t t = 0; t < meta.num_tokens; ++t) flops += meta.positions[t] + 1;
    flops *= 4LL * num_heads * head_dim;
#if defined(__x86_64__)
    const bool avx2 = g_attention_isa >= 1 && __builtin_cpu_supports("avx2");
    const bool avx512 = g_attention_isa >= 2 && __builtin_cpu_supports("avx512f");
#else
    const bool avx2 = false, avx512 = false;
#endif
    // The values in registers (a group of heads at a time) where AVX-512 and head_dim allow,
    // else on AVX2 where head_dim is a multiple of 8.
    const int32_t value_vectors = avx512 && head_dim % 16 == 0 &&
                                          head_dim / 16 <= kMaxValueVectors &&
                                          heads_per_item <= kMaxHeads
                                      ? head_dim / 16
                                      : 0;
    const bool avx2_values =
        value_vectors == 0 && avx2 && head_dim % 8 == 0 && heads_per_item <= kMaxHeads;
    For(flops > 200000, work, [&](int64_t wi) {
      thread_local std::vector<float> att;       // [heads_per_item, len]
      thread_local std::vector<int64_t> row_at;  // [len]: position p's row offset in the caches
      const int32_t t = static_cast<int32_t>(wi / items_per_token);
      const int32_t h0 = static_cast<int32_t>(wi % items_per_token) * heads_per_item;
      if (prepare != nullptr) (*prepare)(t);
      const int32_t* table = meta.block_tables + seq_of[t] * table_stride;
      const int32_t len = meta.positions[t] + 1;
      att.resize(static_cast<size_t>(heads_per_item) * len);
      row_at.resize(len);
      for (int32_t p = 0; p < len; ++p) {
        row_at[p] = (static_cast<int64_t>(table[p / bs]) * bs + p % bs) * kv_width;
      }
      const float* qt = q + static_cast<size_t>(t) * q_stride;
      const auto key_row = [&](int32_t p) { return k_cache + row_at[p]; };
      if (avx2) {
        ScoresAvx2(qt, h0, heads_per_item, kv_mul, head_dim, denom, len, key_row, att.data());
      } else {
        ScoresPortable(qt, h0, heads_per_item, kv_mul, head_dim, denom, len, key_row, att.data());
      }
      SoftmaxRows(att.data(), heads_per_item, len);
      float* ot = out + static_cast<size_t>(t) * num_heads * head_dim;
      if (value_vectors > 0 || avx2_values) {
        int32_t v_off[kMaxHeads];
        for (int32_t u = 0; u < heads_per_item; ++u) v_off[u] = ((h0 + u) / kv_mul) * head_dim;
        const auto value_row = [&](int32_t p) { return v_cache + row_at[p]; };
        float* oh = ot + h0 * head_dim;
        // AVX2: a decode token (its sequence's only query) reads the cache from memory once, so
        // it streams every head of a row at a time, in order; a prompt's tokens share their
        // sequence's cache from L2: a head at a time in registers, a run of positions at a time.
        const bool stream = heads_per_item > 1 &&
                            meta.query_start[seq_of[t] + 1] - meta.query_start[seq_of[t]] == 1;
        if (value_vectors > 0) {
          WeightedValues(value_vectors, heads_per_item, att.data(), len, v_off, value_row, oh);
        } else if (stream) {
          thread_local std::vector<float> scratch;
          scratch.resize(static_cast<size_t>(heads_per_item) * head_dim);
          WeightedValuesAvx2Stream<T>(heads_per_item, head_dim, att.data(), len, v_off, value_row,
                                      oh, scratch.data());
        } else {
          WeightedValuesAvx2All(heads_per_item, head_dim, att.data(), len, v_off, value_row, oh);
        }
        return;
      }
      // Portable: positions outer, so each value row (every head's) is read once and in order.
      for (int32_t u = 0; u < heads_per_item; ++u) {
        float* oh = ot + (h0 + u) * head_dim;
        std::fill(oh, oh + head_dim, 0.0f);
      }
      for (int32_t p = 0; p < len; ++p) {
        const T* vrow = v_cache + row_at[p];
        for (int32_t u = 0; u < heads_per_item; ++u) {
          const int32_t h = h0 + u;
          AxpyPortable(att[static_cast<size_t>(u) * len + p], vrow + (h / kv_mul) * head_dim,
                       head_dim, ot + h * head_dim);
        }
      }
    });
  }

  // y = x * w^T over packed w: the pool's threads take contiguous runs of output panels (never
  // a share of k). A thread descheduled inside a long first run holds the region back by what is
  // left of that run: the price of the longer runs (fixed short ranges limited it to one range).
  void PackedGemm(const float* x, const float* packed, int32_t m, int32_t n, int32_t k, float* y) {
    if (m <= 0 || n <= 0) return;
    const int32_t panels = NumPanels(n);
    const double flops = 2.0 * m * n * k;
    if (flops < 2e5 || num_threads_ == 1 || panels == 1) {
      GemmPackedPanels(x, packed, m, n, k, 0, panels, y);
      return;
    }
    // Guided self-scheduling: a thread takes the next contiguous run of whole panel groups
    // (PackedGemmGroupPanels), its share of what is left (at least one group), so the first runs
    // are long (each run's first group is read cold; the later ones come prefetched) and the last
    // short (the threads finish together). On Zen 5, fixed ranges (8 a thread) were 1.4-5.5%
    // slower (batch-32 decode, offline 32 x (128 + 128)), and half a share a run ~2% slower in
    // batch-32 decode. Which thread computes a panel changes no bits.
    const int32_t group = PackedGemmGroupPanels(m);
    const int32_t nt = num_threads_;
    std::atomic<int32_t> next{0};
    // The next run is claimed when the current one's last group starts, which then prefetches
    // the next run's first group (as it prefetches the next group inside a run).
    auto claim = [&](int32_t* pb0, int32_t* pb1) {
      int32_t at = next.load(std::memory_order_relaxed), take = 0;
      do {
        const int32_t left = panels - at;
        if (left <= 0) {
          *pb0 = *pb1 = panels;
          return;
        }
        take = std::min(left, std::max(group, left / nt / group * group));
      } while (!next.compare_exchange_weak(at, at + take, std::memory_order_relaxed));
      *pb0 = at;
      *pb1 = at + take;
    };
    pool_->ParallelFor(nt, [&](int64_t) {
      int32_t pb0 = 0, pb1 = 0;
      claim(&pb0, &pb1);
      while (pb0 < pb1) {
        const int32_t last = pb0 + (pb1 - pb0 - 1) / group * group;  // the run's last group
        if (last > pb0) GemmPackedPanels(x, packed, m, n, k, pb0, last, y, last, pb1);
        int32_t nb0 = 0, nb1 = 0;
        claim(&nb0, &nb1);
        GemmPackedPanels(x, packed, m, n, k, last, pb1, y, nb0, nb1);
        pb0 = nb0;
        pb1 = nb1;
      }
    });
  }

  // Whether n rows of vocab logits are worth a parallel region (each costs a hand-over).
  bool ShareRows(int32_t n, int32_t vocab) const {
    return num_threads_ > 1 && n > 1 && static_cast<int64_t>(n) * vocab >= 65536;
  }
  // Runs row(i) for i in [0, n) on the pool and returns the first error in row order. An
  // exception (an allocation failing) is caught on the thread that ran the row, where it would
  // otherwise end the process, and comes back as that row's error.
  Status EachRow(int32_t n, const std::function<Status(int64_t)>& row) {
    std::vector<Status> status(n);
    pool_->ParallelFor(n, [&](int64_t i) {
      try {
        status[i] = row(i);
      } catch (const std::bad_alloc&) {
        status[i] = ResourceExhausted("out of memory sampling a row");
      } catch (const std::exception& e) {
        status[i] = Internal(std::string("sampling a row: ") + e.what());
      }
    });
    for (const Status& s : status) {
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  // Runs fn(i) for i in [0, n) on the pool when `parallel`, else inline: each parallel region
  // costs a hand-over, so small ops stay on the calling thread.
  void For(bool parallel, int64_t n, const std::function<void(int64_t)>& fn) {
    if (parallel) {
      pool_->ParallelFor(n, fn);
    } else {
      for (int64_t i = 0; i < n; ++i) fn(i);
    }
  }

  struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
  };

  DType kv_dtype_ = DType::kFloat32;
  int num_threads_ = 1;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<float, FreeDeleter> gemm_scratch_;  // Gemm's packed copy of w
  size_t gemm_scratch_floats_ = 0;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(int num_threads, DType kv_cache_dtype) {
  return std::make_unique<CpuBackend>(num_threads, kv_cache_dtype);
}

bool SetCpuAttentionIsaForTesting(const char* isa) {
  const std::string_view want(isa);
  if (want == "best" || want == "portable") {
    g_attention_isa = want == "best" ? 2 : 0;
    return true;
  }
#if defined(__x86_64__)
  if (want == "avx512" && __builtin_cpu_supports("avx512f")) {
    g_attention_isa = 2;
    return true;
  }
  if (want == "avx2" && __builtin_cpu_supports("avx2")) {
    g_attention_isa = 1;
    return true;
  }
#endif
  return false;
}

}  // namespace tinyserve
