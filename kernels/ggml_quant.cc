// Compiled with -ffp-contract=off (kernels/CMakeLists.txt): every float expression here rounds
// after each operation, so the dequantized values, the quantizers and the per-block dot-product
// combination are the same bits whoever calls them.
#include "kernels/ggml_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tinyserve {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void Store16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
float LoadHalf(const uint8_t* p) { return HalfToFloat(Load16(p)); }

// Round to nearest, ties to even, for |f| < 2^22 (ggml's nearest_int: the 1.5 * 2^23 trick).
int NearestInt(float f) {
  const float v = f + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block's 12 scale bytes.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The (value, index) of the element of largest magnitude, the first one on ties.
float SignedAbsMax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// ---- reference quantizers (ggml-quants.c, quantize_row_*_ref) ---------------------------------

void QuantizeQ8_0(const float* x, uint8_t* y) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  Store16(y, FloatToHalf(d));
  for (int j = 0; j < 32; ++j)
    y[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

// Q4_0 (nmax 8, bits 4) and Q5_0 (16, 5): symmetric around the largest-magnitude element.
void QuantizeSymmetric(const float* x, int nmax, uint8_t* y) {
  const float max = SignedAbsMax(x, 32);
  const float d = max / static_cast<float>(-nmax);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  Store16(y, FloatToHalf(d));
  const int top = 2 * nmax - 1;
  const float offset = static_cast<float>(nmax) + 0.5f;
  uint32_t qh = 0;
  uint8_t* qs = y + (nmax == 8 ? 2 : 6);
  for (int j = 0; j < 16; ++j) {
    const int a = std::min(top, static_cast<int>(static_cast<int8_t>(x[j] * id + offset)));
    const int b = std::min(top, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + offset)));
    qs[j] = static_cast<uint8_t>((a & 0xF) | ((b & 0xF) << 4));
    qh |= static_cast<uint32_t>((a >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((b >> 4) & 1) << (j + 16);
  }
  if (nmax == 16) std::memcpy(y + 2, &qh, 4);
}

// Q4_1 (levels 15) and Q5_1 (31): min + d * q.
void QuantizeWithMin(const float* x, int levels, uint8_t* y) {
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / static_cast<float>(levels);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  Store16(y, FloatToHalf(d));
  Store16(y + 2, FloatToHalf(min));
  uint32_t qh = 0;
  uint8_t* qs = y + (levels == 15 ? 4 : 8);
  for (int j = 0; j < 16; ++j) {
    int a, b;
    if (levels == 15) {
      a = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      b = std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
    } else {
      a = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
      b = static_cast<uint8_t>((x[j + 16] - min) * id + 0.5f);
    }
    qs[j] = static_cast<uint8_t>((a & 0xF) | ((b & 0xF) << 4));
    qh |= static_cast<uint32_t>((a >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((b >> 4) & 1) << (j + 16);
  }
  if (levels == 31) std::memcpy(y + 4, &qh, 4);
}

// ggml's make_qkx2_quants: a scale and a min (returned in *the_min, negated) for n values on
// levels [0, nmax], searched over nstep + 1 candidate scales by weighted squared error.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * static_cast<float>(l);
      sum_l2 += w * static_cast<float>(l) * static_cast<float>(l);
      sum_xl += w * static_cast<float>(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights: a signed scale for n values
// on levels [-nmax, nmax - 1] (stored + nmax in L), refined over 18 candidate scales.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  auto clamp = [nmax](int l) { return std::max(-nmax, std::min(nmax - 1, l)); };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp(NearestInt(iscale * x[i]));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp(NearestInt(iscale * x[i]));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        L[i] = static_cast<int8_t>(nmax + clamp(NearestInt(iscale * x[i])));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q4_K (nmax 15) and Q5_K (31): eight sub-blocks of 32 with 6-bit scales and mins.
void QuantizeK4K5(const float* x, int nmax, uint8_t* y) {
  uint8_t L[256], Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = nmax == 15 ? MakeQkx2Quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                            -1.0f, 0.1f, 20)
                           : MakeQkx2Quants(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                            -0.5f, 0.1f, 15);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  uint8_t* sc = y + 4;
  std::memset(sc, 0, 12);
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      sc[j] = ls;
      sc[j + 4] = lm;
    } else {
      sc[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      sc[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      sc[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  Store16(y, FloatToHalf(max_scale / 63.0f));
  Store16(y + 2, FloatToHalf(max_min / 63.0f));
  const float dd = LoadHalf(y), dmin = LoadHalf(y + 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    ScaleMinK4(j, sc, &s, &m);
    const float d = dd * s;
    if (d == 0.0f) continue;
    const float dm = dmin * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = NearestInt((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
  if (nmax == 15) {
    uint8_t* q = y + 16;
    for (int j = 0; j < 256; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
    return;
  }
  uint8_t* qh = y + 16;
  uint8_t* ql = y + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < 256; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] |= m1;
      }
      int l2 = L[n + j + 32];
      if (l2 > 15) {
        l2 -= 16;
        qh[j] |= m2;
      }
      ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<uint8_t>(m1 << 2);
    m2 = static_cast<uint8_t>(m2 << 2);
  }
}

void QuantizeQ6K(const float* x, uint8_t* y) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float scale = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib);
    scales[ib] = scale;
    if (std::fabs(scale) > max_abs_scale) {
      max_abs_scale = std::fabs(scale);
      max_scale = scale;
    }
  }
  std::memset(y, 0, 210);
  if (max_abs_scale < 1e-15f) return;  // d = 0, all zero
  const float iscale = -128.0f / max_scale;
  Store16(y + 208, FloatToHalf(1 / iscale));
  int8_t* sc = reinterpret_cast<int8_t*>(y + 192);
  for (int ib = 0; ib < 16; ++ib)
    sc[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
  const float dd = LoadHalf(y + 208);
  for (int j = 0; j < 16; ++j) {
    const float d = dd * sc[j];
    if (d == 0.0f) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt(x[16 * j + ii] / d);
      L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
    }
  }
  uint8_t* ql = y;
  uint8_t* qh = y + 128;
  for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
      ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
      qh[l] =
          static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
}

// ---- dequantization (ggml-quants.c, dequantize_row_*) -----------------------------------------

// The integer levels of one block of a legacy type: q[j] for j < 32 (signed for Q4_0/Q5_0/Q8_0,
// as the dot products use them).
void LegacyLevels(QuantType t, const uint8_t* b, int32_t* q) {
  switch (t) {
    case QuantType::kQ8_0:
      for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(b[2 + j]);
      return;
    case QuantType::kQ4_0:
      for (int j = 0; j < 16; ++j) {
        q[j] = (b[2 + j] & 0xF) - 8;
        q[j + 16] = (b[2 + j] >> 4) - 8;
      }
      return;
    case QuantType::kQ4_1:
      for (int j = 0; j < 16; ++j) {
        q[j] = b[4 + j] & 0xF;
        q[j + 16] = b[4 + j] >> 4;
      }
      return;
    case QuantType::kQ5_0:
    case QuantType::kQ5_1: {
      const int off = t == QuantType::kQ5_0 ? 2 : 4;
      uint32_t qh;
      std::memcpy(&qh, b + off, 4);
      const int bias = t == QuantType::kQ5_0 ? 16 : 0;
      for (int j = 0; j < 16; ++j) {
        q[j] = ((b[off + 4 + j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4)) - bias;
        q[j + 16] = ((b[off + 4 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4)) - bias;
      }
      return;
    }
    default:
      return;
  }
}

// The levels of a K-quant super-block: q[256] (Q4_K 0..15, Q5_K 0..31, Q6_K -32..31).
void KLevels(QuantType t, const uint8_t* b, int32_t* q) {
  if (t == QuantType::kQ6_K) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    for (int n = 0; n < 256; n += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        q[n + l] = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        q[n + l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        q[n + l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        q[n + l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      }
    }
    return;
  }
  const bool five = t == QuantType::kQ5_K;
  const uint8_t* qs = b + (five ? 48 : 16);
  const uint8_t* qh = b + 16;
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) {
      int lo = qs[32 * g + l] & 0xF, hi = qs[32 * g + l] >> 4;
      if (five) {
        lo |= ((qh[l] >> (2 * g)) & 1) << 4;
        hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
      }
      q[64 * g + l] = lo;
      q[64 * g + 32 + l] = hi;
    }
  }
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return FromBits(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
  const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign != 0 ? -magnitude : magnitude;
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;
  if (abs >= 0x477ff000u) return sign | 0x7c00u;
  if (abs < 0x38800000u) {
    const float r = std::nearbyint(FromBits(abs) * 16777216.0f);
    return sign | static_cast<uint16_t>(r);
  }
  const uint32_t rebased = abs - (112u << 23);
  const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>(rounded >> 13);
}

std::optional<QuantType> QuantTypeOfGgml(uint32_t ggml_type) {
  switch (ggml_type) {
    case 2:
    case 3:
    case 6:
    case 7:
    case 8:
    case 12:
    case 13:
    case 14:
      return static_cast<QuantType>(ggml_type);
    default:
      return std::nullopt;
  }
}

const char* QuantTypeName(QuantType t) {
  switch (t) {
    case QuantType::kQ4_0:
      return "q4_0";
    case QuantType::kQ4_1:
      return "q4_1";
    case QuantType::kQ5_0:
      return "q5_0";
    case QuantType::kQ5_1:
      return "q5_1";
    case QuantType::kQ8_0:
      return "q8_0";
    case QuantType::kQ4_K:
      return "q4_K";
    case QuantType::kQ5_K:
      return "q5_K";
    case QuantType::kQ6_K:
      return "q6_K";
  }
  return "?";
}

int32_t QuantBlockElements(QuantType t) { return IsKQuant(t) ? 256 : 32; }

int32_t QuantBlockBytes(QuantType t) {
  switch (t) {
    case QuantType::kQ4_0:
      return 18;
    case QuantType::kQ4_1:
      return 20;
    case QuantType::kQ5_0:
      return 22;
    case QuantType::kQ5_1:
      return 24;
    case QuantType::kQ8_0:
      return 34;
    case QuantType::kQ4_K:
      return 144;
    case QuantType::kQ5_K:
      return 176;
    case QuantType::kQ6_K:
      return 210;
  }
  return 0;
}

void DequantizeRow(QuantType t, const uint8_t* src, int64_t k, float* dst) {
  const int64_t qk = QuantBlockElements(t);
  const int32_t bytes = QuantBlockBytes(t);
  int32_t q[256];
  for (int64_t i = 0; i < k / qk; ++i, src += bytes, dst += qk) {
    if (!IsKQuant(t)) {
      LegacyLevels(t, src, q);
      const float d = LoadHalf(src);
      const bool has_min = t == QuantType::kQ4_1 || t == QuantType::kQ5_1;
      const float m = has_min ? LoadHalf(src + 2) : 0.0f;
      for (int j = 0; j < 32; ++j) dst[j] = has_min ? q[j] * d + m : q[j] * d;
      continue;
    }
    KLevels(t, src, q);
    if (t == QuantType::kQ6_K) {
      const float d = LoadHalf(src + 208);
      const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
      for (int j = 0; j < 256; ++j) dst[j] = d * sc[j / 16] * q[j];
      continue;
    }
    const float d = LoadHalf(src), dmin = LoadHalf(src + 2);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      ScaleMinK4(s, src + 4, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      for (int l = 0; l < 32; ++l) dst[32 * s + l] = d1 * q[32 * s + l] - m1;
    }
  }
}

void QuantizeRowReference(QuantType t, const float* src, int64_t k, uint8_t* dst) {
  const int64_t qk = QuantBlockElements(t);
  const int32_t bytes = QuantBlockBytes(t);
  for (int64_t i = 0; i < k / qk; ++i, src += qk, dst += bytes) {
    switch (t) {
      case QuantType::kQ8_0:
        QuantizeQ8_0(src, dst);
        break;
      case QuantType::kQ4_0:
        QuantizeSymmetric(src, 8, dst);
        break;
      case QuantType::kQ5_0:
        QuantizeSymmetric(src, 16, dst);
        break;
      case QuantType::kQ4_1:
        QuantizeWithMin(src, 15, dst);
        break;
      case QuantType::kQ5_1:
        QuantizeWithMin(src, 31, dst);
        break;
      case QuantType::kQ4_K:
        QuantizeK4K5(src, 15, dst);
        break;
      case QuantType::kQ5_K:
        QuantizeK4K5(src, 31, dst);
        break;
      case QuantType::kQ6_K:
        QuantizeQ6K(src, dst);
        break;
    }
  }
}

// ---- activations --------------------------------------------------------------------------------

size_t ActivationBytes(QuantType t, int64_t k) {
  auto up = [](size_t b) { return (b + 63) / 64 * 64; };
  const int64_t per = IsKQuant(t) ? 256 : 32;
  const int64_t sums = IsKQuant(t) ? k / 16 : k / 32;
  return up(static_cast<size_t>(k)) + 2 * up(static_cast<size_t>(k / per) * 4) +
         up(static_cast<size_t>(sums) * 2);
}

Q8Row QuantizeActivations(QuantType t, const float* x, int64_t k, void* storage) {
  auto up = [](size_t b) { return (b + 63) / 64 * 64; };
  uint8_t* base = static_cast<uint8_t*>(storage);
  Q8Row r;
  r.k = k;
  r.qs = reinterpret_cast<int8_t*>(base);
  const int64_t per = IsKQuant(t) ? 256 : 32;
  r.d = reinterpret_cast<float*>(base + up(static_cast<size_t>(k)));
  r.s = reinterpret_cast<float*>(base + up(static_cast<size_t>(k)) +
                                 up(static_cast<size_t>(k / per) * 4));
  r.sums = reinterpret_cast<int16_t*>(base + up(static_cast<size_t>(k)) +
                                      2 * up(static_cast<size_t>(k / per) * 4));
  if (!IsKQuant(t)) {
    // ggml's x86 quantize_row_q8_0 / quantize_row_q8_1 (what its CPU backend runs on AVX/AVX2
    // machines, not the _ref functions, which multiply by 1 / d and round halves away from
    // zero): d = amax / 127 stored as f16, q = x * (127 / amax) rounded to nearest, ties to
    // even; q8_1's s = f16(d * sum(q)) with the unrounded d.
    for (int64_t b = 0; b < k / 32; ++b) {
      const float* xb = x + 32 * b;
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float d = amax / 127.0f;
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      int sum = 0;
      for (int j = 0; j < 32; ++j) {
        const int q = NearestInt(xb[j] * id);  // |x * id| <= 127 (up to rounding)
        r.qs[32 * b + j] = static_cast<int8_t>(q);
        sum += q;
      }
      r.d[b] = HalfToFloat(FloatToHalf(d));
      r.s[b] = HalfToFloat(FloatToHalf(d * static_cast<float>(sum)));
      r.sums[b] = static_cast<int16_t>(sum);
    }
    return r;
  }
  for (int64_t b = 0; b < k / 256; ++b) {  // quantize_row_q8_K: q = min(127, nearest(-127 x / max))
    const float* xb = x + 256 * b;
    const float max = SignedAbsMax(xb, 256);
    int8_t* q = r.qs + 256 * b;
    if (max == 0.0f) {
      r.d[b] = 0.0f;
      std::memset(q, 0, 256);
      for (int j = 0; j < 16; ++j) r.sums[16 * b + j] = 0;
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < 256; ++j)
      q[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * xb[j])));
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += q[16 * j + ii];
      r.sums[16 * b + j] = static_cast<int16_t>(sum);
    }
    r.d[b] = 1 / iscale;
  }
  return r;
}

// ---- dot products ------------------------------------------------------------------------------

int32_t NumSubBlocks(QuantType t, int64_t k) {
  return static_cast<int32_t>(t == QuantType::kQ6_K ? k / 16 : k / 32);
}

void SubBlockDotsReference(QuantType t, const uint8_t* w, const int8_t* xq, int64_t k,
                           int32_t* dots) {
  const int64_t qk = QuantBlockElements(t);
  const int32_t bytes = QuantBlockBytes(t);
  const int sub = t == QuantType::kQ6_K ? 16 : 32;
  int32_t q[256];
  for (int64_t i = 0; i < k / qk; ++i, w += bytes) {
    if (IsKQuant(t)) {
      KLevels(t, w, q);
    } else {
      LegacyLevels(t, w, q);
    }
    for (int s = 0; s < qk / sub; ++s) {
      int32_t acc = 0;
      for (int j = 0; j < sub; ++j) acc += q[s * sub + j] * xq[i * qk + s * sub + j];
      *dots++ = acc;
    }
  }
}

float CombineDots(QuantType t, const uint8_t* w, const Q8Row& x, const int32_t* dots) {
  float acc = 0.0f;
  const int32_t bytes = QuantBlockBytes(t);
  switch (t) {
    case QuantType::kQ8_0:
    case QuantType::kQ4_0:
    case QuantType::kQ5_0:
      for (int64_t b = 0; b < x.k / 32; ++b, w += bytes) {
        acc += (LoadHalf(w) * x.d[b]) * static_cast<float>(dots[b]);
      }
      return acc;
    case QuantType::kQ4_1:
    case QuantType::kQ5_1:
      for (int64_t b = 0; b < x.k / 32; ++b, w += bytes) {
        const float t1 = (LoadHalf(w) * x.d[b]) * static_cast<float>(dots[b]);
        const float t2 = LoadHalf(w + 2) * x.s[b];  // m * s, as ggml's vec_dot_q*_1_q8_1
        acc += t1 + t2;
      }
      return acc;
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
      for (int64_t b = 0; b < x.k / 256; ++b, w += bytes) {
        int32_t isum = 0, msum = 0;
        for (int s = 0; s < 8; ++s) {
          uint8_t sc, m;
          ScaleMinK4(s, w + 4, &sc, &m);
          isum += sc * dots[8 * b + s];
          msum += m * (x.sums[16 * b + 2 * s] + x.sums[16 * b + 2 * s + 1]);
        }
        const float v =
            LoadHalf(w) * static_cast<float>(isum) - LoadHalf(w + 2) * static_cast<float>(msum);
        acc += x.d[b] * v;
      }
      return acc;
    case QuantType::kQ6_K:
      for (int64_t b = 0; b < x.k / 256; ++b, w += bytes) {
        const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
        int32_t isum = 0;
        for (int s = 0; s < 16; ++s) isum += sc[s] * dots[16 * b + s];
        acc += x.d[b] * (LoadHalf(w + 208) * static_cast<float>(isum));
      }
      return acc;
  }
  return acc;
}

namespace {

// Q8_0 per block b: the exact integer dot of its 32 weights with the activations, then acc =
// fma(float(dot), d_w * d_x, acc), one chain in block order.
float DotBlocksQ8_0(const uint8_t* w, const Q8Row& x) {
  float acc = 0.0f;
  for (int64_t b = 0; b < x.k / 32; ++b, w += 34) {
    int32_t dot = 0;
    for (int e = 0; e < 32; ++e) dot += static_cast<int8_t>(w[2 + e]) * x.qs[32 * b + e];
    acc = std::fma(static_cast<float>(dot), LoadHalf(w) * x.d[b], acc);
  }
  return acc;
}

// Q4_K per super-block b: the exact integers I = sum over sub-blocks s of sc[s] * (the int dot of
// s) and M = sum over s of m[s] * (the activations' sum over s), then one fma each into two
// chains in block order: acc = fma(float(I), d * d_x, acc), mins = fma(float(M), dmin * d_x,
// mins); the result is acc - mins. (llama.cpp's AVX2 kernels on its 8-row interleaved Q4_K keep
// the same per-block split; here it is the definition every kernel gives bit for bit.)
float DotBlocksQ4_K(const uint8_t* w, const Q8Row& x) {
  float acc = 0.0f, mins = 0.0f;
  int32_t q[256];
  for (int64_t b = 0; b < x.k / 256; ++b, w += 144) {
    KLevels(QuantType::kQ4_K, w, q);
    int32_t isum = 0, msum = 0;
    for (int sb = 0; sb < 8; ++sb) {
      uint8_t sc, m;
      ScaleMinK4(sb, w + 4, &sc, &m);
      int32_t dot = 0;
      for (int e = 0; e < 32; ++e) dot += q[32 * sb + e] * x.qs[256 * b + 32 * sb + e];
      isum += sc * dot;
      msum += m * (x.sums[16 * b + 2 * sb] + x.sums[16 * b + 2 * sb + 1]);
    }
    acc = std::fma(static_cast<float>(isum), LoadHalf(w) * x.d[b], acc);
    mins = std::fma(static_cast<float>(msum), LoadHalf(w + 2) * x.d[b], mins);
  }
  return acc - mins;
}

}  // namespace

float DotRowReference(QuantType t, const uint8_t* w, const Q8Row& x) {
  if (t == QuantType::kQ8_0) return DotBlocksQ8_0(w, x);
  if (t == QuantType::kQ4_K) return DotBlocksQ4_K(w, x);
  std::vector<int32_t> dots(static_cast<size_t>(NumSubBlocks(t, x.k)));
  SubBlockDotsReference(t, w, x.qs, x.k, dots.data());
  return CombineDots(t, w, x, dots.data());
}

}  // namespace tinyserve
