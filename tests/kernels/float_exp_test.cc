// ExpF and SiluAndMulRow (kernels/cpu/float_exp.h): the row forms (AVX-512's sixteen lanes,
// AVX2's eight, the scalar definition on the tails; each this CPU has) give the scalar definition's
// bits on every input, special values included, at every length and offset; ExpF is within 1 ulp of
// exp computed in double (0.990 at worst over every float, swept by hand); the edges of its range
// are where the header says. (SiluAndMulRow: NaN results only need to be NaN, any sign.)
#include "kernels/cpu/float_exp.h"

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tinyserve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t Bits(float x) { return std::bit_cast<uint32_t>(x); }

// Inputs: every float of the interesting range [-110, 95] at a stride of bit patterns, each side
// of the range edges and of 0, the special values, NaNs with payloads and both signs.
std::vector<float> Inputs() {
  std::vector<float> xs;
  for (uint32_t b = 0; b < 0x7f800000u; b += 997) {  // +0 ... FLT_MAX
    const float x = std::bit_cast<float>(b);
    if (x < 110.0f) xs.push_back(x);
    if (x < 110.0f) xs.push_back(-x);
  }
  for (float edge : {0x1.62e42ep+6f, -0x1.9fe368p+6f, 0.0f, 1.0f, -1.0f, 87.0f, -87.0f}) {
    float lo = edge, hi = edge;
    for (int i = 0; i < 64; ++i) {
      lo = std::nextafter(lo, -kInf);
      hi = std::nextafter(hi, kInf);
      xs.push_back(lo);
      xs.push_back(hi);
    }
    xs.push_back(edge);
  }
  for (float x : {kInf, -kInf, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN,
                  -0.0f, std::numeric_limits<float>::quiet_NaN()}) {
    xs.push_back(x);
  }
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7fc12345u, 0xffd00001u}) {
    xs.push_back(std::bit_cast<float>(nan));
  }
  return xs;
}

// check() on every row form this CPU can run (SetFloatExpIsaForTesting), then "best" again.
void OnEveryIsa(const std::function<void()>& check) {
  for (const char* isa : {"avx512", "avx2", "portable"}) {
    if (!SetFloatExpIsaForTesting(isa)) continue;
    SCOPED_TRACE(isa);
    check();
  }
  SetFloatExpIsaForTesting("best");
}

void CheckRows() {
  const std::vector<float> xs = Inputs();
  std::vector<float> y(xs.size());
  ExpF(xs.data(), static_cast<int32_t>(xs.size()), y.data());
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(Bits(y[i]), Bits(ExpF(xs[i])))
        << "x = " << xs[i] << " (" << std::hex << Bits(xs[i]) << ")";
  }
  // Short rows and every offset: the vector body, the tail, both.
  for (int32_t n = 0; n <= 40; ++n) {
    for (int32_t off = 0; off < 17; ++off) {
      std::vector<float> x(xs.begin() + 1000 * n + off, xs.begin() + 1000 * n + off + n);
      std::vector<float> out(n, -1.0f);
      ExpF(x.data(), n, out.data());
      for (int32_t i = 0; i < n; ++i) ASSERT_EQ(Bits(out[i]), Bits(ExpF(x[i]))) << n << " " << i;
    }
  }
  // In place.
  std::vector<float> in_place = xs;
  ExpF(in_place.data(), static_cast<int32_t>(in_place.size()), in_place.data());
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(Bits(in_place[i]), Bits(y[i]));
}

TEST(FloatExpTest, RowFormGivesTheScalarBitsAtEveryLengthAndOffset) { OnEveryIsa(CheckRows); }

TEST(FloatExpTest, IsWithinOneUlpOfExp) {
  double worst_normal = 0, worst_subnormal = 0;
  float worst_x = 0;
  for (float x : Inputs()) {
    if (std::isnan(x)) continue;
    const float got = ExpF(x);
    const double want = std::exp(static_cast<double>(x));
    if (want > FLT_MAX) {
      // Beyond the largest finite result the rounded exp is +inf; the top of the range may round
      // up to inf too, within the error bound.
      ASSERT_EQ(got, kInf) << x;
      continue;
    }
    if (want < 0x1p-150) {
      ASSERT_EQ(Bits(got), 0u) << x;
      continue;
    }
    ASSERT_TRUE(std::isfinite(got) || want > 0x1.fffffap+127) << x;
    if (!std::isfinite(got)) continue;
    const double ulp =
        want < FLT_MIN ? 0x1p-149 : std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    const double err = std::fabs(static_cast<double>(got) - want) / ulp;
    double& worst = want < FLT_MIN ? worst_subnormal : worst_normal;
    if (err > worst) {
      worst = err;
      if (want >= FLT_MIN) worst_x = x;
    }
  }
  EXPECT_LT(worst_normal, 1.0) << "at x = " << worst_x;
  EXPECT_LT(worst_subnormal, 1.0);
  std::printf("ExpF: worst %.3f ulp on normal results (x = %a), %.3f on subnormal\n", worst_normal,
              worst_x, worst_subnormal);
}

TEST(FloatExpTest, RangeEdgesAndSpecialValues) {
  EXPECT_EQ(Bits(ExpF(0.0f)), Bits(1.0f));
  EXPECT_EQ(Bits(ExpF(-0.0f)), Bits(1.0f));
  EXPECT_EQ(ExpF(kInf), kInf);
  EXPECT_EQ(Bits(ExpF(-kInf)), 0u);
  EXPECT_TRUE(std::isfinite(ExpF(0x1.62e42ep+6f)));
  EXPECT_EQ(ExpF(std::nextafter(0x1.62e42ep+6f, kInf)), kInf);
  EXPECT_EQ(ExpF(-0x1.9fe368p+6f), FLT_TRUE_MIN);  // exp(float(-150 ln 2)) is above 2^-150
  EXPECT_EQ(Bits(ExpF(std::nextafter(-0x1.9fe368p+6f, -kInf))), 0u);
  const float nan = std::bit_cast<float>(0xffc12345u);
  EXPECT_EQ(Bits(ExpF(nan)), Bits(nan));  // NaN in, the same NaN out
  EXPECT_NEAR(ExpF(1.0f), static_cast<float>(M_E), 2e-7f);
}

void CheckSiluRows() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-30.0f, 30.0f);
  for (int32_t n : {1, 7, 15, 16, 17, 31, 33, 64, 100, 2048}) {
    std::vector<float> g(n), u(n), out(n);
    for (int32_t i = 0; i < n; ++i) {
      g[i] = dist(rng);
      u[i] = dist(rng);
    }
    // Specials in the vector body and the tail.
    const float specials[] = {
        0.0f,    -0.0f,  kInf,  -kInf, std::numeric_limits<float>::quiet_NaN(),
        -120.0f, 120.0f, 89.0f, -89.0f};
    for (int32_t i = 0; i < n && i < 9; ++i) g[(i * 5) % n] = specials[i];
    SiluAndMulRow(g.data(), u.data(), n, out.data());
    for (int32_t i = 0; i < n; ++i) {
      const float want = (g[i] * (1.0f / (1.0f + ExpF(-g[i])))) * u[i];
      // (A NaN's sign and payload depend on which operand the compiler put first; NaN is NaN.)
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(out[i])) << "n " << n << " g " << g[i] << " u " << u[i];
      } else {
        ASSERT_EQ(Bits(out[i]), Bits(want)) << "n " << n << " g " << g[i] << " u " << u[i];
      }
    }
  }
}

TEST(FloatExpTest, SiluAndMulRowGivesTheScalarFormulaBits) { OnEveryIsa(CheckSiluRows); }

}  // namespace
}  // namespace tinyserve
