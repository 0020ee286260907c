// kernels/fp8.h against a reference built another way: E4m3ToFloat on all 256 codes against the
// format's definition (sign, exponent bias 7, subnormals m * 2^-9, one NaN pattern a sign); then
// FloatToE4m3 on every float at a stride of bit patterns, every midpoint between two neighbouring
// codes and the floats either side of it, against the nearest code found by searching the decoded
// values (ties to the even code, saturating at 448, NaN kept).
#include "kernels/fp8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tinyserve {
namespace {

// The value of a code from the definition, in double.
double Definition(uint8_t b) {
  const int sign = (b & 0x80) ? -1 : 1;
  const int e = (b >> 3) & 0xf, m = b & 0x7;
  if (e == 0xf && m == 0x7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(m, -9);
  return sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

TEST(Fp8Test, DecodesEveryCodeAsTheFormatDefinesIt) {
  for (int b = 0; b < 256; ++b) {
    const double want = Definition(static_cast<uint8_t>(b));
    const float got = E4m3ToFloat(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << b;
      EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << b;  // -0 is 0x80
    }
  }
  EXPECT_EQ(E4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0x01), 0.001953125f);
}

// The code nearest |x| among 0x00..0x7e (448 past the largest), ties to the even code, with x's
// sign.
uint8_t Nearest(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(x));
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (int b = 0; b <= 0x7e; ++b) v.push_back(Definition(static_cast<uint8_t>(b)));
    return v;
  }();
  if (a >= values.back()) return sign | 0x7e;
  const auto hi = std::upper_bound(values.begin(), values.end(), a);  // values[lo] <= a < *hi
  const int h = static_cast<int>(hi - values.begin()), l = h - 1;
  const double dl = a - values[l], dh = values[h] - a;
  const int code = dl < dh ? l : dh < dl ? h : (l % 2 == 0 ? l : h);
  return sign | static_cast<uint8_t>(code);
}

TEST(Fp8Test, EncodesToTheNearestCodeTiesToEvenSaturating) {
  std::vector<float> xs;
  for (uint32_t u = 0; u < 0x7f800000u; u += 4099) xs.push_back(std::bit_cast<float>(u));
  for (int b = 0; b < 0x7e; ++b) {  // each midpoint and its neighbouring floats
    const float mid = static_cast<float>(
        (Definition(static_cast<uint8_t>(b)) + Definition(static_cast<uint8_t>(b + 1))) / 2);
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f),
                         E4m3ToFloat(static_cast<uint8_t>(b))});
  }
  xs.insert(xs.end(), {464.0f, std::nextafter(464.0f, 0.0f), 480.0f, 1e30f,
                       std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::denorm_min(), 0.0f});
  const size_t n = xs.size();
  for (size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
  for (float x : xs) {
    ASSERT_EQ(FloatToE4m3(x), Nearest(x)) << x << " bits " << std::bit_cast<uint32_t>(x);
  }
  EXPECT_EQ(FloatToE4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(FloatToE4m3(-std::numeric_limits<float>::quiet_NaN()), 0xff);
  EXPECT_EQ(FloatToE4m3(-0.0f), 0x80);
}

TEST(Fp8Test, EveryCodeSurvivesARoundTrip) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(FloatToE4m3(E4m3ToFloat(static_cast<uint8_t>(b))), b) << b;
  }
}

}  // namespace
}  // namespace tinyserve
