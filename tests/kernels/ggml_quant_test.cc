// ggml's quantized blocks (kernels/ggml_quant.h) and the CPU kernels on them
// (kernels/cpu/quant_gemm.h): dequantization of hand-built blocks, the reference quantizers'
// rounding on inputs whose answer is known, the quantize -> dequantize error of each type, the
// SIMD integer dots against the scalar ones, the dot products against fp32 on dequantized values,
// and batch invariance (a row alone == the same row in a batch of 1..33) on the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/ggml_quant.h"

namespace tinyserve {
namespace {

const QuantType kAllTypes[] = {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0,
                               QuantType::kQ5_1, QuantType::kQ8_0, QuantType::kQ4_K,
                               QuantType::kQ5_K, QuantType::kQ6_K};

void PutHalf(uint8_t* p, float f) {
  const uint16_t h = FloatToHalf(f);
  std::memcpy(p, &h, 2);
}

std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// DotRowReference of every row of the one-part matrix qm against each of the first max_m rows of
// x (qm.cols wide): want[i * qm.rows + j].
std::vector<float> ReferenceOutputs(const QuantMatrix& qm, const std::vector<float>& x,
                                    int32_t max_m) {
  const QuantType t = qm.parts[0].type;
  const int32_t k = qm.cols, n = qm.rows;
  const size_t row_bytes = QuantRowBytes(t, k);
  std::vector<uint8_t> act(ActivationBytes(t, k) + 64);
  uint8_t* base = act.data() + (64 - reinterpret_cast<uintptr_t>(act.data()) % 64) % 64;
  std::vector<float> want(static_cast<size_t>(max_m) * n);
  for (int32_t i = 0; i < max_m; ++i) {
    const Q8Row xr = QuantizeActivations(t, x.data() + static_cast<size_t>(i) * k, k, base);
    for (int32_t j = 0; j < n; ++j) {
      want[static_cast<size_t>(i) * n + j] =
          DotRowReference(t, qm.parts[0].blocks + row_bytes * j, xr);
    }
  }
  return want;
}

void Serial(int64_t count, const std::function<void(int64_t)>& fn) {
  for (int64_t i = 0; i < count; ++i) fn(i);
}

// QuantLinear on qm gives `want`'s bits (ReferenceOutputs) for batches of 1..max_m rows of x, on
// one thread, on every instruction set this CPU has; the automatic choice is restored after.
void ExpectReferenceBitsOnEveryIsa(const QuantMatrix& qm, const std::vector<float>& x,
                                   const std::vector<float>& want, int32_t max_m) {
  const int32_t n = qm.rows;
  for (const char* isa : {"avx512vnni", "avx2", "portable"}) {
    if (!SetQuantDotIsaForTesting(isa)) {
      std::printf("[ skipped  ] %s: not on this CPU\n", isa);
      continue;
    }
    bool same = true;
    for (int32_t m = 1; m <= max_m && same; ++m) {
      std::vector<float> y(static_cast<size_t>(m) * n);
      QuantLinear(x.data(), qm, m, y.data(), Serial);
      for (size_t e = 0; e < y.size() && same; ++e) {
        same = y[e] == want[e];
        EXPECT_EQ(y[e], want[e]) << QuantTypeName(qm.parts[0].type) << " " << isa << " m " << m
                                 << " e " << e;
      }
    }
  }
  EXPECT_TRUE(SetQuantDotIsaForTesting("best"));
}

TEST(GgmlQuantTest, BlockSizesAreGgmls) {
  const int32_t bytes[] = {18, 20, 22, 24, 34, 144, 176, 210};
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(QuantBlockBytes(kAllTypes[i]), bytes[i]) << QuantTypeName(kAllTypes[i]);
  }
  EXPECT_EQ(QuantTypeOfGgml(12), QuantType::kQ4_K);
  EXPECT_FALSE(QuantTypeOfGgml(10).has_value());  // q2_K
  EXPECT_FALSE(QuantTypeOfGgml(0).has_value());   // f32
}

TEST(GgmlQuantTest, DequantizesHandBuiltLegacyBlocks) {
  std::vector<uint8_t> b(34);
  PutHalf(b.data(), 0.5f);  // Q8_0: w[j] = 0.5 * (j - 16)
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  float out[32];
  DequantizeRow(QuantType::kQ8_0, b.data(), 32, out);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.5f * (j - 16)) << j;

  PutHalf(b.data(), 2.0f);  // Q4_0: low nibble j % 16 for j < 16, high nibble 15 - j for j >= 16
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  DequantizeRow(QuantType::kQ4_0, b.data(), 32, out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * (j - 8)) << j;
    EXPECT_EQ(out[16 + j], 2.0f * (15 - j - 8)) << j;
  }

  PutHalf(b.data(), 0.25f);  // Q4_1: d 0.25, m -1, nibble 3 low and 9 high
  PutHalf(b.data() + 2, -1.0f);
  for (int j = 0; j < 16; ++j) b[4 + j] = 0x93;
  DequantizeRow(QuantType::kQ4_1, b.data(), 32, out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.25f * 3 - 1.0f);
    EXPECT_EQ(out[16 + j], 0.25f * 9 - 1.0f);
  }

  PutHalf(b.data(), 1.0f);  // Q5_0: the 5th bits set for elements 16..31 only
  const uint32_t qh = 0xffff0000u;
  std::memcpy(b.data() + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) b[6 + j] = 0x53;
  DequantizeRow(QuantType::kQ5_0, b.data(), 32, out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 3.0f - 16.0f);
    EXPECT_EQ(out[16 + j], (5.0f + 16.0f) - 16.0f);
  }
}

TEST(GgmlQuantTest, DequantizesHandBuiltKBlocks) {
  // Q4_K: d 1, dmin 0.5, sub-block s has scale s + 1 and min s; every qs byte is 0x21 (low
  // nibble 1 for the even sub-block of a 64-group, high nibble 2 for the odd one).
  std::vector<uint8_t> b(210, 0);
  PutHalf(b.data(), 1.0f);
  PutHalf(b.data() + 2, 0.5f);
  for (int s = 0; s < 8; ++s) {
    if (s < 4) {
      b[4 + s] = static_cast<uint8_t>(s + 1);
      b[4 + s + 4] = static_cast<uint8_t>(s);
    } else {
      b[4 + s + 4] = static_cast<uint8_t>((s + 1) | (s << 4));
    }
  }
  for (int i = 0; i < 128; ++i) b[16 + i] = 0x21;
  float out[256];
  DequantizeRow(QuantType::kQ4_K, b.data(), 256, out);
  for (int j = 0; j < 256; ++j) {
    const int s = j / 32;
    const float q = s % 2 == 0 ? 1.0f : 2.0f;
    ASSERT_EQ(out[j], 1.0f * (s + 1) * q - 0.5f * s) << j;
  }
  // Q6_K: d 1, scales[s] = s - 8, ql 0x31 (low 1, high 3), qh 0b11100100: q - 32 is -31, -15,
  // 3, 19 for the four 32-element rows of each 128-element half.
  std::fill(b.begin(), b.end(), 0);
  for (int i = 0; i < 128; ++i) b[i] = 0x31;
  for (int i = 0; i < 64; ++i) b[128 + i] = 0xe4;
  for (int s = 0; s < 16; ++s) b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(s - 8));
  PutHalf(b.data() + 208, 1.0f);
  DequantizeRow(QuantType::kQ6_K, b.data(), 256, out);
  const int level[4] = {-31, -15, 3, 19};
  for (int j = 0; j < 256; ++j) {
    ASSERT_EQ(out[j], static_cast<float>((j / 16 - 8) * level[(j % 128) / 32])) << j;
  }
}

TEST(GgmlQuantTest, ReferenceQuantizersRoundAsGgml) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  // Q4_0: the largest magnitude is -16 (j = 0), so d = -16 / -8 = 2 and q = min(15, (int)(x / 2 +
  // 8.5)), that is floor((j + 1) / 2) capped at 15.
  std::vector<uint8_t> b(34);
  QuantizeRowReference(QuantType::kQ4_0, x.data(), 32, b.data());
  uint16_t d;
  std::memcpy(&d, b.data(), 2);
  EXPECT_EQ(d, 0x4000);  // 2.0 as f16
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, (j + 1) / 2), hi = std::min(15, (j + 17) / 2);
    EXPECT_EQ(b[2 + j], lo | (hi << 4)) << j;
  }
  // Q8_0: d = 16 / 127 (as f16), q = round(x * 127 / 16), halves away from zero.
  QuantizeRowReference(QuantType::kQ8_0, x.data(), 32, b.data());
  std::memcpy(&d, b.data(), 2);
  EXPECT_EQ(d, FloatToHalf(16.0f / 127.0f));
  const float id = 1.0f / (16.0f / 127.0f);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(static_cast<int8_t>(b[2 + j]), static_cast<int>(std::round(x[j] * id))) << j;
  }
  // All zero: every type gives zero blocks that dequantize to zero.
  std::vector<float> zero(256, 0.0f), back(256, 1.0f);
  for (QuantType t : kAllTypes) {
    std::vector<uint8_t> q(QuantRowBytes(t, 256));
    QuantizeRowReference(t, zero.data(), 256, q.data());
    DequantizeRow(t, q.data(), 256, back.data());
    for (float v : back) ASSERT_EQ(v, 0.0f) << QuantTypeName(t);
  }
}

// Relative RMS error and maximum error of quantize -> dequantize on an N(0, 1) row, within
// bounds a little above what each type measures (each extra bit about halves them).
TEST(GgmlQuantTest, RoundTripErrorIsWithinEachTypesBound) {
  struct Bound {
    QuantType type;
    double rms;  // rms(error) / rms(x)
    double max;  // max |error| / 4.5 (|x| < 4.5 here)
  };
  // Measured (this seed): q4_0 0.0843 / 0.0715, q4_1 0.0771 / 0.0404, q5_0 0.0415 / 0.0339,
  // q5_1 0.0368 / 0.0196, q8_0 0.0052 / 0.0030, q4_K 0.0705 / 0.0409, q5_K 0.0355 / 0.0211,
  // q6_K 0.0176 / 0.0118; the bounds are ~10% (rms) and ~25% (max) above.
  const Bound bounds[] = {{QuantType::kQ4_0, 0.093, 0.090},   {QuantType::kQ4_1, 0.085, 0.051},
                          {QuantType::kQ5_0, 0.046, 0.043},   {QuantType::kQ5_1, 0.041, 0.025},
                          {QuantType::kQ8_0, 0.0058, 0.0038}, {QuantType::kQ4_K, 0.078, 0.052},
                          {QuantType::kQ5_K, 0.039, 0.027},   {QuantType::kQ6_K, 0.0195, 0.015}};
  const int64_t k = 4096;
  const std::vector<float> x = Gaussian(k, 7);
  for (const Bound& bd : bounds) {
    std::vector<uint8_t> q(QuantRowBytes(bd.type, k));
    QuantizeRowReference(bd.type, x.data(), k, q.data());
    std::vector<float> back(k);
    DequantizeRow(bd.type, q.data(), k, back.data());
    double err2 = 0, x2 = 0, max_rel = 0;
    for (int64_t i = 0; i < k; ++i) {
      err2 += (back[i] - x[i]) * (back[i] - x[i]);
      x2 += x[i] * x[i];
      max_rel = std::max(max_rel, std::fabs(back[i] - x[i]) / 4.5);  // |x| < 4.5 here
    }
    const double rel = std::sqrt(err2 / x2);
    EXPECT_LT(rel, bd.rms) << QuantTypeName(bd.type);
    EXPECT_GT(rel, bd.rms / 8) << QuantTypeName(bd.type) << ": suspiciously exact";
    EXPECT_LT(max_rel, bd.max) << QuantTypeName(bd.type);
  }
}

// Random blocks (any bytes are valid levels) and random activations: the SIMD integer dots equal
// the scalar ones, and QuantLinear equals DotRowReference bitwise.
// The activation side as ggml's x86 CPU backend computes it (quantize_row_q8_0 / _q8_1 with
// AVX2): q = nearest-even(x * (127 / amax)), d = f16(amax / 127), s = f16(d * sum(q)). Expected
// bytes derived by hand. Block 0 (amax 127: d 1, the multiplier exactly 1): halves round to even,
// where the _ref functions' roundf would give 1, 2, 3, -1, -2, -3. Block 1 (amax 1089 / 1024, x
// = amax / 2): f32(127 / amax) * x = 63.500004 gives 64, where the _ref multiplier f32(1 / f32(amax
// / 127)) gives 63.499996 and 63; d = f16(0.0083738314) = 0.0083770751953125 (0x204a); s =
// f16(f32(amax / 127) * 127) = 1089 / 1024, not f16(d) * 127 = 1.0638885.
TEST(GgmlQuantTest, ActivationsRoundAsGgmlsCpuBackend) {
  std::vector<float> x(64, 0.0f);
  const float b0[7] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f};
  std::copy(b0, b0 + 7, x.begin());
  const float amax = 1089.0f / 1024.0f;
  x[32] = amax;
  x[33] = amax / 2;
  x[34] = -amax / 2;
  std::vector<uint8_t> act(ActivationBytes(QuantType::kQ8_0, 64) + 64);
  uint8_t* base = act.data() + (64 - reinterpret_cast<uintptr_t>(act.data()) % 64) % 64;
  const Q8Row r = QuantizeActivations(QuantType::kQ8_0, x.data(), 64, base);
  std::vector<int8_t> want(64, 0);
  const int8_t w0[7] = {127, 0, 2, 2, 0, -2, -2};
  std::copy(w0, w0 + 7, want.begin());
  want[32] = 127;
  want[33] = 64;
  want[34] = -64;
  EXPECT_EQ(std::vector<int8_t>(r.qs, r.qs + 64), want);
  EXPECT_EQ(r.d[0], 1.0f);
  EXPECT_EQ(r.d[1], 0.0083770751953125f);
  EXPECT_EQ(r.sums[0], 127);
  EXPECT_EQ(r.sums[1], 127);
  EXPECT_EQ(r.s[0], 127.0f);
  EXPECT_EQ(r.s[1], amax);
  // Q4_1 and Q5_1 take their min term from s: blocks of d 0 and m 1 give s[0] + s[1] exactly.
  for (QuantType t : {QuantType::kQ4_1, QuantType::kQ5_1}) {
    std::vector<uint8_t> w(QuantRowBytes(t, 64), 0x5a);
    for (int b = 0; b < 2; ++b) {
      PutHalf(w.data() + QuantBlockBytes(t) * b, 0.0f);
      PutHalf(w.data() + QuantBlockBytes(t) * b + 2, 1.0f);
    }
    EXPECT_EQ(DotRowReference(t, w.data(), r), 127.0f + amax) << QuantTypeName(t);
  }
}

TEST(GgmlQuantTest, SimdDotsEqualTheScalarOnes) {
  std::mt19937 rng(3);
  const int64_t k = 512;
  const std::vector<float> x = Gaussian(k, 11);
  for (QuantType t : kAllTypes) {
    std::vector<uint8_t> w(QuantRowBytes(t, k));
    for (uint8_t& v : w) v = static_cast<uint8_t>(rng());
    // Finite scales: overwrite every block's f16 fields with small values via a real quantization
    // of random data, then scramble only the level bytes.
    const std::vector<float> src = Gaussian(k, 5);
    std::vector<uint8_t> real(w.size());
    QuantizeRowReference(t, src.data(), k, real.data());
    std::vector<uint8_t> act(ActivationBytes(t, k) + 64);
    uint8_t* base = act.data() + (64 - reinterpret_cast<uintptr_t>(act.data()) % 64) % 64;
    const Q8Row xr = QuantizeActivations(t, x.data(), k, base);
    std::vector<int32_t> ref(NumSubBlocks(t, k)), simd(NumSubBlocks(t, k));
    for (const std::vector<uint8_t>* blocks : {&w, &real}) {
      SubBlockDotsReference(t, blocks->data(), xr.qs, k, ref.data());
      SubBlockDots(t, blocks->data(), xr.qs, k, simd.data());
      EXPECT_EQ(ref, simd) << QuantTypeName(t) << " on " << QuantDotIsa();
    }
    // The fp32 result against double arithmetic on the dequantized weights and activations.
    std::vector<float> wd(k);
    DequantizeRow(t, real.data(), k, wd.data());
    const int64_t per = IsKQuant(t) ? 256 : 32;
    double want = 0, scale = 0;
    for (int64_t i = 0; i < k; ++i) {
      const double xi = static_cast<double>(xr.qs[i]) * xr.d[i / per];
      want += wd[i] * xi;
      scale += std::fabs(wd[i] * xi);
    }
    const float got = DotRowReference(t, real.data(), xr);
    EXPECT_NEAR(got, want, 1e-5 * scale + 1e-6) << QuantTypeName(t);
  }
}

// One row alone gives the same bits as the same row inside a batch of 1..33 rows, on 1 and 3
// threads, on every instruction set's kernels (AVX-512 VNNI, AVX2, portable); a fused matrix of
// mixed types (q|k|v with a Q6_K v) included. And the values are DotRowReference's.
TEST(GgmlQuantTest, LinearIsBatchInvariantAndMatchesTheReference) {
  const int32_t k = 512;
  struct Fused {
    std::vector<QuantType> types;
    std::vector<int32_t> rows;
  };
  const Fused cases[] = {{{QuantType::kQ8_0}, {37}},
                         {{QuantType::kQ8_0, QuantType::kQ8_0}, {3, 16}},
                         {{QuantType::kQ4_0}, {20}},
                         {{QuantType::kQ4_K, QuantType::kQ4_K, QuantType::kQ6_K}, {16, 8, 9}},
                         // Interleaved groups that start at row 9 of the matrix.
                         {{QuantType::kQ6_K, QuantType::kQ4_K}, {9, 24}},
                         {{QuantType::kQ4_K, QuantType::kQ6_K}, {9, 16}},
                         {{QuantType::kQ5_K, QuantType::kQ5_0}, {5, 17}},
                         {{QuantType::kQ4_1, QuantType::kQ5_1}, {3, 4}}};
  const std::vector<float> x = Gaussian(33 * static_cast<size_t>(k), 21);
  for (const Fused& f : cases) {
    std::vector<std::vector<uint8_t>> blocks;
    std::vector<QuantPart> parts;
    int32_t n = 0;
    for (size_t p = 0; p < f.types.size(); ++p) {
      const std::vector<float> src = Gaussian(static_cast<size_t>(f.rows[p]) * k, 100 + p);
      blocks.emplace_back(QuantRowBytes(f.types[p], k) * f.rows[p]);
      for (int32_t r = 0; r < f.rows[p]; ++r) {
        QuantizeRowReference(f.types[p], src.data() + static_cast<size_t>(r) * k, k,
                             blocks.back().data() + QuantRowBytes(f.types[p], k) * r);
      }
      n += f.rows[p];
    }
    for (size_t p = 0; p < f.types.size(); ++p)
      parts.push_back({f.types[p], blocks[p].data(), f.rows[p]});
    // The reference: DotRowReference per element.
    std::vector<float> want(33 * static_cast<size_t>(n));
    for (int32_t i = 0; i < 33; ++i) {
      int32_t j = 0;
      for (size_t p = 0; p < parts.size(); ++p) {
        std::vector<uint8_t> act(ActivationBytes(f.types[p], k) + 64);
        uint8_t* base = act.data() + (64 - reinterpret_cast<uintptr_t>(act.data()) % 64) % 64;
        const Q8Row xr =
            QuantizeActivations(f.types[p], x.data() + static_cast<size_t>(i) * k, k, base);
        for (int32_t r = 0; r < f.rows[p]; ++r, ++j) {
          want[static_cast<size_t>(i) * n + j] =
              DotRowReference(f.types[p], blocks[p].data() + QuantRowBytes(f.types[p], k) * r, xr);
        }
      }
    }
    // Every instruction set this CPU has (avx512vnni only where AVX512VL + VNNI exist).
    for (const char* isa : {"best", "avx512vnni", "avx2", "portable"}) {
      if (!SetQuantDotIsaForTesting(isa)) {
        std::printf("[ skipped  ] %s: not on this CPU\n", isa);
        continue;
      }
      for (int threads : {1, 3}) {
        std::unique_ptr<Backend> b = CreateCpuBackend(threads);
        const WeightRef wr =
            b->UploadQuantMatrix(parts.data(), static_cast<int32_t>(parts.size()), k);
        ASSERT_NE(wr.data, nullptr);
        EXPECT_EQ(wr.layout, WeightLayout::kGgmlBlocks);
        for (int32_t m = 1; m <= 33; ++m) {
          std::vector<float> y(static_cast<size_t>(m) * n);
          b->Linear(x.data(), wr, m, n, k, y.data());
          for (size_t e = 0; e < y.size(); ++e) {
            ASSERT_EQ(y[e], want[e]) << isa << " threads " << threads << " m " << m << " e " << e;
          }
        }
        // Embedding rows are the dequantized rows.
        const int32_t ids[2] = {n - 1, 0};
        std::vector<float> rows(2 * static_cast<size_t>(k)), expect(k);
        b->EmbeddingLookup(wr, ids, 2, k, rows.data());
        DequantizeRow(f.types.back(),
                      blocks.back().data() + QuantRowBytes(f.types.back(), k) * (f.rows.back() - 1),
                      k, expect.data());
        for (int32_t c = 0; c < k; ++c) ASSERT_EQ(rows[c], expect[c]);
        b->Deallocate(const_cast<void*>(wr.data));
      }
    }
    ASSERT_TRUE(SetQuantDotIsaForTesting("best"));
  }
}

// The fused (tile) kernels on level bytes no quantizer writes (Q8_0's -128, every scale and min
// byte of the K-quants, Q6_K's scale -128, random): each instruction set still gives
// DotRowReference's bits, for batches of 1..9 rows (partial tiles of activation rows, and from 4
// rows on a partial tile of 3 weight rows) and k = 256 * 3 (a block count that is not a power of
// two).
TEST(GgmlQuantTest, FusedKernelsAgreeOnEveryLevelByte) {
  const int32_t k = 768, n = 3, max_m = 9;
  const std::vector<float> x = Gaussian(static_cast<size_t>(max_m) * k, 31, 4.0f);
  for (QuantType t : {QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K}) {
    const size_t row_bytes = QuantRowBytes(t, k);
    std::vector<uint8_t> w(row_bytes * n);
    QuantizeRowReference(t, Gaussian(static_cast<size_t>(n) * k, 7).data(), k, w.data());
    for (int32_t r = 1; r < n; ++r) {
      QuantizeRowReference(t, Gaussian(k, 8 + r).data(), k, w.data() + row_bytes * r);
    }
    std::mt19937 rng(17);
    const size_t block_bytes = QuantBlockBytes(t);
    // The f16 scales stay finite: Q8_0's d (bytes 0-1), Q4_K's and Q5_K's d and dmin (0-3),
    // Q6_K's d (208-209); every other byte is random.
    const size_t f16_begin = t == QuantType::kQ6_K ? 208 : 0;
    const size_t f16_end = t == QuantType::kQ6_K ? 210 : t == QuantType::kQ8_0 ? 2 : 4;
    for (size_t off = 0; off < w.size(); ++off) {
      const size_t in_block = off % block_bytes;
      if (in_block < f16_begin || in_block >= f16_end) w[off] = static_cast<uint8_t>(rng());
    }
    // -128 in the first Q8_0 block / a scale byte with both high bits in Q4_K and Q5_K / Q6_K's
    // first sub-block scale -128.
    w[t == QuantType::kQ6_K ? 192 : 2] = 0x80;
    QuantMatrix qm;
    qm.rows = n;
    qm.cols = k;
    qm.num_parts = 1;
    qm.parts[0] = {t, w.data(), n};
    ExpectReferenceBitsOnEveryIsa(qm, x, ReferenceOutputs(qm, x, max_m), max_m);
  }
}

// Q8_0, Q4_K and Q6_K rows interleaved 8 at a time (RepackRows8) on level, scale and min bytes no
// quantizer writes: the 8-row kernels give DotRowReference's bits for 24 rows (three groups: on
// VNNI the first two run together in 512-bit registers, from 2 activation rows on for Q8_0 and
// from 4 for the K-quants, the third alone) and batches of 1..17 (whole and partial tiles of
// activation rows: 4 a call for the K-quants, 8 for Q8_0 on VNNI), with k = 256 * 3. And they do
// read the copy:
// a copy of other rows changes every result (on the SIMD instruction sets; the portable path
// reads the blocks).
TEST(GgmlQuantTest, InterleavedRowsGiveTheReferenceBits) {
  const int32_t k = 768, n = 24, max_m = 17;
  const std::vector<float> x = Gaussian(static_cast<size_t>(max_m) * k, 41, 4.0f);
  for (QuantType t : {QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ6_K}) {
    ASSERT_TRUE(HasRows8Layout(t));
    const size_t row_bytes = QuantRowBytes(t, k), block_bytes = QuantBlockBytes(t);
    std::vector<uint8_t> w(row_bytes * n), other(row_bytes * n);
    for (std::vector<uint8_t>* blocks : {&w, &other}) {
      for (int32_t r = 0; r < n; ++r) {
        QuantizeRowReference(t, Gaussian(k, 50 + r + (blocks == &w ? 0 : 100)).data(), k,
                             blocks->data() + row_bytes * r);
      }
    }
    // Every byte random but the f16 scales (Q8_0's d at 0-1, Q4_K's d and dmin at 0-3, Q6_K's d
    // at 208-209); a Q8_0 level of -128, a Q6_K sub-block scale of -128 and a Q4_K scale byte
    // with both high bits set.
    const size_t f16_begin = t == QuantType::kQ6_K ? 208 : 0;
    const size_t f16_end = t == QuantType::kQ6_K ? 210 : t == QuantType::kQ8_0 ? 2 : 4;
    std::mt19937 rng(19);
    for (size_t off = 0; off < w.size(); ++off) {
      const size_t in_block = off % block_bytes;
      if (in_block < f16_begin || in_block >= f16_end) w[off] = static_cast<uint8_t>(rng());
    }
    w[t == QuantType::kQ6_K ? 192 : 4] = 0x80;
    ASSERT_EQ(Rows8Bytes(t, n, k), (n / 8) * (k / QuantBlockElements(t)) *
                                       (8 * block_bytes + (t == QuantType::kQ4_K ? 32 : 0)));
    std::vector<uint8_t> rows8(Rows8Bytes(t, n, k)), other8(Rows8Bytes(t, n, k));
    RepackRows8(t, w.data(), n, k, rows8.data());
    RepackRows8(t, other.data(), n, k, other8.data());
    QuantMatrix qm;
    qm.rows = n;
    qm.cols = k;
    qm.num_parts = 1;
    qm.parts[0] = {t, w.data(), n, rows8.data()};
    const std::vector<float> want = ReferenceOutputs(qm, x, max_m);
    ExpectReferenceBitsOnEveryIsa(qm, x, want, max_m);
    QuantMatrix swapped = qm;
    swapped.parts[0].rows8 = other8.data();
    for (const char* isa : {"avx512vnni", "avx2"}) {
      if (!SetQuantDotIsaForTesting(isa)) continue;
      std::vector<float> y(n);
      QuantLinear(x.data(), swapped, 1, y.data(), Serial);
      for (int32_t j = 0; j < n; ++j)
        EXPECT_NE(y[j], want[j]) << QuantTypeName(t) << " " << isa << " row " << j;
    }
    ASSERT_TRUE(SetQuantDotIsaForTesting("best"));
  }
}

// The default UploadQuantMatrix (what device backends get) stores the dequantized fp32 matrix.
TEST(GgmlQuantTest, DefaultUploadDequantizes) {
  const int32_t k = 256, n = 6;
  const std::vector<float> src = Gaussian(static_cast<size_t>(n) * k, 9);
  std::vector<uint8_t> blocks(QuantRowBytes(QuantType::kQ6_K, k) * n);
  for (int32_t r = 0; r < n; ++r)
    QuantizeRowReference(QuantType::kQ6_K, src.data() + r * k, k,
                         blocks.data() + QuantRowBytes(QuantType::kQ6_K, k) * r);
  std::unique_ptr<Backend> b = CreateCpuBackend(1);
  const QuantPart part{QuantType::kQ6_K, blocks.data(), n};
  const WeightRef wr = b->Backend::UploadQuantMatrix(&part, 1, k);
  EXPECT_EQ(wr.layout, WeightLayout::kPanel16);
  std::vector<float> rows(static_cast<size_t>(n) * k), expect(k);
  std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5};
  b->EmbeddingLookup(wr, ids.data(), n, k, rows.data());
  for (int32_t r = 0; r < n; ++r) {
    DequantizeRow(QuantType::kQ6_K, blocks.data() + QuantRowBytes(QuantType::kQ6_K, k) * r, k,
                  expect.data());
    for (int32_t c = 0; c < k; ++c) ASSERT_EQ(rows[static_cast<size_t>(r) * k + c], expect[c]);
  }
  b->Deallocate(const_cast<void*>(wr.data));
}

}  // namespace
}  // namespace tinyserve
