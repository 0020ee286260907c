// Packed fp32 GEMM kernels (see packed_gemm.h for the order contract).
//
// Each kernel computes a tile of MR rows x NP panels (NP * 16 columns) with one register
// accumulator per (row, 16 or 8 columns), the whole k loop at once: for each p it loads NP panel
// rows of w, broadcasts x[r, p] and issues one FMA per accumulator. A lane never meets another
// lane, so the tile shape changes the speed, never the bits.
#include "kernels/cpu/packed_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tinyserve {
namespace {

constexpr int32_t kW = kPanelWidth;
// Rows per block: a block of x (kRowBlock x k floats) stays in L2 while the panels stream past.
constexpr int32_t kRowBlock = 64;

// What a tile prefetches into L2 while it computes: `lines` cache lines at `next` per step of p,
// never past `end` (next == end: nothing). GemmPackedPanels points it at the next panel group, so
// that the DRAM reads of a group overlap the row tiles that reread the current one from L2.
struct Prefetch {
  const char* next = nullptr;
  const char* end = nullptr;
  int32_t lines = 0;
};

// One tile: rows [0, mr) of x (row stride k), panels starting at `panel` (panel stride k * 16),
// writing y (row stride ldy) for `ncols` columns (<= np * 16), prefetching Prefetch{pf_next,
// pf_end, pf_lines}: three scalars, not the struct by value, which goes through the stack, where
// the caller's 16-byte reload of its two separately stored pointers missed store forwarding
// before every tile (2.4-2.7% of an offline run's samples on Zen 1; decode_bench 1% faster).
using TileFn = void (*)(const float* x, int32_t k, const float* panel, float* y, int32_t ldy,
                        int32_t ncols, const char* pf_next, const char* pf_end, int32_t pf_lines);

template <int MR, int NP>
void TilePortable(const float* x, int32_t k, const float* panel, float* y, int32_t ldy,
                  int32_t ncols, const char*, const char*, int32_t) {
  float acc[MR][NP * kW] = {};
  const size_t ps = static_cast<size_t>(k) * kW;
  for (int32_t p = 0; p < k; ++p) {
    for (int r = 0; r < MR; ++r) {
      const float xv = x[static_cast<size_t>(r) * k + p];
      for (int q = 0; q < NP; ++q) {
        const float* w = panel + q * ps + static_cast<size_t>(p) * kW;
        for (int c = 0; c < kW; ++c) acc[r][q * kW + c] = std::fma(xv, w[c], acc[r][q * kW + c]);
      }
    }
  }
  for (int r = 0; r < MR; ++r) std::memcpy(y + static_cast<size_t>(r) * ldy, acc[r], 4 * ncols);
}

#if defined(__x86_64__)
// One step of a tile's prefetch (Prefetch above); a hint, so it never changes a result.
inline void PrefetchStep(Prefetch& pf) {
  for (int32_t l = 0; l < pf.lines && pf.next < pf.end; ++l, pf.next += 64) {
    _mm_prefetch(pf.next, _MM_HINT_T1);
  }
}

template <int MR, int NP>
__attribute__((target("avx512f"))) void TileAvx512(const float* x, int32_t k, const float* panel,
                                                   float* y, int32_t ldy, int32_t ncols,
                                                   const char* pf_next, const char* pf_end,
                                                   int32_t pf_lines) {
  Prefetch pf{pf_next, pf_end, pf_lines};
  __m512 acc[MR][NP];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) acc[r][q] = _mm512_setzero_ps();
  }
  const size_t ps = static_cast<size_t>(k) * kW;
  for (int32_t p = 0; p < k; ++p) {
    PrefetchStep(pf);
    __m512 w[NP];
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q)
      w[q] = _mm512_loadu_ps(panel + q * ps + static_cast<size_t>(p) * kW);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 xv = _mm512_set1_ps(x[static_cast<size_t>(r) * k + p]);
#pragma GCC unroll 4
      for (int q = 0; q < NP; ++q) acc[r][q] = _mm512_fmadd_ps(xv, w[q], acc[r][q]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* yr = y + static_cast<size_t>(r) * ldy;
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      const int32_t cols = std::min(kW, ncols - q * kW);
      if (cols == kW) {
        _mm512_storeu_ps(yr + q * kW, acc[r][q]);
      } else if (cols > 0) {
        _mm512_mask_storeu_ps(yr + q * kW, static_cast<__mmask16>((1u << cols) - 1), acc[r][q]);
      }
    }
  }
}

template <int MR, int NP>
__attribute__((target("avx2,fma"))) void TileAvx2(const float* x, int32_t k, const float* panel,
                                                  float* y, int32_t ldy, int32_t ncols,
                                                  const char* pf_next, const char* pf_end,
                                                  int32_t pf_lines) {
  Prefetch pf{pf_next, pf_end, pf_lines};
  __m256 acc[MR][2 * NP];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int q = 0; q < 2 * NP; ++q) acc[r][q] = _mm256_setzero_ps();
  }
  const size_t ps = static_cast<size_t>(k) * kW;
  for (int32_t p = 0; p < k; ++p) {
    PrefetchStep(pf);
    __m256 w[2 * NP];
#pragma GCC unroll 8
    for (int q = 0; q < 2 * NP; ++q) {
      w[q] = _mm256_loadu_ps(panel + (q / 2) * ps + static_cast<size_t>(p) * kW + (q % 2) * 8);
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 xv = _mm256_broadcast_ss(x + static_cast<size_t>(r) * k + p);
#pragma GCC unroll 8
      for (int q = 0; q < 2 * NP; ++q) acc[r][q] = _mm256_fmadd_ps(xv, w[q], acc[r][q]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* yr = y + static_cast<size_t>(r) * ldy;
#pragma GCC unroll 8
    for (int q = 0; q < 2 * NP; ++q) {
      const int32_t cols = std::min(8, ncols - q * 8);
      if (cols == 8) {
        _mm256_storeu_ps(yr + q * 8, acc[r][q]);
      } else if (cols > 0) {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, acc[r][q]);
        std::memcpy(yr + q * 8, tmp, 4 * cols);
      }
    }
  }
}
#endif

// A kernel family: its tiles for every (mr, np) up to the family's maxima.
struct Isa {
  const char* name;
  int32_t max_rows;    // MR of the full tile
  int32_t max_panels;  // NP of the full tile for m > 1
  // NP for m = 1 .. 4, one tile of few rows (decode): more chains in flight per row.
  int32_t few_rows_panels[4];
  TileFn tiles[8][4];  // [mr - 1][np - 1]
};

#define TS_TILE_ROW(FN, MR) \
  { &FN<MR, 1>, &FN<MR, 2>, &FN<MR, 3>, &FN<MR, 4> }
#define TS_TILE_TABLE(FN)                                                              \
  {                                                                                    \
    TS_TILE_ROW(FN, 1), TS_TILE_ROW(FN, 2), TS_TILE_ROW(FN, 3), TS_TILE_ROW(FN, 4),    \
        TS_TILE_ROW(FN, 5), TS_TILE_ROW(FN, 6), TS_TILE_ROW(FN, 7), TS_TILE_ROW(FN, 8) \
  }

const Isa kPortable{"portable", 4, 1, {1, 1, 1, 1}, TS_TILE_TABLE(TilePortable)};
#if defined(__x86_64__)
// AVX-512: 8 rows x 3 panels = 24 zmm accumulators + 3 weights + 1 broadcast of 32 registers.
const Isa kAvx512{"avx512", 8, 3, {4, 3, 3, 3}, TS_TILE_TABLE(TileAvx512)};
// AVX2: 6 rows x 1 panel = 12 ymm accumulators + 2 weights + 1 broadcast of 16 registers. A
// lone tile of 2 or 3 rows takes 3 or 2 panels (12 chains; the weights of a 3 x 2 tile are read
// from L1 again where registers run out): on a 2-vCPU AMD EPYC VM batch-2 and -3 decode ran 5-17%
// faster than with 1 panel; 4 rows x 2 panels was no faster (bench/RESULTS.md).
const Isa kAvx2{"avx2", 6, 1, {4, 3, 2, 1}, TS_TILE_TABLE(TileAvx2)};
#endif
#undef TS_TILE_TABLE
#undef TS_TILE_ROW

const Isa* BestIsa() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return &kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &kAvx2;
#endif
  return &kPortable;
}

const Isa*& ActiveIsa() {
  static const Isa* isa = BestIsa();
  return isa;
}

}  // namespace

void PackPanels(const float* w, int32_t n, int32_t k, float* packed) {
  const int32_t panels = NumPanels(n);
  for (int32_t pb = 0; pb < panels; ++pb) {
    float* dst = packed + static_cast<size_t>(pb) * k * kW;
    for (int32_t p = 0; p < k; ++p) {
      for (int32_t c = 0; c < kW; ++c) {
        const int32_t j = pb * kW + c;
        dst[static_cast<size_t>(p) * kW + c] = j < n ? w[static_cast<size_t>(j) * k + p] : 0.0f;
      }
    }
  }
}

void UnpackRow(const float* packed, int32_t k, int32_t j, float* out) {
  const float* src = packed + static_cast<size_t>(j / kW) * k * kW + j % kW;
  for (int32_t p = 0; p < k; ++p) out[p] = src[static_cast<size_t>(p) * kW];
}

void GemmPackedPanels(const float* x, const float* packed, int32_t m, int32_t n, int32_t k,
                      int32_t pb0, int32_t pb1, float* y, int32_t then0, int32_t then1) {
  const Isa& isa = *ActiveIsa();
  const int32_t np_max = PackedGemmGroupPanels(m);
  const size_t panel_floats = static_cast<size_t>(k) * kW;
  for (int32_t i0 = 0; i0 < m; i0 += kRowBlock) {
    const int32_t i1 = std::min(m, i0 + kRowBlock);
    const int32_t row_tiles = (i1 - i0 + isa.max_rows - 1) / isa.max_rows;
    for (int32_t pb = pb0; pb < pb1; pb += np_max) {
      const int32_t np = std::min(np_max, pb1 - pb);
      const int32_t col = pb * kW;
      const int32_t ncols = std::min(n - col, np * kW);
      // The row tiles after the first reread this group from L2 (it is np * k * 64 bytes) and
      // share the prefetch of the next group (in this range) between them, a few lines per p.
      int32_t next_pb = pb + np, next_np = std::min(np_max, pb1 - pb - np);
      if (next_np == 0 && i1 == m && then1 > then0) {  // the last group: the caller's next one
        next_pb = then0;
        next_np = std::min(np_max, then1 - then0);
      }
      Prefetch pf;
      if (row_tiles > 1 && next_np > 0) {
        pf.next = reinterpret_cast<const char*>(packed + next_pb * panel_floats);
        pf.end = pf.next + static_cast<size_t>(next_np) * panel_floats * sizeof(float);
        pf.lines = (next_np + row_tiles - 2) / (row_tiles - 1);
      }
      // The rows are shared out evenly (32 rows in AVX2's 6-row tiles: 6, 6, 5, 5, 5, 5, not
      // 6 x 5 + 2): a tile of few rows has too few accumulator chains to hide the FMA latency
      // and costs nearly a full tile's time.
      const int32_t base_rows = (i1 - i0) / row_tiles, extra = (i1 - i0) % row_tiles;
      for (int32_t i = i0, t = 0; i < i1; ++t) {
        const int32_t mr = base_rows + (t < extra ? 1 : 0);
        Prefetch tile_pf;
        if (t > 0 && pf.lines > 0) {
          tile_pf = pf;
          const size_t skip = static_cast<size_t>(t - 1) * pf.lines * k * 64;
          tile_pf.next = skip < static_cast<size_t>(pf.end - pf.next) ? pf.next + skip : pf.end;
        }
        isa.tiles[mr - 1][np - 1](x + static_cast<size_t>(i) * k, k, packed + pb * panel_floats,
                                  y + static_cast<size_t>(i) * n + col, n, ncols, tile_pf.next,
                                  tile_pf.end, tile_pf.lines);
        i += mr;
      }
    }
  }
}

void GemmReference(const float* x, const float* w, int32_t m, int32_t n, int32_t k, float* y) {
  for (int32_t i = 0; i < m; ++i) {
    for (int32_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int32_t p = 0; p < k; ++p) {
        acc = std::fma(x[static_cast<size_t>(i) * k + p], w[static_cast<size_t>(j) * k + p], acc);
      }
      y[static_cast<size_t>(i) * n + j] = acc;
    }
  }
}

int32_t PackedGemmGroupPanels(int32_t m) {
  const Isa& isa = *ActiveIsa();
  return m <= 4 ? isa.few_rows_panels[std::max(m, 1) - 1] : isa.max_panels;
}

const char* PackedGemmIsa() { return ActiveIsa()->name; }

bool SetPackedGemmIsaForTesting(const char* isa) {
  const std::string_view want(isa);
  if (want == "best") {
    ActiveIsa() = BestIsa();
    return true;
  }
  if (want == "portable") {
    ActiveIsa() = &kPortable;
    return true;
  }
#if defined(__x86_64__)
  if (want == "avx512" && __builtin_cpu_supports("avx512f")) {
    ActiveIsa() = &kAvx512;
    return true;
  }
  if (want == "avx2" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    ActiveIsa() = &kAvx2;
    return true;
  }
#endif
  return false;
}

}  // namespace tinyserve
