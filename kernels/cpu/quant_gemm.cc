#include "kernels/cpu/quant_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace tinyserve {
namespace {

#if defined(__x86_64__) || defined(__i386__)
#define TINYSERVE_QUANT_X86 1
#endif

// A Q4_K (or Q5_K) block's 8 six-bit sub-block scales and mins (ggml's get_scale_min_k4),
// unpacked four at a time in 32-bit words (the words little-endian, as GGUF's bytes are): of the 12
// bytes at q, bytes 0-3 hold the low 6 bits of scales 0-3, 4-7 those of mins 0-3, and their top 2
// bits are bits 4-5 of scales (mins) 4-7, whose low 4 bits are the low (high) nibbles of bytes
// 8-11.
inline void ScalesMinsK4(const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  uint32_t u[3];
  std::memcpy(u, q, 12);
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  const uint32_t sc03 = u[0] & kLow6, mn03 = u[1] & kLow6;
  const uint32_t sc47 = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);
  const uint32_t mn47 = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);
  std::memcpy(sc, &sc03, 4);
  std::memcpy(sc + 4, &sc47, 4);
  std::memcpy(mn, &mn03, 4);
  std::memcpy(mn + 4, &mn47, 4);
}

// ---- Rows interleaved 8 at a time (RepackRows8) ----------------------------------------------
// Q4_K: one super-block of a group of 8 rows (kQ4_KRows8BlockBytes = 1184 bytes):
//   [0, 16)      the 8 rows' d (f16), row r at 2 r
//   [16, 32)     their dmin (f16)
//   [32, 96)     sub-block scales, byte 8 s + r = row r's scale of sub-block s
//   [96, 160)    mins in pairs of sub-blocks: byte 16 p + 2 r + h = row r's min of
//                sub-block 2 p + h
//   [160, 1184)  the nibbles: 32-byte chunk 8 g + i holds, at 4 r, bytes 32 g + 4 i .. + 3 of
//                row r's qs (elements 4 i .. 4 i + 3 of sub-blocks 2 g (low) and 2 g + 1 (high))
// so one vector load gives four consecutive elements of every row, each row's sums land in its
// own 32-bit lane, and the fp32 steps of the 8 rows are one vector operation each.
constexpr int kX8Dmin = 16, kX8Scales = 32, kX8Mins = 96, kX8Qs = 160;
constexpr size_t kQ4_KRows8BlockBytes = 1184;
// Q6_K (kQ6_KRows8BlockBytes = 1680 bytes = 8 x 210):
//   [0, 16)      the 8 rows' d (f16)
//   [16, 144)    scales (int8) in pairs of sub-blocks: byte 16 p + 2 r + h = row r's scale of
//                sub-block 2 p + h (16 sub-blocks of 16)
//   [144, 1680)  16 runs of 96 bytes in the order the kernel reads them (so the hardware
//                prefetcher sees one forward stream: with ql and qh in separate regions, batch 1
//                waited on the qh loads): run t = 8 h + i is three 32-byte chunks holding, at 4 r,
//                row r's ql[64 h + 4 i ..], ql[64 h + 32 + 4 i ..] and qh[32 h + 4 i ..] (4 bytes
//                each)
constexpr int kQ6X8Scales = 16, kQ6X8Runs = 144;
constexpr size_t kQ6_KRows8BlockBytes = 1680;
// Q8_0 (kQ8_0Rows8BlockBytes = 272 bytes = 8 x 34): [0, 16) the 8 rows' d (f16); [16, 272) 8
// chunks of 32 bytes: chunk i holds, at 4 r, row r's qs[4 i .. 4 i + 3] (signed, as in the file).
constexpr size_t kQ8_0Rows8BlockBytes = 272;

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

// fma(a, b, c) rounded once, as std::fma (the DotBlocks* steps of ggml_quant.cc).
__attribute__((target("avx2,fma"))) inline float Fma(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// The fused kernels: a tile of R weight rows (w[0..R)) against C activation rows (x[0..C)),
// out[c * R + r] = the dot of weight row r and activation row c. Each block is loaded once for
// the tile, and the R x C accumulator chains are independent, so at batch 1 (C = 1) the R weight
// rows stream side by side instead of one latency-bound chain at a time. Every output element is
// DotRowReference's order (this file is compiled with -ffp-contract=off: the only fused
// multiply-adds are the explicit ones), so any tile shape gives its bits. (Rows in whole groups
// of 8 run the interleaved kernels further down instead.)

// The largest tile (R weight rows x C activation rows) each kernel is instantiated for (AVX2 has
// 16 vector registers, the VNNI kernels' EVEX encoding 32), measured on an AMD EPYC (Zen 4, 2
// threads, bench/quant_linear_bench.cc; bench/RESULTS.md): Q8_0 at batch 32 runs 1.6x faster on
// 4 x 4 tiles than on 1 x 4, but a batch of one reads its weight rows faster one at a time (one
// sequential stream per thread: 4-row tiles were 1.3x slower), and Q4_K was faster on 1 x 4 tiles
// at every batch. So Q8_0 takes row tiles from kRowTileMinBatch activation rows on.
constexpr int kMaxTileRows = 4;
constexpr int kMaxTileCols = 4;
constexpr int kRowTileMinBatch = 4;
template <int R, int C>
__attribute__((target("avx2,fma,f16c"))) void TileQ8_0(const uint8_t* const* w, const Q8Row* x,
                                                       const int32_t* const* /*negsum*/, int64_t k,
                                                       float* out) {
  float acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < k / 32; ++b) {
    __m256i wv[R], aw[R];
    float dw[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = w[r] + 34 * b;
      wv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      aw[r] = _mm256_sign_epi8(wv[r], wv[r]);
      dw[r] = Half(blk);
    }
    for (int c = 0; c < C; ++c) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[c].qs + 32 * b));
      const float dx = x[c].d[b];
      for (int r = 0; r < R; ++r) {
        const __m256i p =
            _mm256_madd_epi16(_mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(xv, wv[r])), ones);
        acc[r][c] = Fma(static_cast<float>(Hsum256(p)), dw[r] * dx, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[c * R + r] = acc[r][c];
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

// TileQ8_0 with one vpdpbusd per block, weight row and activation row (negsum[c]:
// NegatedLaneSums of activation row c).
template <int R, int C>
__attribute__((target(TINYSERVE_VNNI))) void TileQ8_0Vnni(const uint8_t* const* w, const Q8Row* x,
                                                          const int32_t* const* negsum, int64_t k,
                                                          float* out) {
  float acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < k / 32; ++b) {
    __m256i wu[R];
    float dw[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = w[r] + 34 * b;
      wu[r] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                               flip);  // w + 128
      dw[r] = Half(blk);
    }
    for (int c = 0; c < C; ++c) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[c].qs + 32 * b));
      const __m256i ns = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(negsum[c] + 8 * b));
      const float dx = x[c].d[b];
      for (int r = 0; r < R; ++r) {
        const __m256i p = _mm256_dpbusd_epi32(ns, wu[r], xv);
        acc[r][c] = Fma(static_cast<float>(Hsum256(p)), dw[r] * dx, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[c * R + r] = acc[r][c];
}

// The 8 mins as 16 int16 lanes, each twice ([m0, m0, m1, m1, ...]), to pair with Q8_K's 16 sums.
__attribute__((target("avx2"))) inline __m256i PairedMins(const uint8_t* mn) {
  const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  return _mm256_cvtepu8_epi16(
      _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn)), dup));
}

// sum over s < 8 of mn[s] * (sums[2 s] + sums[2 s + 1]): exact (|term| <= 63 * 2 * 16 * 127), so
// the same integer as the scalar loop.
__attribute__((target("avx2"))) inline int32_t MinsDot(__m256i paired_mins, const int16_t* sums) {
  return Hsum256(
      _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums)), paired_mins));
}

// One Q4_K block of a weight row, as the tile kernels read it.
struct BlockQ4_K {
  float d = 0.0f, dmin = 0.0f;
  uint8_t sc[8], mn[8];
  const uint8_t* qs = nullptr;  // 128 bytes: sub-blocks 2 g (low nibbles) and 2 g + 1 (high)
};

__attribute__((target("avx2,f16c"))) inline BlockQ4_K ReadBlockQ4_K(const uint8_t* blk) {
  BlockQ4_K q;
  q.d = Half(blk);
  q.dmin = Half(blk + 2);
  ScalesMinsK4(blk + 4, q.sc, q.mn);
  q.qs = blk + 16;
  return q;
}

// Sub-block s of a Q4_K block: its 32 nibbles (0..15) as bytes.
__attribute__((target("avx2"))) inline __m256i NibblesQ4_K(const BlockQ4_K& q, int s) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.qs + 32 * (s / 2)));
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  return _mm256_and_si256(s % 2 == 0 ? v : _mm256_srli_epi16(v, 4), m4);
}

// The fp32 half of a Q4_K block for one activation row (DotBlocksQ4_K): the block's scaled dots
// (the exact sum of the int32 lanes) and its mins' integer, each fma'd into its chain.
__attribute__((target("avx2,fma"))) inline void AccumulateQ4_K(__m256i lane, const BlockQ4_K& q,
                                                               const Q8Row& x, int64_t b,
                                                               float* acc, float* mins) {
  const int32_t isum = Hsum256(lane);
  const int32_t msum = MinsDot(PairedMins(q.mn), x.sums + 16 * b);
  *acc = Fma(static_cast<float>(isum), q.d * x.d[b], *acc);
  *mins = Fma(static_cast<float>(msum), q.dmin * x.d[b], *mins);
}

// The Q4_K tile: per block, each weight row's scales once, then per sub-block its nibbles against
// each activation row's 32 bytes. The integer lane sums are exact (so their order is free): per
// sub-block maddubs, then madd and add on AVX2 (TileQ4_K) or one vpdpwssd (TileQ4_KVnni); the
// fp32 steps are AccumulateQ4_K's, in block order. (Rows in groups of 8 run TileQ4_Kx8 instead.)
template <int R, int C>
__attribute__((target("avx2,fma,f16c"))) void TileQ4_K(const uint8_t* const* w, const Q8Row* x,
                                                       const int32_t* const* /*negsum*/, int64_t k,
                                                       float* out) {
  float acc[R][C], mins[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = 0.0f, mins[r][c] = 0.0f;
  for (int64_t b = 0; b < k / 256; ++b) {
    BlockQ4_K q[R];
    for (int r = 0; r < R; ++r) q[r] = ReadBlockQ4_K(w[r] + 144 * b);
    __m256i lane[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) lane[r][c] = _mm256_setzero_si256();
    for (int s = 0; s < 8; ++s) {
      __m256i lv[R], scv[R];
      for (int r = 0; r < R; ++r) {
        lv[r] = NibblesQ4_K(q[r], s);
        scv[r] = _mm256_set1_epi16(static_cast<int16_t>(q[r].sc[s]));
      }
      for (int c = 0; c < C; ++c) {
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[c].qs + 256 * b + 32 * s));
        for (int r = 0; r < R; ++r) {
          const __m256i p16 = _mm256_maddubs_epi16(lv[r], xv);
          lane[r][c] = _mm256_add_epi32(lane[r][c], _mm256_madd_epi16(p16, scv[r]));
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c)
        AccumulateQ4_K(lane[r][c], q[r], x[c], b, &acc[r][c], &mins[r][c]);
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[c * R + r] = acc[r][c] - mins[r][c];
}

// TileQ4_K with vpdpwssd (the scaled pair sums added in one instruction).
template <int R, int C>
__attribute__((target(TINYSERVE_VNNI))) void TileQ4_KVnni(const uint8_t* const* w, const Q8Row* x,
                                                          const int32_t* const* /*negsum*/,
                                                          int64_t k, float* out) {
  float acc[R][C], mins[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = 0.0f, mins[r][c] = 0.0f;
  for (int64_t b = 0; b < k / 256; ++b) {
    BlockQ4_K q[R];
    for (int r = 0; r < R; ++r) q[r] = ReadBlockQ4_K(w[r] + 144 * b);
    __m256i lane[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) lane[r][c] = _mm256_setzero_si256();
    for (int s = 0; s < 8; ++s) {
      __m256i lv[R], scv[R];
      for (int r = 0; r < R; ++r) {
        lv[r] = NibblesQ4_K(q[r], s);
        scv[r] = _mm256_set1_epi16(static_cast<int16_t>(q[r].sc[s]));
      }
      for (int c = 0; c < C; ++c) {
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[c].qs + 256 * b + 32 * s));
        for (int r = 0; r < R; ++r)
          lane[r][c] = _mm256_dpwssd_epi32(lane[r][c], _mm256_maddubs_epi16(lv[r], xv), scv[r]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c)
        AccumulateQ4_K(lane[r][c], q[r], x[c], b, &acc[r][c], &mins[r][c]);
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[c * R + r] = acc[r][c] - mins[r][c];
}

// Q5_K and Q6_K in CombineDots' order: per super-block, the exact integer sum of every
// sub-block's scale times its dot product (isum; the vector's lanes hold parts of it, any order
// gives the same integer), then CombineDots' scalar steps (Q5_K with the mins' integer sum), so
// these give its bits. One weight row (R = 1) against C activation rows.
template <int R, int C>
__attribute__((target("avx2,fma,f16c"))) void TileQ5_K(const uint8_t* const* w, const Q8Row* x,
                                                       const int32_t* const* /*negsum*/, int64_t k,
                                                       float* out) {
  static_assert(R == 1);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i one = _mm256_set1_epi8(1);
  float acc[C];
  for (int c = 0; c < C; ++c) acc[c] = 0.0f;
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = w[0] + 176 * b;
    uint8_t sc[8], mn[8];
    ScalesMinsK4(blk + 4, sc, mn);
    const __m256i paired_mins = PairedMins(mn);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
    __m256i lane[C];
    for (int c = 0; c < C; ++c) lane[c] = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 48 + 32 * g));
      // Levels 0..31: the nibble and, at bit 4, bit 2g (2g + 1) of qh's byte (DotsQ4_5KAvx2).
      const __m256i lo = _mm256_or_si256(
          _mm256_and_si256(q, m4),
          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one), 4));
      const __m256i hi = _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one), 4));
      const __m256i slo = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * g]));
      const __m256i shi = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * g + 1]));
      for (int c = 0; c < C; ++c) {
        const int8_t* xq = x[c].qs + 256 * b + 64 * g;
        const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
        const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
        lane[c] = _mm256_add_epi32(lane[c], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), slo));
        lane[c] = _mm256_add_epi32(lane[c], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), shi));
      }
    }
    const float d = Half(blk), dmin = Half(blk + 2);
    for (int c = 0; c < C; ++c) {
      const int32_t isum = Hsum256(lane[c]);
      const int32_t msum = MinsDot(paired_mins, x[c].sums + 16 * b);
      const float v = d * static_cast<float>(isum) - dmin * static_cast<float>(msum);
      acc[c] += x[c].d[b] * v;
    }
  }
  for (int c = 0; c < C; ++c) out[c] = acc[c];
}

template <int R, int C>
__attribute__((target("avx2,fma,f16c"))) void TileQ6_K(const uint8_t* const* w, const Q8Row* x,
                                                       const int32_t* const* /*negsum*/, int64_t k,
                                                       float* out) {
  static_assert(R == 1);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  const __m256i bias = _mm256_set1_epi8(32);
  float acc[C];
  for (int c = 0; c < C; ++c) acc[c] = 0.0f;
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = w[0] + 210 * b;
    const int8_t* scales = reinterpret_cast<const int8_t*>(blk + 192);
    __m256i lane[C];
    for (int c = 0; c < C; ++c) lane[c] = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = blk + 64 * half;
      const uint8_t* qh = blk + 128 + 32 * half;
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      // Elements 32 r .. 32 r + 31 of this half (DotsQ6_KAvx2's q[r]), levels q - 32 in -32..31.
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
        const __m256i lv = _mm256_sub_epi8(q[r], bias);
        const __m256i alv = _mm256_sign_epi8(lv, lv);
        // Sub-blocks 8 half + 2 r (the low 16 elements) and the next (the high 16).
        const int s = 8 * half + 2 * r;
        const __m256i sv =
            _mm256_set_m128i(_mm_set1_epi16(scales[s + 1]), _mm_set1_epi16(scales[s]));
        for (int c = 0; c < C; ++c) {
          const __m256i xv = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(x[c].qs + 256 * b + 128 * half + 32 * r));
          // |level| * (x * sign(level)): exact pairs (|p| <= 2 * 32 * 127).
          const __m256i p16 = _mm256_maddubs_epi16(alv, _mm256_sign_epi8(xv, lv));
          lane[c] = _mm256_add_epi32(lane[c], _mm256_madd_epi16(p16, sv));
        }
      }
    }
    const float d = Half(blk + 208);
    for (int c = 0; c < C; ++c) acc[c] += x[c].d[b] * (d * static_cast<float>(Hsum256(lane[c])));
  }
  for (int c = 0; c < C; ++c) out[c] = acc[c];
}

// Sub-block s's scales of the 8 rows as int16 pairs (sc, sc) in 32-bit lanes, for madd.
__attribute__((target("avx2"))) inline __m256i ScalePairsX8(const uint8_t* blk, int s) {
  const __m256i v = _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + kX8Scales + 8 * s)));
  return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

// Four activation bytes (elements e .. e + 3 of row c's block b) in every 32-bit lane.
__attribute__((target("avx2"))) inline __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// A super-block's activation sums (16 int16, one per 16 elements) added into its 8 sub-blocks'
// sums, two to a 32-bit element: pair[p] holds sub-block 2 p's (low half) and 2 p + 1's, for madd
// against the rows' paired mins.
__attribute__((target("avx2"))) inline void SubBlockSumPairs(const int16_t* sums, int32_t pair[4]) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(pair),
                   _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sums)),
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(sums + 8))));
}

// The fp32 half of one super-block for 8 weight rows and C activation rows (DotBlocksQ4_K's
// steps, a lane per weight row): isum[c] holds the rows' I; M comes from the mins here.
template <int C>
__attribute__((target("avx2,fma,f16c"))) inline void FinishQ4_Kx8(const uint8_t* blk,
                                                                  const Q8Row* x, int64_t b,
                                                                  const __m256i* isum, __m256* acc,
                                                                  __m256* mins) {
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
  const __m256 dmin =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kX8Dmin)));
  __m256i mn[4];
  for (int p = 0; p < 4; ++p) {
    mn[p] = _mm256_cvtepu8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kX8Mins + 16 * p)));
  }
  for (int c = 0; c < C; ++c) {
    int32_t pair[4];
    SubBlockSumPairs(x[c].sums + 16 * b, pair);
    __m256i msum = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p)
      msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mn[p], _mm256_set1_epi32(pair[p])));
    const __m256 dx = _mm256_set1_ps(x[c].d[b]);
    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, dx), acc[c]);
    mins[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, dx), mins[c]);
  }
}

// 8 interleaved Q4_K rows (group g) against C activation rows: out[c * 8 + r]. AVX2: per sub-block
// the nibble x activation pairs summed in int16 (8 chunks of at most 2 * 15 * 128 each: exact),
// then madd with the scales into the rows' int32 lanes.
template <int C>
__attribute__((target("avx2,fma,f16c"))) void TileQ4_Kx8(const uint8_t* g, const Q8Row* x,
                                                         int64_t k, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256 acc[C], mins[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps(), mins[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = g + kQ4_KRows8BlockBytes * b;
    __m256i isum[C];
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
    for (int gi = 0; gi < 4; ++gi) {
      __m256i lo[C], hi[C];
      for (int c = 0; c < C; ++c) lo[c] = _mm256_setzero_si256(), hi[c] = _mm256_setzero_si256();
      for (int i = 0; i < 8; ++i) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kX8Qs + 256 * gi + 32 * i));
        const __m256i vl = _mm256_and_si256(v, m4);
        const __m256i vh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        for (int c = 0; c < C; ++c) {
          const int8_t* xb = x[c].qs + 256 * b + 64 * gi + 4 * i;
          lo[c] = _mm256_add_epi16(lo[c], _mm256_maddubs_epi16(vl, Broadcast4(xb)));
          hi[c] = _mm256_add_epi16(hi[c], _mm256_maddubs_epi16(vh, Broadcast4(xb + 32)));
        }
      }
      const __m256i sl = ScalePairsX8(blk, 2 * gi), sh = ScalePairsX8(blk, 2 * gi + 1);
      for (int c = 0; c < C; ++c) {
        isum[c] = _mm256_add_epi32(
            isum[c], _mm256_add_epi32(_mm256_madd_epi16(lo[c], sl), _mm256_madd_epi16(hi[c], sh)));
      }
    }
    FinishQ4_Kx8<C>(blk, x, b, isum, acc, mins);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + 8 * c, _mm256_sub_ps(acc[c], mins[c]));
}

// TileQ4_Kx8 with vpdpbusd: each sub-block's dots straight into int32 lanes, times the scales.
template <int C>
__attribute__((target(TINYSERVE_VNNI))) void TileQ4_Kx8Vnni(const uint8_t* g, const Q8Row* x,
                                                            int64_t k, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256 acc[C], mins[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps(), mins[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = g + kQ4_KRows8BlockBytes * b;
    __m256i isum[C];
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
    for (int gi = 0; gi < 4; ++gi) {
      __m256i lo[C], hi[C];
      for (int c = 0; c < C; ++c) lo[c] = _mm256_setzero_si256(), hi[c] = _mm256_setzero_si256();
      for (int i = 0; i < 8; ++i) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kX8Qs + 256 * gi + 32 * i));
        const __m256i vl = _mm256_and_si256(v, m4);
        const __m256i vh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        for (int c = 0; c < C; ++c) {
          const int8_t* xb = x[c].qs + 256 * b + 64 * gi + 4 * i;
          lo[c] = _mm256_dpbusd_epi32(lo[c], vl, Broadcast4(xb));
          hi[c] = _mm256_dpbusd_epi32(hi[c], vh, Broadcast4(xb + 32));
        }
      }
      const __m256i sl = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + kX8Scales + 16 * gi)));
      const __m256i sh = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + kX8Scales + 16 * gi + 8)));
      for (int c = 0; c < C; ++c) {
        isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_mullo_epi32(lo[c], sl),
                                                             _mm256_mullo_epi32(hi[c], sh)));
      }
    }
    FinishQ4_Kx8<C>(blk, x, b, isum, acc, mins);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + 8 * c, _mm256_sub_ps(acc[c], mins[c]));
}

// Two groups' 32-byte chunks at the same offset in one 512-bit register: a's in the low half.
__attribute__((target(TINYSERVE_VNNI))) inline __m512i LoadPair32(const uint8_t* a,
                                                                  const uint8_t* b) {
  // (The maskz forms: g++ 12 warns that the plain ones' undefined operand is uninitialized.)
  return _mm512_maskz_inserti64x4(
      0xff,
      _mm512_maskz_broadcast_i64x4(0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

// Two groups' 16 bytes at the same offset in one 256-bit register: a's in the low half.
__attribute__((target(TINYSERVE_VNNI))) inline __m256i LoadPair16(const uint8_t* a,
                                                                  const uint8_t* b) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
}

// Two groups' 8 sub-block scale bytes (at the same offset) widened to 32-bit lanes, a's first.
__attribute__((target(TINYSERVE_VNNI))) inline __m512i ScalesPair8(const uint8_t* a,
                                                                   const uint8_t* b) {
  return _mm512_maskz_cvtepu8_epi32(
      0xffff, _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                                 _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))));
}

// TileQ4_Kx8Vnni on two groups of 8 rows at once (b0's rows in lanes 0-7, b1's in 8-15) with
// 512-bit vectors: out[c * 16 + r]. Each lane's integer sums and fp32 steps are TileQ4_Kx8Vnni's
// and FinishQ4_Kx8's.
template <int C>
__attribute__((target(TINYSERVE_VNNI ",avx512bw"))) void TileQ4_Kx16Vnni(const uint8_t* g0,
                                                                         const uint8_t* g1,
                                                                         const Q8Row* x, int64_t k,
                                                                         float* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512 acc[C], mins[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps(), mins[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* b0 = g0 + kQ4_KRows8BlockBytes * b;
    const uint8_t* b1 = g1 + kQ4_KRows8BlockBytes * b;
    __m512i isum[C];
    for (int c = 0; c < C; ++c) isum[c] = _mm512_setzero_si512();
    for (int gi = 0; gi < 4; ++gi) {
      __m512i lo[C], hi[C];
      for (int c = 0; c < C; ++c) lo[c] = _mm512_setzero_si512(), hi[c] = _mm512_setzero_si512();
      for (int i = 0; i < 8; ++i) {
        const int off = kX8Qs + 256 * gi + 32 * i;
        const __m512i v = LoadPair32(b0 + off, b1 + off);
        const __m512i vl = _mm512_and_si512(v, m4);
        const __m512i vh = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        for (int c = 0; c < C; ++c) {
          const int8_t* xb = x[c].qs + 256 * b + 64 * gi + 4 * i;
          int32_t xl, xh;
          std::memcpy(&xl, xb, 4);
          std::memcpy(&xh, xb + 32, 4);
          lo[c] = _mm512_dpbusd_epi32(lo[c], vl, _mm512_set1_epi32(xl));
          hi[c] = _mm512_dpbusd_epi32(hi[c], vh, _mm512_set1_epi32(xh));
        }
      }
      const __m512i sl = ScalesPair8(b0 + kX8Scales + 16 * gi, b1 + kX8Scales + 16 * gi);
      const __m512i sh = ScalesPair8(b0 + kX8Scales + 16 * gi + 8, b1 + kX8Scales + 16 * gi + 8);
      for (int c = 0; c < C; ++c) {
        isum[c] = _mm512_add_epi32(isum[c], _mm512_add_epi32(_mm512_mullo_epi32(lo[c], sl),
                                                             _mm512_mullo_epi32(hi[c], sh)));
      }
    }
    // FinishQ4_Kx8's steps on 16 lanes.
    const __m512 d = _mm512_maskz_cvtph_ps(0xffff, LoadPair16(b0, b1));
    const __m512 dmin = _mm512_maskz_cvtph_ps(0xffff, LoadPair16(b0 + kX8Dmin, b1 + kX8Dmin));
    __m512i mn[4];
    for (int p = 0; p < 4; ++p) {
      mn[p] = _mm512_maskz_cvtepu8_epi16(0xffffffff,
                                         LoadPair16(b0 + kX8Mins + 16 * p, b1 + kX8Mins + 16 * p));
    }
    for (int c = 0; c < C; ++c) {
      int32_t pair[4];
      SubBlockSumPairs(x[c].sums + 16 * b, pair);
      __m512i msum = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p)
        msum = _mm512_add_epi32(msum, _mm512_madd_epi16(mn[p], _mm512_set1_epi32(pair[p])));
      const __m512 dx = _mm512_set1_ps(x[c].d[b]);
      acc[c] =
          _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, isum[c]), _mm512_mul_ps(d, dx), acc[c]);
      mins[c] =
          _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, msum), _mm512_mul_ps(dmin, dx), mins[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + 16 * c, _mm512_sub_ps(acc[c], mins[c]));
}

// The levels (0..63, unsigned) of four consecutive elements of each of 8 interleaved Q6_K rows:
// out[r] for elements 128 h + 32 r + 4 i .. + 3 (sub-block 8 h + 2 r + i / 4), from run 8 h + i
// (ql at a and b, qh at q). The 16-bit shifts move bits across bytes only where the masks then
// clear them.
__attribute__((target("avx2"))) inline void LevelsQ6_Kx8(const uint8_t* blk, int h, int i,
                                                         __m256i* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
  const uint8_t* run = blk + kQ6X8Runs + 96 * (8 * h + i);
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(run));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(run + 32));
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(run + 64));
  out[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(q, 4), m30));
  out[1] = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_and_si256(_mm256_slli_epi16(q, 2), m30));
  out[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(q, m30));
  out[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(q, 2), m30));
}

// Sub-block pair p's scales of the 8 rows as int16 pairs (sc[2p], sc[2p + 1]) in 32-bit lanes.
__attribute__((target("avx2"))) inline __m256i ScalePairsQ6_Kx8(const uint8_t* blk, int p) {
  return _mm256_cvtepi8_epi16(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ6X8Scales + 16 * p)));
}

// The fp32 half of one Q6_K super-block for 8 rows (CombineDots' steps, a lane per weight row):
// udots[c] holds each row's sum of sc * (unsigned-level dot); the levels' offset of 32 comes off
// as 32 * sum(sc * the activations' sums of 16), all exact.
template <int C>
__attribute__((target("avx2,fma,f16c"))) inline void FinishQ6_Kx8(const uint8_t* blk,
                                                                  const Q8Row* x, int64_t b,
                                                                  const __m256i* udots,
                                                                  __m256* acc) {
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
  __m256i sp[8];
  for (int p = 0; p < 8; ++p) sp[p] = ScalePairsQ6_Kx8(blk, p);
  for (int c = 0; c < C; ++c) {
    const int16_t* sums = x[c].sums + 16 * b;
    __m256i offset = _mm256_setzero_si256();
    for (int p = 0; p < 8; ++p) {
      int32_t pair;
      std::memcpy(&pair, sums + 2 * p, 4);
      offset = _mm256_add_epi32(offset, _mm256_madd_epi16(sp[p], _mm256_set1_epi32(pair)));
    }
    const __m256i isum = _mm256_sub_epi32(udots[c], _mm256_slli_epi32(offset, 5));
    acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_set1_ps(x[c].d[b]),
                                                 _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum))));
  }
}

// Sub-block s's scale of the 8 rows (int32 lanes) from its pair vector.
__attribute__((target("avx2"))) inline __m256i ScaleOfPair(__m256i pair, int half) {
  return half == 0 ? _mm256_srai_epi32(_mm256_slli_epi32(pair, 16), 16)
                   : _mm256_srai_epi32(pair, 16);
}

// 8 interleaved Q6_K rows against C activation rows: out[c * 8 + r]. Per sub-block of 16 the
// unsigned levels' dot (AVX2: maddubs, madd with ones; at most 16 * 63 * 128), times its scale.
template <int C>
__attribute__((target("avx2,fma,f16c"))) void TileQ6_Kx8(const uint8_t* g, const Q8Row* x,
                                                         int64_t k, float* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = g + kQ6_KRows8BlockBytes * b;
    __m256i udots[C];
    for (int c = 0; c < C; ++c) udots[c] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      for (int half = 0; half < 2; ++half) {
        __m256i dot[4][C];
        for (int r = 0; r < 4; ++r)
          for (int c = 0; c < C; ++c) dot[r][c] = _mm256_setzero_si256();
        for (int i = 4 * half; i < 4 * half + 4; ++i) {
          __m256i lv[4];
          LevelsQ6_Kx8(blk, h, i, lv);
          for (int r = 0; r < 4; ++r) {
            for (int c = 0; c < C; ++c) {
              const __m256i xv = Broadcast4(x[c].qs + 256 * b + 128 * h + 32 * r + 4 * i);
              dot[r][c] = _mm256_add_epi32(
                  dot[r][c], _mm256_madd_epi16(_mm256_maddubs_epi16(lv[r], xv), ones));
            }
          }
        }
        for (int r = 0; r < 4; ++r) {
          const __m256i sc = ScaleOfPair(ScalePairsQ6_Kx8(blk, 4 * h + r), half);
          for (int c = 0; c < C; ++c)
            udots[c] = _mm256_add_epi32(udots[c], _mm256_mullo_epi32(dot[r][c], sc));
        }
      }
    }
    FinishQ6_Kx8<C>(blk, x, b, udots, acc);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + 8 * c, acc[c]);
}

// TileQ6_Kx8 with vpdpbusd.
template <int C>
__attribute__((target(TINYSERVE_VNNI))) void TileQ6_Kx8Vnni(const uint8_t* g, const Q8Row* x,
                                                            int64_t k, float* out) {
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = g + kQ6_KRows8BlockBytes * b;
    __m256i udots[C];
    for (int c = 0; c < C; ++c) udots[c] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      for (int half = 0; half < 2; ++half) {
        __m256i dot[4][C];
        for (int r = 0; r < 4; ++r)
          for (int c = 0; c < C; ++c) dot[r][c] = _mm256_setzero_si256();
        for (int i = 4 * half; i < 4 * half + 4; ++i) {
          __m256i lv[4];
          LevelsQ6_Kx8(blk, h, i, lv);
          for (int r = 0; r < 4; ++r) {
            for (int c = 0; c < C; ++c) {
              const __m256i xv = Broadcast4(x[c].qs + 256 * b + 128 * h + 32 * r + 4 * i);
              dot[r][c] = _mm256_dpbusd_epi32(dot[r][c], lv[r], xv);
            }
          }
        }
        for (int r = 0; r < 4; ++r) {
          const __m256i sc = ScaleOfPair(ScalePairsQ6_Kx8(blk, 4 * h + r), half);
          for (int c = 0; c < C; ++c)
            udots[c] = _mm256_add_epi32(udots[c], _mm256_mullo_epi32(dot[r][c], sc));
        }
      }
    }
    FinishQ6_Kx8<C>(blk, x, b, udots, acc);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + 8 * c, acc[c]);
}

// TileQ6_Kx8Vnni (LevelsQ6_Kx8, ScaleOfPair, FinishQ6_Kx8) on two groups of 8 rows at once (b0's
// rows in lanes 0-7, b1's in 8-15) with 512-bit vectors: out[c * 16 + r], each lane's integer
// sums and fp32 steps as there.
template <int C>
__attribute__((target(TINYSERVE_VNNI ",avx512bw"))) void TileQ6_Kx16Vnni(const uint8_t* g0,
                                                                         const uint8_t* g1,
                                                                         const Q8Row* x, int64_t k,
                                                                         float* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* b0 = g0 + kQ6_KRows8BlockBytes * b;
    const uint8_t* b1 = g1 + kQ6_KRows8BlockBytes * b;
    __m512i udots[C];
    for (int c = 0; c < C; ++c) udots[c] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      for (int half = 0; half < 2; ++half) {
        __m512i dot[4][C];
        for (int r = 0; r < 4; ++r)
          for (int c = 0; c < C; ++c) dot[r][c] = _mm512_setzero_si512();
        for (int i = 4 * half; i < 4 * half + 4; ++i) {
          const int off = kQ6X8Runs + 96 * (8 * h + i);
          const __m512i a = LoadPair32(b0 + off, b1 + off);
          const __m512i bb = LoadPair32(b0 + off + 32, b1 + off + 32);
          const __m512i q = LoadPair32(b0 + off + 64, b1 + off + 64);
          __m512i lv[4];
          lv[0] = _mm512_or_si512(_mm512_and_si512(a, m4),
                                  _mm512_and_si512(_mm512_slli_epi16(q, 4), m30));
          lv[1] = _mm512_or_si512(_mm512_and_si512(bb, m4),
                                  _mm512_and_si512(_mm512_slli_epi16(q, 2), m30));
          lv[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4),
                                  _mm512_and_si512(q, m30));
          lv[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(bb, 4), m4),
                                  _mm512_and_si512(_mm512_srli_epi16(q, 2), m30));
          for (int r = 0; r < 4; ++r) {
            for (int c = 0; c < C; ++c) {
              int32_t v;
              std::memcpy(&v, x[c].qs + 256 * b + 128 * h + 32 * r + 4 * i, 4);
              dot[r][c] = _mm512_dpbusd_epi32(dot[r][c], lv[r], _mm512_set1_epi32(v));
            }
          }
        }
        for (int r = 0; r < 4; ++r) {
          const int so = kQ6X8Scales + 16 * (4 * h + r);
          const __m512i pair = _mm512_maskz_cvtepi8_epi16(0xffffffff, LoadPair16(b0 + so, b1 + so));
          const __m512i sc = half == 0 ? _mm512_maskz_srai_epi32(
                                             0xffff, _mm512_maskz_slli_epi32(0xffff, pair, 16), 16)
                                       : _mm512_maskz_srai_epi32(0xffff, pair, 16);
          for (int c = 0; c < C; ++c)
            udots[c] = _mm512_add_epi32(udots[c], _mm512_mullo_epi32(dot[r][c], sc));
        }
      }
    }
    const __m512 d = _mm512_maskz_cvtph_ps(0xffff, LoadPair16(b0, b1));
    __m512i sp[8];
    for (int p = 0; p < 8; ++p) {
      const int so = kQ6X8Scales + 16 * p;
      sp[p] = _mm512_maskz_cvtepi8_epi16(0xffffffff, LoadPair16(b0 + so, b1 + so));
    }
    for (int c = 0; c < C; ++c) {
      const int16_t* sums = x[c].sums + 16 * b;
      __m512i offset = _mm512_setzero_si512();
      for (int p = 0; p < 8; ++p) {
        int32_t pair;
        std::memcpy(&pair, sums + 2 * p, 4);
        offset = _mm512_add_epi32(offset, _mm512_madd_epi16(sp[p], _mm512_set1_epi32(pair)));
      }
      const __m512i isum = _mm512_sub_epi32(udots[c], _mm512_maskz_slli_epi32(0xffff, offset, 5));
      acc[c] = _mm512_add_ps(
          acc[c], _mm512_mul_ps(_mm512_set1_ps(x[c].d[b]),
                                _mm512_mul_ps(d, _mm512_maskz_cvtepi32_ps(0xffff, isum))));
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + 16 * c, acc[c]);
}

// 8 interleaved Q8_0 rows against C activation rows: out[c * 8 + r]. AVX2: the signed bytes as
// |w| * (x * sign(w)) pairs (at most 2 * 128 * 127), madd with ones into the rows' lanes.
template <int C>
__attribute__((target("avx2,fma,f16c"))) void TileQ8_0x8(const uint8_t* g, const Q8Row* x,
                                                         int64_t k, float* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* blk = g + kQ8_0Rows8BlockBytes * b;
    __m256i dot[C];
    for (int c = 0; c < C; ++c) dot[c] = _mm256_setzero_si256();
    for (int i = 0; i < 8; ++i) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * i));
      const __m256i aw = _mm256_sign_epi8(wv, wv);
      for (int c = 0; c < C; ++c) {
        const __m256i xv = _mm256_sign_epi8(Broadcast4(x[c].qs + 32 * b + 4 * i), wv);
        dot[c] = _mm256_add_epi32(dot[c], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xv), ones));
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[c]),
                               _mm256_mul_ps(d, _mm256_set1_ps(x[c].d[b])), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + 8 * c, acc[c]);
}

// TileQ8_0x8 with vpdpbusd on the weights offset to unsigned (w + 128), each row's lane started
// at -128 * (the block's activation sum), so the lanes hold the signed dots.
template <int C>
__attribute__((target(TINYSERVE_VNNI))) void TileQ8_0x8Vnni(const uint8_t* g, const Q8Row* x,
                                                            int64_t k, float* out) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* blk = g + kQ8_0Rows8BlockBytes * b;
    __m256i dot[C];
    for (int c = 0; c < C; ++c) dot[c] = _mm256_set1_epi32(-128 * int32_t{x[c].sums[b]});
    for (int i = 0; i < 8; ++i) {
      const __m256i wu = _mm256_xor_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * i)), flip);
      for (int c = 0; c < C; ++c)
        dot[c] = _mm256_dpbusd_epi32(dot[c], wu, Broadcast4(x[c].qs + 32 * b + 4 * i));
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[c]),
                               _mm256_mul_ps(d, _mm256_set1_ps(x[c].d[b])), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + 8 * c, acc[c]);
}

// TileQ8_0x8Vnni on two groups of 8 rows at once (g0's rows in lanes 0-7, g1's in 8-15) with
// 512-bit vpdpbusd: out[c * 16 + r]. Each lane's integer dot and fp32 chain are TileQ8_0x8Vnni's;
// a CPU whose units are 512 bits wide (Zen 5) retires twice the multiply-adds per instruction.
template <int C>
__attribute__((target(TINYSERVE_VNNI))) void TileQ8_0x16Vnni(const uint8_t* g0, const uint8_t* g1,
                                                             const Q8Row* x, int64_t k,
                                                             float* out) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* b0 = g0 + kQ8_0Rows8BlockBytes * b;
    const uint8_t* b1 = g1 + kQ8_0Rows8BlockBytes * b;
    __m512i dot[C];
    for (int c = 0; c < C; ++c) dot[c] = _mm512_set1_epi32(-128 * int32_t{x[c].sums[b]});
    for (int i = 0; i < 8; ++i) {
      const __m512i w = LoadPair32(b0 + 16 + 32 * i, b1 + 16 + 32 * i);
      const __m512i wu = _mm512_xor_si512(w, flip);
      for (int c = 0; c < C; ++c) {
        int32_t v;
        std::memcpy(&v, x[c].qs + 32 * b + 4 * i, 4);
        dot[c] = _mm512_dpbusd_epi32(dot[c], wu, _mm512_set1_epi32(v));
      }
    }
    const __m512 d = _mm512_maskz_cvtph_ps(0xffff, LoadPair16(b0, b1));
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, dot[c]),
                               _mm512_mul_ps(d, _mm512_set1_ps(x[c].d[b])), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + 16 * c, acc[c]);
}

using TileX8Fn = void (*)(const uint8_t* g, const Q8Row* x, int64_t k, float* out);
constexpr int kMaxX8Cols = 4;
constexpr TileX8Fn kTilesQ4_Kx8[kMaxX8Cols] = {&TileQ4_Kx8<1>, &TileQ4_Kx8<2>, &TileQ4_Kx8<3>,
                                               &TileQ4_Kx8<4>};
constexpr TileX8Fn kTilesQ4_Kx8Vnni[kMaxX8Cols] = {&TileQ4_Kx8Vnni<1>, &TileQ4_Kx8Vnni<2>,
                                                   &TileQ4_Kx8Vnni<3>, &TileQ4_Kx8Vnni<4>};
constexpr TileX8Fn kTilesQ6_Kx8[kMaxX8Cols] = {&TileQ6_Kx8<1>, &TileQ6_Kx8<2>, &TileQ6_Kx8<3>,
                                               &TileQ6_Kx8<4>};
constexpr TileX8Fn kTilesQ6_Kx8Vnni[kMaxX8Cols] = {&TileQ6_Kx8Vnni<1>, &TileQ6_Kx8Vnni<2>,
                                                   &TileQ6_Kx8Vnni<3>, &TileQ6_Kx8Vnni<4>};
constexpr TileX8Fn kTilesQ8_0x8[kMaxX8Cols] = {&TileQ8_0x8<1>, &TileQ8_0x8<2>, &TileQ8_0x8<3>,
                                               &TileQ8_0x8<4>};
// Q8_0 on VNNI takes up to 8 activation rows a call (16 accumulators of AVX-512's 32 registers):
// one weight load and eight broadcasts a group of four bytes instead of one and four, so fewer
// loads per vpdpbusd (the K-quants' tiles hold more registers per row and stay at 4).
constexpr int kMaxX8ColsQ8_0Vnni = 8;
constexpr TileX8Fn kTilesQ8_0x8Vnni[kMaxX8ColsQ8_0Vnni] = {
    &TileQ8_0x8Vnni<1>, &TileQ8_0x8Vnni<2>, &TileQ8_0x8Vnni<3>, &TileQ8_0x8Vnni<4>,
    &TileQ8_0x8Vnni<5>, &TileQ8_0x8Vnni<6>, &TileQ8_0x8Vnni<7>, &TileQ8_0x8Vnni<8>};
using TileX16Fn = void (*)(const uint8_t* g0, const uint8_t* g1, const Q8Row* x, int64_t k,
                           float* out);
constexpr TileX16Fn kTilesQ4_Kx16Vnni[kMaxX8Cols] = {&TileQ4_Kx16Vnni<1>, &TileQ4_Kx16Vnni<2>,
                                                     &TileQ4_Kx16Vnni<3>, &TileQ4_Kx16Vnni<4>};
constexpr TileX16Fn kTilesQ6_Kx16Vnni[kMaxX8Cols] = {&TileQ6_Kx16Vnni<1>, &TileQ6_Kx16Vnni<2>,
                                                     &TileQ6_Kx16Vnni<3>, &TileQ6_Kx16Vnni<4>};
constexpr TileX16Fn kTilesQ8_0x16Vnni[kMaxX8ColsQ8_0Vnni] = {
    &TileQ8_0x16Vnni<1>, &TileQ8_0x16Vnni<2>, &TileQ8_0x16Vnni<3>, &TileQ8_0x16Vnni<4>,
    &TileQ8_0x16Vnni<5>, &TileQ8_0x16Vnni<6>, &TileQ8_0x16Vnni<7>, &TileQ8_0x16Vnni<8>};

// A tile kernel: TileQ8_0<R, C> and the others' signature.
using TileFn = void (*)(const uint8_t* const* w, const Q8Row* x, const int32_t* const* negsum,
                        int64_t k, float* out);

// Each kernel with its widest tile; Kernel::fn<R, C> is its instantiation.
struct Q8_0Avx2 {
  static constexpr int kMaxRows = 4, kMaxCols = 2;
  template <int R, int C>
  static constexpr TileFn fn = &TileQ8_0<R, C>;
};
struct Q8_0Vnni {
  static constexpr int kMaxRows = 4, kMaxCols = 4;
  template <int R, int C>
  static constexpr TileFn fn = &TileQ8_0Vnni<R, C>;
};
struct Q4_KAvx2 {
  static constexpr int kMaxRows = 1, kMaxCols = 4;
  template <int R, int C>
  static constexpr TileFn fn = &TileQ4_K<R, C>;
};
struct Q4_KVnni {
  static constexpr int kMaxRows = 1, kMaxCols = 4;
  template <int R, int C>
  static constexpr TileFn fn = &TileQ4_KVnni<R, C>;
};
struct Q5_KAvx2 {
  static constexpr int kMaxRows = 1, kMaxCols = 4;
  template <int R, int C>
  static constexpr TileFn fn = &TileQ5_K<R, C>;
};
struct Q6_KAvx2 {
  static constexpr int kMaxRows = 1, kMaxCols = 4;
  template <int R, int C>
  static constexpr TileFn fn = &TileQ6_K<R, C>;
};
static_assert(Q8_0Vnni::kMaxRows <= kMaxTileRows && Q8_0Vnni::kMaxCols <= kMaxTileCols);

// table[(R - 1) * kMaxCols + C - 1] = Kernel::fn<R, C>.
template <class Kernel, int... I>
constexpr std::array<TileFn, sizeof...(I)> TileTable(std::integer_sequence<int, I...>) {
  return {Kernel::template fn<I / Kernel::kMaxCols + 1, I % Kernel::kMaxCols + 1>...};
}

struct TileKernels {
  int max_rows = 0, max_cols = 0;
  const TileFn* table = nullptr;  // [max_rows * max_cols]
  TileFn at(int r, int c) const { return table[(r - 1) * max_cols + (c - 1)]; }
};

template <class Kernel>
TileKernels KernelsOf() {
  static constexpr auto table =
      TileTable<Kernel>(std::make_integer_sequence<int, Kernel::kMaxRows * Kernel::kMaxCols>());
  return {Kernel::kMaxRows, Kernel::kMaxCols, table.data()};
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

#ifdef TINYSERVE_QUANT_X86
// Whether rows of type t run through the tile kernels on `isa` (Q8_0 and Q4_K; not portable).
bool HasTileKernels(QuantType t, DotIsa isa) {
  return isa != DotIsa::kPortable && (t == QuantType::kQ8_0 || t == QuantType::kQ4_K ||
                                      t == QuantType::kQ5_K || t == QuantType::kQ6_K);
}

// REQUIRES: HasTileKernels(t, isa).
TileKernels TileKernelsFor(QuantType t, DotIsa isa) {
  const bool vnni = isa == DotIsa::kAvx512Vnni;
  switch (t) {
    case QuantType::kQ8_0:
      return vnni ? KernelsOf<Q8_0Vnni>() : KernelsOf<Q8_0Avx2>();
    case QuantType::kQ4_K:
      return vnni ? KernelsOf<Q4_KVnni>() : KernelsOf<Q4_KAvx2>();
    case QuantType::kQ5_K:  // (no VNNI twins: the AVX2 instructions run there too)
      return KernelsOf<Q5_KAvx2>();
    default:
      return KernelsOf<Q6_KAvx2>();
  }
}
#endif

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

bool HasRows8Layout(QuantType t) {
  return t == QuantType::kQ8_0 || t == QuantType::kQ4_K || t == QuantType::kQ6_K;
}

size_t Rows8Bytes(QuantType t, int32_t rows, int32_t cols) {
  const size_t block = t == QuantType::kQ8_0   ? kQ8_0Rows8BlockBytes
                       : t == QuantType::kQ4_K ? kQ4_KRows8BlockBytes
                                               : kQ6_KRows8BlockBytes;
  return static_cast<size_t>(rows / 8) * static_cast<size_t>(cols / QuantBlockElements(t)) * block;
}

void RepackRows8(QuantType t, const uint8_t* blocks, int32_t rows, int32_t cols, uint8_t* out) {
  const int64_t nb = cols / QuantBlockElements(t);
  const size_t row_bytes = QuantRowBytes(t, cols), in_block = QuantBlockBytes(t);
  const size_t out_block = Rows8Bytes(t, 8, QuantBlockElements(t));
  for (int32_t g = 0; g < rows / 8; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + (static_cast<size_t>(g) * nb + b) * out_block;
      for (int r = 0; r < 8; ++r) {
        const uint8_t* blk = blocks + (static_cast<size_t>(g) * 8 + r) * row_bytes + in_block * b;
        if (t == QuantType::kQ8_0) {
          std::memcpy(o + 2 * r, blk, 2);  // d
          for (int c = 0; c < 8; ++c) std::memcpy(o + 16 + 32 * c + 4 * r, blk + 2 + 4 * c, 4);
        } else if (t == QuantType::kQ4_K) {
          std::memcpy(o + 2 * r, blk, 2);                // d
          std::memcpy(o + kX8Dmin + 2 * r, blk + 2, 2);  // dmin
          uint8_t sc[8], mn[8];
          ScalesMinsK4(blk + 4, sc, mn);
          for (int sb = 0; sb < 8; ++sb) {
            o[kX8Scales + 8 * sb + r] = sc[sb];
            o[kX8Mins + 16 * (sb / 2) + 2 * r + sb % 2] = mn[sb];
          }
          for (int c = 0; c < 32; ++c) std::memcpy(o + kX8Qs + 32 * c + 4 * r, blk + 16 + 4 * c, 4);
        } else {
          std::memcpy(o + 2 * r, blk + 208, 2);  // d
          for (int sb = 0; sb < 16; ++sb)
            o[kQ6X8Scales + 16 * (sb / 2) + 2 * r + sb % 2] = blk[192 + sb];
          for (int h = 0; h < 2; ++h) {
            for (int i = 0; i < 8; ++i) {
              uint8_t* run = o + kQ6X8Runs + 96 * (8 * h + i) + 4 * r;
              std::memcpy(run, blk + 64 * h + 4 * i, 4);
              std::memcpy(run + 32, blk + 64 * h + 32 + 4 * i, 4);
              std::memcpy(run + 64, blk + 128 + 32 * h + 4 * i, 4);
            }
          }
        }
      }
    }
  }
}

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
    // Only the row tiles read them: not needed when every Q8_0 part is interleaved from an 8-row
    // boundary (its groups then line up with the work items, so no row of it runs alone).
    bool row_tiles = false;
    for (int p = 0, start = 0; p < w.num_parts; start += w.parts[p].rows, ++p) {
      row_tiles |=
          w.parts[p].type == QuantType::kQ8_0 && (w.parts[p].rows8 == nullptr || start % 8 != 0);
    }
    const bool with_negsum = f == 0 && isa == DotIsa::kAvx512Vnni && row_tiles;
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
  // Each work item (a run of output rows, a multiple of 16) holds about kItemBytes of weight
  // blocks per activation row: smaller items made decode at batch 1 spend its time handing items
  // out (16 rows of a 768-column Q8_0 matrix are 13 KB; stories110M Q8_0 ran at 1.7x the tokens/s
  // with ~256 KB items on 2 threads, bench/RESULTS.md), much larger ones leave a thread idle at the
  // end of a small matrix. Which thread computes a row changes no bits.
  constexpr int64_t kItemBytes = int64_t{256} << 10;
  const int64_t work_per_row = static_cast<int64_t>(QuantRowBytes(w.parts[0].type, k)) * m;
  const int32_t rows_per_item =
      static_cast<int32_t>(std::max<int64_t>(16, (kItemBytes / work_per_row + 15) / 16 * 16));
  const int64_t items = (n + rows_per_item - 1) / rows_per_item;
  parallel_for(items, [&](int64_t item) {
    static thread_local std::vector<int32_t> dots;
    dots.resize(static_cast<size_t>(k / 16));
    const int32_t j_end = std::min<int32_t>(n, static_cast<int32_t>((item + 1) * rows_per_item));
    int32_t j = static_cast<int32_t>(item * rows_per_item);
    // The item's rows part by part: [j, seg_end) are rows [local, ...) of one part.
    while (j < j_end) {
      int32_t local = 0;
      const QuantMatrixPart& part = w.parts[PartOfRow(w, j, &local)];
      const int32_t seg_end = std::min(j_end, j + (part.rows - local));
      const size_t wrow_bytes = QuantRowBytes(part.type, k);
      const uint8_t* wrow = part.blocks + wrow_bytes * local;
      const bool k_quant = IsKQuant(part.type);
      const std::vector<Q8Row>& xr = rows[k_quant ? 1 : 0];
#ifdef TINYSERVE_QUANT_X86
      if (part.rows8 != nullptr && isa != DotIsa::kPortable) {
        // Whole groups of 8 from the interleaved copy; a row outside one (the item or the segment
        // cuts a group) through the one-row tiles. Both give DotRowReference's bits.
        const bool vnni = isa == DotIsa::kAvx512Vnni;
        const TileX8Fn* x8 =
            part.type == QuantType::kQ8_0   ? (vnni ? kTilesQ8_0x8Vnni : kTilesQ8_0x8)
            : part.type == QuantType::kQ4_K ? (vnni ? kTilesQ4_Kx8Vnni : kTilesQ4_Kx8)
                                            : (vnni ? kTilesQ6_Kx8Vnni : kTilesQ6_Kx8);
        const int32_t x8_cols =
            part.type == QuantType::kQ8_0 && vnni ? kMaxX8ColsQ8_0Vnni : kMaxX8Cols;
        const int32_t* const* ns = k_quant || negsum.empty() ? nullptr : negsum.data();
        const TileKernels single = TileKernelsFor(part.type, isa);
        const size_t group_bytes = Rows8Bytes(part.type, 8, k);
        // On VNNI, two whole groups at a time in 512-bit registers where both are here, from
        // 2 activation rows for Q8_0 and 4 for the K-quants (which also need AVX512BW). On Zen 5,
        // 16384 x 4096 matrices: batch 32 1.7x faster (Q8_0, Q4_K, Q6_K), batch 4 Q8_0 1.5x,
        // Q6_K 1.3x, Q4_K level; at batch 2 Q8_0 1.1x faster, the K-quants 1.1-1.4x slower; at
        // batch 1, which streams the weights from memory, a Q8_0 decode step 16% slower.
        static const bool avx512bw = __builtin_cpu_supports("avx512bw");
        const bool q8 = part.type == QuantType::kQ8_0;
        const TileX16Fn* x16 = !vnni || m < (q8 ? 2 : 4) || (!q8 && !avx512bw) ? nullptr
                               : q8                                            ? kTilesQ8_0x16Vnni
                               : part.type == QuantType::kQ4_K                 ? kTilesQ4_Kx16Vnni
                                                                               : kTilesQ6_Kx16Vnni;
        while (j < seg_end) {
          const bool group = local % 8 == 0 && seg_end - j >= 8;
          const bool pair = x16 != nullptr && group && seg_end - j >= 16;
          const uint8_t* g = part.rows8 + group_bytes * (local / 8);
          const uint8_t* row = part.blocks + wrow_bytes * local;
          for (int32_t i = 0; i < m; i += x8_cols) {
            const int c = std::min<int32_t>(x8_cols, m - i);
            float out[16 * kMaxX8ColsQ8_0Vnni];
            if (pair) {
              x16[c - 1](g, g + group_bytes, &xr[i], k, out);
              for (int v = 0; v < c; ++v) {
                std::memcpy(y + static_cast<size_t>(i + v) * n + j, out + 16 * v,
                            16 * sizeof(float));
              }
            } else if (group) {
              x8[c - 1](g, &xr[i], k, out);
              for (int v = 0; v < c; ++v)
                std::memcpy(y + static_cast<size_t>(i + v) * n + j, out + 8 * v, 8 * sizeof(float));
            } else {
              const int c1 = std::min(c, single.max_cols);
              for (int i1 = 0; i1 < c; i1 += c1) {
                const int cc = std::min(c1, c - i1);
                single.at(1, cc)(&row, &xr[i + i1], ns == nullptr ? nullptr : ns + i + i1, k, out);
                for (int v = 0; v < cc; ++v) y[static_cast<size_t>(i + i1 + v) * n + j] = out[v];
              }
            }
          }
          const int32_t step = pair ? 16 : group ? 8 : 1;
          j += step;
          local += step;
        }
        continue;
      }
      if (HasTileKernels(part.type, isa)) {
        // Tiles of up to tile_rows weight rows (the kernel's widest from kRowTileMinBatch
        // activation rows on, else 1), each against the activation rows max_cols at a time.
        const TileKernels kernels = TileKernelsFor(part.type, isa);
        const int32_t tile_rows = m >= kRowTileMinBatch ? kernels.max_rows : 1;
        const int32_t* const* ns = k_quant || negsum.empty() ? nullptr : negsum.data();
        // (The last tile of a segment may be partial: j moves by the rows it held, so a part
        // that follows starts where this one ends.)
        for (int r = 0; j < seg_end; j += r, wrow += wrow_bytes * r) {
          r = std::min<int32_t>(tile_rows, seg_end - j);
          const uint8_t* tile_w[kMaxTileRows];
          for (int u = 0; u < r; ++u) tile_w[u] = wrow + wrow_bytes * u;
          float out[kMaxTileRows * kMaxTileCols];
          for (int32_t i = 0; i < m; i += kernels.max_cols) {
            const int c = std::min<int32_t>(kernels.max_cols, m - i);
            kernels.at(r, c)(tile_w, &xr[i], ns == nullptr ? nullptr : ns + i, k, out);
            for (int v = 0; v < c; ++v) {
              float* yrow = y + static_cast<size_t>(i + v) * n + j;
              for (int u = 0; u < r; ++u) yrow[u] = out[v * r + u];
            }
          }
        }
        continue;
      }
#endif
      for (; j < seg_end; ++j, wrow += wrow_bytes) {
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
