// json_writer.h must write exactly what nlohmann's compact dump writes (its contract): checked
// over catalogues and random values.
#include "base/json_writer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "server/protocol/responses.h"
#include "tests/protocol/awkward_strings.h"

namespace tinyserve::protocol {
namespace {

using Json = nlohmann::ordered_json;

std::string String(std::string_view text) {
  std::string out;
  AppendJsonString(text, &out);
  return out;
}

std::string Double(double value) {
  std::string out;
  AppendJsonDouble(value, &out);
  return out;
}

TEST(JsonWriterTest, StringsEqualNlohmannDump) {
  for (const std::string& s : AwkwardStrings()) {
    EXPECT_EQ(String(s), DumpJson(Json(s))) << "input bytes: " << Json(s).dump(-1, ' ', true);
  }
  EXPECT_EQ(String("a\"b\\c\n\x01"), R"("a\"b\\c\n\u0001")");  // one exact answer
}

TEST(JsonWriterTest, StringsEqualNlohmannDumpOnRandomBytes) {
  std::mt19937 rng(12345);
  // Mostly text-like bytes, with control, quote, backslash and high bytes mixed in.
  const std::string alphabet = std::string("abc \"\\\n\t\x01\x1f\x7f", 12) +
                               "\xC3\xA9\xE2\x82\xAC" + "\xF0\x9F\x98\x80\x80\xBF\xC0\xFF\xED";
  std::uniform_int_distribution<size_t> len(0, 24);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const size_t n = len(rng);
    for (size_t k = 0; k < n; ++k) s.push_back(alphabet[pick(rng)]);
    ASSERT_EQ(String(s), DumpJson(Json(s))) << "case " << i;
  }
}

TEST(JsonWriterTest, DoublesEqualNlohmannDump) {
  const double cases[] = {0.0,
                          -0.0,
                          -0.25,
                          -9999.0,
                          -0.1,
                          1e-5,
                          -1.100000023841858,
                          123456789.0,
                          1e15,
                          1e16,
                          1e21,
                          1.5e300,
                          std::numeric_limits<double>::min(),
                          std::numeric_limits<double>::denorm_min(),
                          std::numeric_limits<double>::max(),
                          -std::numeric_limits<double>::max()};
  for (const double x : cases) EXPECT_EQ(Double(x), Json(x).dump()) << x;
  EXPECT_EQ(Double(-0.25), "-0.25");
  EXPECT_EQ(Double(-9999.0), "-9999.0");
  // Not finite: null, as nlohmann writes it.
  EXPECT_EQ(Double(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(Double(-std::numeric_limits<double>::infinity()), "null");

  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    uint64_t bits = rng();
    double x = 0;
    std::memcpy(&x, &bits, sizeof(x));
    if (!std::isfinite(x)) continue;
    ASSERT_EQ(Double(x), Json(x).dump()) << "bits " << bits;
    // Logprob-like values: floats widened to double.
    const auto f = static_cast<float>(-std::ldexp(static_cast<double>(bits >> 40), -20));
    ASSERT_EQ(Double(f), Json(static_cast<double>(f)).dump()) << f;
  }
}

TEST(JsonWriterTest, IntsEqualNlohmannDump) {
  for (const int64_t v :
       {int64_t{0}, int64_t{-1}, int64_t{7}, int64_t{1700000000},
        std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    std::string out;
    AppendJsonInt(v, &out);
    EXPECT_EQ(out, Json(v).dump());
  }
}

}  // namespace
}  // namespace tinyserve::protocol
