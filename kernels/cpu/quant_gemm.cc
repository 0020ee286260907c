#include "kernels/cpu/quant_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace tinyserve {
namespace {

#if defined(__x86_64__) || defined(__i386__)
#define TINYSERVE_QUANT_X86 1
#endif

#ifdef TINYSERVE_QUANT_X86
__attribute__((target("avx2"))) inline int32_t Hsum128(__m128i v) {
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1));
  return _mm_cvtsi128_si32(v);
}

__attribute__((target("avx2"))) inline __m256i SignedDot32(__m256i w, __m256i x) {
  // sum of w * x per int32 lane (4 bytes each): |w| * (x * sign(w)), exact for w, x in
  // [-128, 127] x [-127, 127].
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

__attribute__((target("avx2"))) inline int32_t Hsum256(__m256i v) {
  return Hsum128(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

__attribute__((target("avx2"))) void DotsQ8_0Avx2(const uint8_t* w, const int8_t* xq, int64_t k,
                                                  int32_t* dots) {
  for (int64_t b = 0; b < k / 32; ++b, w += 34, xq += 32) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
    dots[b] = Hsum256(SignedDot32(wv, xv));
  }
}

__attribute__((target("avx2"))) void DotsQ4_0Avx2(const uint8_t* w, const int8_t* xq, int64_t k,
                                                  int32_t* dots) {
  const __m128i m4 = _mm_set1_epi8(0x0f);
  const __m256i eight = _mm256_set1_epi8(8);
  for (int64_t b = 0; b < k / 32; ++b, w += 18, xq += 32) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2));
    const __m256i n =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
    dots[b] = Hsum256(SignedDot32(_mm256_sub_epi8(n, eight), xv));
  }
}

// Q4_K (kFive false) and Q5_K: sub-block 2g is the low nibbles of qs[32 g ..], 2g + 1 the high
// ones; Q5_K adds the fifth bit of element l of sub-block 2g (2g + 1), bit 2g (2g + 1) of qh[l].
// Levels 0..15 or 0..31 (unsigned, as maddubs wants them).
template <bool kFive>
__attribute__((target("avx2"))) void DotsQ4_5KAvx2(const uint8_t* w, const int8_t* xq, int64_t k,
                                                   int32_t* dots) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i ones = _mm256_set1_epi16(1);
  constexpr int kBytes = kFive ? 176 : 144;
  for (int64_t b = 0; b < k / 256; ++b, w += kBytes) {
    const uint8_t* qs = w + (kFive ? 48 : 16);
    const __m256i qh = kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16))
                             : _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g, xq += 64) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * g));
      __m256i lo = _mm256_and_si256(q, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (kFive) {
        // Bit s of every byte of qh, moved to bit 4 (the 16-bit shifts leave bit 0 of each byte
        // the byte's own bit s, and 0/1 << 4 stays inside its byte).
        lo = _mm256_or_si256(
            lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one), 4));
        hi = _mm256_or_si256(
            hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one), 4));
      }
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
      *dots++ = Hsum256(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), ones));
      *dots++ = Hsum256(_mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), ones));
    }
  }
}

__attribute__((target("avx2"))) void DotsQ6_KAvx2(const uint8_t* w, const int8_t* xq, int64_t k,
                                                  int32_t* dots) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  const __m256i bias = _mm256_set1_epi8(32);
  for (int64_t b = 0; b < k / 256; ++b, w += 210) {
    for (int half = 0; half < 2; ++half, xq += 128) {
      const uint8_t* ql = w + 64 * half;
      const uint8_t* qh = w + 128 + 32 * half;
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      __m256i q[4];
      q[0] =
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
      for (int r = 0; r < 4; ++r) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * r));
        const __m256i p = SignedDot32(_mm256_sub_epi8(q[r], bias), xv);
        *dots++ = Hsum128(_mm256_castsi256_si128(p));
        *dots++ = Hsum128(_mm256_extracti128_si256(p, 1));
      }
    }
  }
}

__attribute__((target("avx2,f16c"))) inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);  // exact, as HalfToFloat
}

// The fused kernels: one weight row against up to 4 activation rows, the blocks decoded once,
// in DotRowReference's lane order (this file is compiled with -ffp-contract=off: the only fused
// multiply-adds are the explicit ones), so they give its bits.
__attribute__((target("avx2,fma"))) inline float HsumLanes(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // (a0+a4)+(a2+a6), (a1+a5)+(a3+a7)
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

__attribute__((target("avx2,fma,f16c"))) void FusedQ8_0(const uint8_t* w, const Q8Row* x, int rows,
                                                        int64_t k, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* blk = w + 34 * b;
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i aw = _mm256_sign_epi8(wv, wv);
    const float dw = Half(blk);
    for (int r = 0; r < rows; ++r) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r].qs + 32 * b));
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)), ones);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * x[r].d[b]), acc[r]);
    }
  }
  for (int r = 0; r < rows; ++r) out[r] = HsumLanes(acc[r]);
}

// AVX-512 VNNI on 256-bit vectors (AVX512VL): vpdpbusd (four u8 x s8 products into each int32
// lane) and vpdpwssd (int16 pairs into int32). The integer lane sums are exactly the AVX2
// kernels' and the fp32 steps are the same operations in the same order, so these give
// DotRowReference's bits too.
#define TINYSERVE_VNNI "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"

// negsum[8 b + l] = -128 * (sum of xq[32 b + 4 l .. 32 b + 4 l + 3]): with it, vpdpbusd on the
// weights offset to unsigned (w + 128) gives the signed dot product: sum (w + 128) x - 128 sum x.
__attribute__((target(TINYSERVE_VNNI))) void NegatedLaneSums(const int8_t* xq, int64_t k,
                                                             int32_t* negsum) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < k / 32; ++b) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * b));
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), flip, xv);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(negsum + 8 * b),
                        _mm256_sub_epi32(_mm256_setzero_si256(), s));
  }
}

// FusedQ8_0 with one vpdpbusd per block and activation row (negsum: NegatedLaneSums per row).
__attribute__((target(TINYSERVE_VNNI))) void FusedQ8_0Vnni(const uint8_t* w, const Q8Row* x,
                                                           const int32_t* const* negsum, int rows,
                                                           int64_t k, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* blk = w + 34 * b;
    const __m256i wu = _mm256_xor_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), flip);  // w + 128
    const float dw = Half(blk);
    for (int r = 0; r < rows; ++r) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r].qs + 32 * b));
      const __m256i ns = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(negsum[r] + 8 * b));
      const __m256i p = _mm256_dpbusd_epi32(ns, wu, xv);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * x[r].d[b]), acc[r]);
    }
  }
  for (int r = 0; r < rows; ++r) out[r] = HsumLanes(acc[r]);
}

// A Q4_K block's 8 sub-block scales and mins (ggml's get_scale_min_k4).
inline void ScalesMinsQ4_K(const uint8_t* q, int32_t* sc, int32_t* mn) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      sc[j] = q[j] & 63;
      mn[j] = q[j + 4] & 63;
    } else {
      sc[j] = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      mn[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
  }
}

// The fp32 half of a Q4_K block for one activation row: acc += float(lane) * (d * dx) and the
// mins' chain (the same steps for both instruction sets).
__attribute__((target("avx2,fma"))) inline void AccumulateQ4_K(__m256i lane, float d, float dmin,
                                                               const int32_t* mn, const Q8Row& x,
                                                               int64_t b, __m256* acc,
                                                               float* mins) {
  *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lane), _mm256_set1_ps(d * x.d[b]), *acc);
  const int16_t* sums = x.sums + 16 * b;
  int32_t msum = 0;
  for (int s = 0; s < 8; ++s) msum += mn[s] * (sums[2 * s] + sums[2 * s + 1]);
  *mins += (dmin * x.d[b]) * static_cast<float>(msum);
}

// A Q4_K block's 8 sub-blocks of 32 nibbles (0..15) as bytes, and the scales as int16 vectors.
__attribute__((target("avx2"))) inline void UnpackQ4_K(const uint8_t* blk, const int32_t* sc,
                                                       __m256i* lv, __m256i* scv) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  for (int g = 0; g < 4; ++g) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * g));
    lv[2 * g] = _mm256_and_si256(v, m4);
    lv[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  }
  for (int j = 0; j < 8; ++j) scv[j] = _mm256_set1_epi16(static_cast<int16_t>(sc[j]));
}

__attribute__((target("avx2,fma,f16c"))) void FusedQ4_K(const uint8_t* w, const Q8Row* x, int rows,
                                                        int64_t k, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  float mins[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = w + 144 * b;
    const float d = Half(blk), dmin = Half(blk + 2);
    int32_t sc[8], mn[8];
    ScalesMinsQ4_K(blk + 4, sc, mn);
    __m256i lv[8], scv[8];
    UnpackQ4_K(blk, sc, lv, scv);
    for (int r = 0; r < rows; ++r) {
      const int8_t* xq = x[r].qs + 256 * b;
      __m256i lane = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * s));
        lane = _mm256_add_epi32(lane, _mm256_madd_epi16(_mm256_maddubs_epi16(lv[s], xv), scv[s]));
      }
      AccumulateQ4_K(lane, d, dmin, mn, x[r], b, &acc[r], &mins[r]);
    }
  }
  for (int r = 0; r < rows; ++r) out[r] = HsumLanes(acc[r]) - mins[r];
}

// FusedQ4_K with vpdpwssd (the scaled pair sums added in one instruction).
__attribute__((target(TINYSERVE_VNNI))) void FusedQ4_KVnni(const uint8_t* w, const Q8Row* x,
                                                           int rows, int64_t k, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  float mins[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = w + 144 * b;
    const float d = Half(blk), dmin = Half(blk + 2);
    int32_t sc[8], mn[8];
    ScalesMinsQ4_K(blk + 4, sc, mn);
    __m256i lv[8], scv[8];
    UnpackQ4_K(blk, sc, lv, scv);
    for (int r = 0; r < rows; ++r) {
      const int8_t* xq = x[r].qs + 256 * b;
      __m256i lane = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * s));
        lane = _mm256_dpwssd_epi32(lane, _mm256_maddubs_epi16(lv[s], xv), scv[s]);
      }
      AccumulateQ4_K(lane, d, dmin, mn, x[r], b, &acc[r], &mins[r]);
    }
  }
  for (int r = 0; r < rows; ++r) out[r] = HsumLanes(acc[r]) - mins[r];
}
#endif

// What the kernels run, best first. Every CPU with AVX2 has F16C (the fused kernels use both;
// clang 14 cannot test "f16c"); the VNNI kernels use 256-bit vectors, so they want AVX512VL.
enum class DotIsa { kPortable, kAvx2, kAvx512Vnni };

bool CpuHas(DotIsa isa) {
#ifdef TINYSERVE_QUANT_X86
  switch (isa) {
    case DotIsa::kPortable:
      return true;
    case DotIsa::kAvx2:
      return __builtin_cpu_supports("avx2");
    case DotIsa::kAvx512Vnni:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == DotIsa::kPortable;
#endif
}

DotIsa BestIsa() {
  for (DotIsa isa : {DotIsa::kAvx512Vnni, DotIsa::kAvx2}) {
    if (CpuHas(isa)) return isa;
  }
  return DotIsa::kPortable;
}

DotIsa g_isa = BestIsa();

int32_t PartOfRow(const QuantMatrix& w, int32_t j, int32_t* local) {
  int32_t p = 0;
  while (j >= w.parts[p].rows) {
    j -= w.parts[p].rows;
    ++p;
  }
  *local = j;
  return p;
}

}  // namespace

void SubBlockDots(QuantType t, const uint8_t* w, const int8_t* xq, int64_t k, int32_t* dots) {
#ifdef TINYSERVE_QUANT_X86
  if (g_isa != DotIsa::kPortable) {  // the sub-block dots have no VNNI twins (not the hot path)
    switch (t) {
      case QuantType::kQ8_0:
        return DotsQ8_0Avx2(w, xq, k, dots);
      case QuantType::kQ4_0:
        return DotsQ4_0Avx2(w, xq, k, dots);
      case QuantType::kQ4_K:
        return DotsQ4_5KAvx2<false>(w, xq, k, dots);
      case QuantType::kQ5_K:
        return DotsQ4_5KAvx2<true>(w, xq, k, dots);
      case QuantType::kQ6_K:
        return DotsQ6_KAvx2(w, xq, k, dots);
      default:
        break;
    }
  }
#endif
  SubBlockDotsReference(t, w, xq, k, dots);
}

const char* QuantDotIsa() {
  switch (g_isa) {
    case DotIsa::kAvx512Vnni:
      return "avx512vnni";
    case DotIsa::kAvx2:
      return "avx2";
    case DotIsa::kPortable:
      break;
  }
  return "portable";
}

bool SetQuantDotIsaForTesting(const char* isa) {
  const std::string s = isa;
  DotIsa want = DotIsa::kPortable;
  if (s == "best") {
    want = BestIsa();
  } else if (s == "avx512vnni") {
    want = DotIsa::kAvx512Vnni;
  } else if (s == "avx2") {
    want = DotIsa::kAvx2;
  } else if (s != "portable") {
    return false;
  }
  if (!CpuHas(want)) return false;
  g_isa = want;
  return true;
}

void QuantLinear(const float* x, const QuantMatrix& w, int32_t m, float* y,
                 const ParallelForFn& parallel_for) {
  const int32_t n = w.rows, k = w.cols;
  if (m <= 0 || n <= 0) return;
  const DotIsa isa = g_isa;
  // The activations in each format a part wants: [0] Q8_0, [1] Q8_K.
  bool want[2] = {false, false};
  for (int p = 0; p < w.num_parts; ++p) want[IsKQuant(w.parts[p].type) ? 1 : 0] = true;
  static thread_local std::vector<uint8_t> storage[2];
  static thread_local std::vector<int32_t> negsum_storage;  // [m, k / 4] for the VNNI Q8_0 kernel
  std::vector<Q8Row> rows[2];
  std::vector<const int32_t*> negsum;  // [m]: row i's NegatedLaneSums
  size_t row_bytes[2] = {0, 0};
  for (int f = 0; f < 2; ++f) {
    if (!want[f]) continue;
    const QuantType rep = f == 1 ? QuantType::kQ4_K : QuantType::kQ8_0;
    row_bytes[f] = ActivationBytes(rep, k);
    storage[f].resize(row_bytes[f] * static_cast<size_t>(m) + 64);
    uint8_t* base = storage[f].data();
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
    rows[f].resize(static_cast<size_t>(m));
#ifdef TINYSERVE_QUANT_X86
    // (A thread_local is not captured: the lambda may run on a pool thread, so it gets pointers.)
    const bool with_negsum = f == 0 && isa == DotIsa::kAvx512Vnni;
    int32_t* negsum_base = nullptr;
    if (with_negsum) {
      negsum_storage.resize(static_cast<size_t>(m) * (k / 4));
      negsum_base = negsum_storage.data();
      negsum.resize(static_cast<size_t>(m));
    }
#endif
    auto quantize = [&](int64_t i) {
      rows[f][i] = QuantizeActivations(rep, x + i * k, k, base + row_bytes[f] * i);
#ifdef TINYSERVE_QUANT_X86
      if (with_negsum) {
        int32_t* ns = negsum_base + static_cast<size_t>(i) * (k / 4);
        NegatedLaneSums(rows[f][i].qs, k, ns);
        negsum[i] = ns;
      }
#endif
    };
    if (m >= 8) {
      parallel_for(m, quantize);
    } else {
      for (int32_t i = 0; i < m; ++i) quantize(i);
    }
  }
  constexpr int32_t kRowsPerItem = 16;
  const int64_t items = (n + kRowsPerItem - 1) / kRowsPerItem;
  parallel_for(items, [&](int64_t item) {
    static thread_local std::vector<int32_t> dots;
    dots.resize(static_cast<size_t>(k / 16));
    const int32_t j1 = std::min<int32_t>(n, static_cast<int32_t>((item + 1) * kRowsPerItem));
    for (int32_t j = static_cast<int32_t>(item * kRowsPerItem); j < j1; ++j) {
      int32_t local = 0;
      const QuantMatrixPart& part = w.parts[PartOfRow(w, j, &local)];
      const uint8_t* wrow = part.blocks + QuantRowBytes(part.type, k) * local;
      const std::vector<Q8Row>& xr = rows[IsKQuant(part.type) ? 1 : 0];
#ifdef TINYSERVE_QUANT_X86
      if (isa != DotIsa::kPortable &&
          (part.type == QuantType::kQ8_0 || part.type == QuantType::kQ4_K)) {
        const bool vnni = isa == DotIsa::kAvx512Vnni;
        for (int32_t i = 0; i < m; i += 4) {
          const int r = std::min<int32_t>(4, m - i);
          float out[4];
          if (part.type == QuantType::kQ8_0) {
            if (vnni) {
              FusedQ8_0Vnni(wrow, &xr[i], &negsum[i], r, k, out);
            } else {
              FusedQ8_0(wrow, &xr[i], r, k, out);
            }
          } else if (vnni) {
            FusedQ4_KVnni(wrow, &xr[i], r, k, out);
          } else {
            FusedQ4_K(wrow, &xr[i], r, k, out);
          }
          for (int u = 0; u < r; ++u) y[static_cast<size_t>(i + u) * n + j] = out[u];
        }
        continue;
      }
#endif
      if (part.type == QuantType::kQ8_0 || part.type == QuantType::kQ4_K) {
        for (int32_t i = 0; i < m; ++i)
          y[static_cast<size_t>(i) * n + j] = DotRowReference(part.type, wrow, xr[i]);
        continue;
      }
      for (int32_t i = 0; i < m; ++i) {
        SubBlockDots(part.type, wrow, xr[i].qs, k, dots.data());
        y[static_cast<size_t>(i) * n + j] = CombineDots(part.type, wrow, xr[i], dots.data());
      }
    }
  });
}

void QuantEmbedding(const QuantMatrix& w, const int32_t* ids, int32_t n, float* out) {
  for (int32_t t = 0; t < n; ++t) {
    int32_t local = 0;
    const QuantMatrixPart& part = w.parts[PartOfRow(w, ids[t], &local)];
    DequantizeRow(part.type, part.blocks + QuantRowBytes(part.type, w.cols) * local, w.cols,
                  out + static_cast<size_t>(t) * w.cols);
  }
}

}  // namespace tinyserve
