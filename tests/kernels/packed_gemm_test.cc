// The packed GEMM's order contract (kernels/cpu/packed_gemm.h), bitwise: every kernel this CPU can
// run (AVX-512, AVX2+FMA, portable) equals the one-fma-chain-per-element reference exactly, on
// awkward sizes; a row's result does not depend on how many rows share the call, nor on the
// backend's thread count; the packed layout is the documented one.
#include "kernels/cpu/packed_gemm.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace tinyserve {
namespace {

std::vector<float> Random(std::mt19937& rng, size_t n) {
  // Mixed magnitudes and signs, so that any change of summation order shows in the last bits.
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), e(-6.0f, 6.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng) * std::exp2(e(rng));
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

class IsaScope {
 public:
  explicit IsaScope(const char* isa) : ok_(SetPackedGemmIsaForTesting(isa)) {}
  ~IsaScope() { SetPackedGemmIsaForTesting("best"); }
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

TEST(PackedGemmTest, PackedLayoutIsPanelsOfSixteenColumnsWithZeroPadding) {
  const int32_t n = 19, k = 3;
  std::vector<float> w(n * k);
  for (int32_t j = 0; j < n; ++j) {
    for (int32_t p = 0; p < k; ++p) w[j * k + p] = static_cast<float>(100 * j + p + 1);
  }
  std::vector<float> packed(PackedFloats(n, k), -1.0f);
  ASSERT_EQ(packed.size(), 2u * 3u * 16u);
  PackPanels(w.data(), n, k, packed.data());
  EXPECT_EQ(packed[0], 1.0f);                       // (j 0, p 0)
  EXPECT_EQ(packed[1], 101.0f);                     // (j 1, p 0)
  EXPECT_EQ(packed[16 + 15], 1502.0f);              // (j 15, p 1)
  EXPECT_EQ(packed[3 * 16 + 2 * 16 + 2], 1803.0f);  // (j 18, p 2): panel 1
  EXPECT_EQ(packed[3 * 16 + 3], 0.0f);              // (j 19, p 0): padding
  std::vector<float> row(k);
  UnpackRow(packed.data(), k, 17, row.data());
  EXPECT_EQ(row, (std::vector<float>{1701.0f, 1702.0f, 1703.0f}));
}

TEST(PackedGemmTest, EveryKernelEqualsTheOrderContractBitwise) {
  std::mt19937 rng(15);
  int isas_run = 0;
  for (const char* isa : {"portable", "avx2", "avx512"}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;  // this CPU cannot run it
    ++isas_run;
    for (int32_t m : {1, 2, 3, 4, 7, 8, 9, 33, 64, 65}) {
      for (int32_t n : {1, 17, 97, 300}) {
        for (int32_t k : {1, 5, 64, 257}) {
          SCOPED_TRACE(std::string(isa) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                       " k=" + std::to_string(k));
          const std::vector<float> x = Random(rng, static_cast<size_t>(m) * k);
          const std::vector<float> w = Random(rng, static_cast<size_t>(n) * k);
          std::vector<float> packed(PackedFloats(n, k));
          PackPanels(w.data(), n, k, packed.data());
          // One guard value past the end: the ragged last panel must not be stored past n.
          std::vector<float> y(static_cast<size_t>(m) * n + 1, 7.0f);
          std::vector<float> want(static_cast<size_t>(m) * n);
          GemmPackedPanels(x.data(), packed.data(), m, n, k, 0, NumPanels(n), y.data());
          GemmReference(x.data(), w.data(), m, n, k, want.data());
          EXPECT_EQ(y.back(), 7.0f);
          y.pop_back();
          ASSERT_TRUE(SameBits(y, want));
        }
      }
    }
  }
  EXPECT_GE(isas_run, 1);
}

TEST(PackedGemmTest, PanelRangesComputeOnlyTheirColumns) {
  std::mt19937 rng(16);
  const int32_t m = 5, n = 70, k = 33;  // 5 panels, the last one ragged
  const std::vector<float> x = Random(rng, m * k), w = Random(rng, n * k);
  std::vector<float> packed(PackedFloats(n, k));
  PackPanels(w.data(), n, k, packed.data());
  std::vector<float> want(m * n), y(m * n, 0.0f);
  GemmReference(x.data(), w.data(), m, n, k, want.data());
  // Split as threads do: [0, 2), [2, 3), [3, 5), in a scrambled order.
  GemmPackedPanels(x.data(), packed.data(), m, n, k, 3, 5, y.data());
  GemmPackedPanels(x.data(), packed.data(), m, n, k, 0, 2, y.data());
  GemmPackedPanels(x.data(), packed.data(), m, n, k, 2, 3, y.data());
  EXPECT_TRUE(SameBits(y, want));
}

// Through the backend: weights uploaded (packed) once, Linear over 1 row and over 64 rows with 1
// and 2 threads; the same row gives the same bits every time.
TEST(PackedGemmTest, BackendLinearRowIsTheSameAloneInABatchAndOnAnyThreadCount) {
  std::mt19937 rng(17);
  const int32_t n = 301, k = 288, m = 64;
  const std::vector<float> x = Random(rng, m * k), w = Random(rng, n * k);
  std::vector<float> want(m * n);
  GemmReference(x.data(), w.data(), m, n, k, want.data());
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    std::unique_ptr<Backend> b = CreateCpuBackend(threads);
    const WeightRef wr = b->UploadMatrix(w.data(), n, k);
    ASSERT_NE(wr.data, nullptr);
    EXPECT_EQ(wr.layout, WeightLayout::kPanel16);
    std::vector<float> batch(m * n);
    b->Linear(x.data(), wr, m, n, k, batch.data());
    EXPECT_TRUE(SameBits(batch, want));
    for (int32_t r : {0, 13, 63}) {
      std::vector<float> alone(n);
      b->Linear(x.data() + r * k, wr, 1, n, k, alone.data());
      EXPECT_TRUE(
          SameBits(alone, std::vector<float>(want.begin() + r * n, want.begin() + (r + 1) * n)))
          << "row " << r;
    }
    // Row-major Gemm (packs on the fly) keeps the same contract.
    std::vector<float> g(m * n);
    b->Gemm(x.data(), w.data(), m, n, k, g.data());
    EXPECT_TRUE(SameBits(g, want));
    // The embedding lookup reads the packed table.
    const int32_t ids[] = {0, 300, 16, 17};
    std::vector<float> rows(4 * k);
    b->EmbeddingLookup(wr, ids, 4, k, rows.data());
    for (int t = 0; t < 4; ++t) {
      EXPECT_EQ(0, std::memcmp(rows.data() + t * k, w.data() + ids[t] * k, 4 * k)) << t;
    }
    b->Deallocate(const_cast<void*>(wr.data));
  }
}

}  // namespace
}  // namespace tinyserve
