// Tests of the Backend op set (kernels/backend.h) against the naive double-precision references in
// reference_ops.h, on seeded random inputs with awkward sizes (17, 54, 97 tokens; partial last
// blocks; head_dim 8/64/80; MHA, GQA 2 and 4, MQA; shuffled block tables).
//
// Every test body talks to the backend only through Allocate/CopyToDevice/CopyToHost and the ops,
// so it runs unchanged on any device: each backend under test is a BackendSpec (a factory plus the
// tolerance its fp32 ops are held to, CTranslate2 style), listed in BackendsUnderTest(). Only the
// CPU (1 and 2 threads) is listed now; a CUDA backend joins by adding its spec there.
// Copies (Embedding, GatherRows, WriteKvCache, the untouched parts of buffers) are checked bit for
// bit; arithmetic is checked with |got - ref| <= atol + rtol * |ref|.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/kernels/reference_ops.h"

namespace tinyserve {
namespace {

// ---- backends under test ------------------------------------------------------------------------

// A backend under test: how to make one, and the tolerance its fp32 arithmetic is held to.
struct BackendSpec {
  std::string name;  // test-name suffix, alphanumeric: "Cpu1Thread"
  std::function<std::unique_ptr<Backend>()> create;
  double atol = 0.0;
  double rtol = 0.0;
};

std::vector<BackendSpec> BackendsUnderTest() {
  return {
      {"Cpu1Thread", [] { return CreateCpuBackend(1); }, 1e-5, 1e-5},
      {"Cpu2Threads", [] { return CreateCpuBackend(2); }, 1e-5, 1e-5},
  };
}

// Test-name parts print as their names, not as bytes.
void PrintTo(const BackendSpec& spec, std::ostream* os) { *os << spec.name; }

// ---- device I/O and comparison helpers ----------------------------------------------------------

template <typename T>
DeviceBuffer Upload(Backend* backend, const std::vector<T>& host) {
  DeviceBuffer buf(backend, sizeof(T) * host.size());
  backend->CopyToDevice(buf.as<void>(), host.data(), buf.bytes());
  return buf;
}

// REQUIRES: buf holds at least `count` values of T.
template <typename T>
std::vector<T> Download(Backend* backend, const DeviceBuffer& buf, size_t count) {
  EXPECT_TRUE(backend->Synchronize().ok());
  std::vector<T> host(count);
  backend->CopyToHost(host.data(), buf.as<void>(), sizeof(T) * count);
  return host;
}

std::vector<float> RandomFloats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

int32_t RandomInt(std::mt19937& rng, int32_t lo, int32_t hi) {  // in [lo, hi]
  return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
}

// Succeeds iff |got[i] - ref[i]| <= atol + rtol * |ref[i]| + slack[i] for all i (NaN fails).
// `slack`, if given, widens the bound per element where the contract allows extra error.
::testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<double>& ref,
                                    double atol, double rtol,
                                    const std::vector<double>* slack = nullptr) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
  }
  size_t bad = 0;
  double worst = 0.0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double{got[i]} - ref[i]);
    const double tol = atol + rtol * std::abs(ref[i]) + (slack != nullptr ? (*slack)[i] : 0.0);
    if (!(err <= tol)) {
      if (bad < 5) first << "\n  [" << i << "] got " << got[i] << " want " << ref[i];
      worst = std::max(worst, err);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " values out of tolerance (worst error " << worst
         << "):" << first.str();
}

// Succeeds iff got and want are bit-for-bit identical.
::testing::AssertionResult BitwiseEqual(const std::vector<float>& got,
                                        const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (bad < 5) first << "\n  [" << i << "] got " << got[i] << " want " << want[i];
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " values differ:" << first.str();
}

// ---- element-wise ops, norms, GEMM, copies ------------------------------------------------------

class BackendOpTest : public ::testing::TestWithParam<BackendSpec> {
 protected:
  void SetUp() override {
    backend_ = GetParam().create();
    ASSERT_NE(backend_, nullptr);
  }
  Backend* backend() { return backend_.get(); }
  double atol() const { return GetParam().atol; }
  double rtol() const { return GetParam().rtol; }

  std::unique_ptr<Backend> backend_;
};

TEST_P(BackendOpTest, AllocateReturnsZeroedMemory) {
  const size_t count = 97;
  { DeviceBuffer dirty = Upload(backend(), std::vector<float>(count, -3.5f)); }
  DeviceBuffer buf(backend(), sizeof(float) * count);
  ASSERT_TRUE(buf.ok());
  EXPECT_TRUE(
      BitwiseEqual(Download<float>(backend(), buf, count), std::vector<float>(count, 0.0f)));
}

TEST_P(BackendOpTest, EmbeddingCopiesTableRowsExactly) {
  std::mt19937 rng(1);
  const int32_t vocab = 97, dim = 54, n = 17;
  const std::vector<float> table = RandomFloats(rng, static_cast<size_t>(vocab) * dim);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = RandomInt(rng, 0, vocab - 1);
  ids[0] = vocab - 1;  // the last row
  ids[1] = 0;          // the first row
  ids[2] = ids[5];     // a repeat
  // One sentinel row past the end must stay untouched.
  const std::vector<float> sentinel((n + 1) * dim, 7.25f);
  DeviceBuffer d_table = Upload(backend(), table), d_ids = Upload(backend(), ids);
  DeviceBuffer d_out = Upload(backend(), sentinel);

  backend()->Embedding(d_table.as<float>(), d_ids.as<int32_t>(), n, dim, d_out.as<float>());

  std::vector<float> want = sentinel;
  for (int32_t t = 0; t < n; ++t) {
    std::copy_n(&table[ids[t] * dim], dim, &want[t * dim]);
  }
  EXPECT_TRUE(BitwiseEqual(Download<float>(backend(), d_out, want.size()), want));
}

TEST_P(BackendOpTest, GatherRowsCopiesRowsExactly) {
  std::mt19937 rng(2);
  const int32_t num_rows = 54, dim = 80;
  const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(num_rows) * dim);
  DeviceBuffer d_x = Upload(backend(), x);
  for (const int32_t m : {1, 17}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    std::vector<int32_t> rows(m);
    for (int32_t& r : rows) r = RandomInt(rng, 0, num_rows - 1);
    rows[0] = num_rows - 1;
    if (m > 3) rows[3] = rows[1];  // a repeat
    const std::vector<float> sentinel((m + 1) * dim, -1.5f);
    DeviceBuffer d_rows = Upload(backend(), rows), d_out = Upload(backend(), sentinel);

    backend()->GatherRows(d_x.as<float>(), d_rows.as<int32_t>(), m, dim, d_out.as<float>());

    std::vector<float> want = sentinel;
    for (int32_t i = 0; i < m; ++i) std::copy_n(&x[rows[i] * dim], dim, &want[i * dim]);
    EXPECT_TRUE(BitwiseEqual(Download<float>(backend(), d_out, want.size()), want));
  }
}

struct NormShape {
  int32_t n;
  int32_t dim;
  float eps;
};
// 97 x 1000 is big enough for the CPU's multi-threaded path.
const NormShape kNormShapes[] = {
    {1, 8, 1e-5f}, {17, 97, 1e-6f}, {54, 288, 1e-5f}, {97, 1000, 1e-5f}};

TEST_P(BackendOpTest, RmsNormMatchesReference) {
  std::mt19937 rng(3);
  for (const NormShape& s : kNormShapes) {
    SCOPED_TRACE("n=" + std::to_string(s.n) + " dim=" + std::to_string(s.dim));
    const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(s.n) * s.dim, -2.0f, 2.0f);
    const std::vector<float> weight = RandomFloats(rng, s.dim, 0.5f, 1.5f);
    DeviceBuffer d_x = Upload(backend(), x), d_w = Upload(backend(), weight);
    DeviceBuffer d_out(backend(), sizeof(float) * x.size());

    backend()->RmsNorm(d_x.as<float>(), d_w.as<float>(), s.n, s.dim, s.eps, d_out.as<float>());

    EXPECT_TRUE(AllClose(Download<float>(backend(), d_out, x.size()),
                         reference::RmsNorm(x, weight, s.n, s.dim, s.eps), atol(), rtol()));
    EXPECT_TRUE(BitwiseEqual(Download<float>(backend(), d_x, x.size()), x)) << "x was modified";
  }
}

TEST_P(BackendOpTest, RmsNormOfTinyRowsIsDominatedByEps) {
  // mean(x^2) = 1e-8 << eps = 1e-2: out ~= x / sqrt(eps) * w, which pins where eps is added.
  const int32_t n = 2, dim = 8;
  const std::vector<float> x(n * dim, 1e-4f), weight(dim, 2.0f);
  DeviceBuffer d_x = Upload(backend(), x), d_w = Upload(backend(), weight);
  DeviceBuffer d_out(backend(), sizeof(float) * x.size());

  backend()->RmsNorm(d_x.as<float>(), d_w.as<float>(), n, dim, 1e-2f, d_out.as<float>());

  EXPECT_TRUE(AllClose(Download<float>(backend(), d_out, x.size()),
                       reference::RmsNorm(x, weight, n, dim, 1e-2), atol(), rtol()));
}

TEST_P(BackendOpTest, AddRmsNormUpdatesResidualAndNormalizesTheSum) {
  std::mt19937 rng(4);
  for (const NormShape& s : kNormShapes) {
    SCOPED_TRACE("n=" + std::to_string(s.n) + " dim=" + std::to_string(s.dim));
    const size_t size = static_cast<size_t>(s.n) * s.dim;
    const std::vector<float> residual = RandomFloats(rng, size, -2.0f, 2.0f);
    const std::vector<float> delta = RandomFloats(rng, size);
    const std::vector<float> weight = RandomFloats(rng, s.dim, 0.5f, 1.5f);
    DeviceBuffer d_res = Upload(backend(), residual), d_delta = Upload(backend(), delta);
    DeviceBuffer d_w = Upload(backend(), weight), d_out(backend(), sizeof(float) * size);

    backend()->AddRmsNorm(d_res.as<float>(), d_delta.as<float>(), d_w.as<float>(), s.n, s.dim,
                          s.eps, d_out.as<float>());

    // An fp32 add is exact-rounded: the updated residual is known bit for bit.
    std::vector<float> sum(size);
    for (size_t i = 0; i < size; ++i) sum[i] = residual[i] + delta[i];
    EXPECT_TRUE(BitwiseEqual(Download<float>(backend(), d_res, size), sum)) << "residual";
    EXPECT_TRUE(AllClose(Download<float>(backend(), d_out, size),
                         reference::RmsNorm(sum, weight, s.n, s.dim, s.eps), atol(), rtol()))
        << "out";
  }
}

// run.c's RMSNorm, the float ops in its order: the squares summed left to right in one float,
// divided by dim, eps added, 1 / sqrtf, then weight * (inv * x).
std::vector<float> RunCRmsNorm(const std::vector<float>& x, const std::vector<float>& weight,
                               int32_t n, int32_t dim, float eps) {
  std::vector<float> out(x.size());
  for (int32_t t = 0; t < n; ++t) {
    const float* xt = &x[static_cast<size_t>(t) * dim];
    float ss = 0.0f;
    for (int32_t j = 0; j < dim; ++j) {
      const float sq = xt[j] * xt[j];
      ss += sq;
    }
    ss /= static_cast<float>(dim);
    ss += eps;
    ss = 1.0f / std::sqrt(ss);
    for (int32_t j = 0; j < dim; ++j) {
      const float scaled = ss * xt[j];
      out[static_cast<size_t>(t) * dim + j] = weight[j] * scaled;
    }
  }
  return out;
}

// The CPU backend's RMSNorm is run.c's bit for bit, whatever the number of rows: rows are taken
// eight at a time (side-by-side sums) and the rest one by one, on one thread or shared out (97 x
// 768 is over the parallel threshold), and no row's bits depend on its neighbours.
TEST_P(BackendOpTest, RmsNormIsRunCsFloatOrderForEveryRowCount) {
  std::mt19937 rng(5);
  for (const int32_t dim : {8, 97, 768}) {
    for (const int32_t n : {1, 7, 8, 9, 17, 32, 97}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " dim=" + std::to_string(dim));
      const size_t size = static_cast<size_t>(n) * dim;
      const std::vector<float> x = RandomFloats(rng, size, -2.0f, 2.0f);
      const std::vector<float> delta = RandomFloats(rng, size);
      const std::vector<float> weight = RandomFloats(rng, dim, 0.5f, 1.5f);
      DeviceBuffer d_x = Upload(backend(), x), d_w = Upload(backend(), weight);
      DeviceBuffer d_delta = Upload(backend(), delta), d_out(backend(), sizeof(float) * size);

      backend()->RmsNorm(d_x.as<float>(), d_w.as<float>(), n, dim, 1e-5f, d_out.as<float>());
      EXPECT_TRUE(BitwiseEqual(Download<float>(backend(), d_out, size),
                               RunCRmsNorm(x, weight, n, dim, 1e-5f)))
          << "RmsNorm";

      backend()->AddRmsNorm(d_x.as<float>(), d_delta.as<float>(), d_w.as<float>(), n, dim, 1e-6f,
                            d_out.as<float>());
      std::vector<float> sum(size);
      for (size_t i = 0; i < size; ++i) sum[i] = x[i] + delta[i];
      EXPECT_TRUE(BitwiseEqual(Download<float>(backend(), d_out, size),
                               RunCRmsNorm(sum, weight, n, dim, 1e-6f)))
          << "AddRmsNorm";
    }
  }
}

TEST_P(BackendOpTest, GemmMatchesReference) {
  struct Shape {
    int32_t m, n, k;
  };
  // m = 1 takes the gemv path on the CPU; the rest are non-square with odd k. The larger shapes
  // are split over output features between threads on the CPU (slices of 16, ragged last one).
  const Shape shapes[] = {{1, 1, 1},     {1, 54, 97},   {1, 97, 17},  {2, 1, 33},    {17, 54, 97},
                          {54, 17, 513}, {3, 1000, 33}, {97, 80, 64}, {1, 1000, 129}};
  std::mt19937 rng(5);
  for (const Shape& s : shapes) {
    SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                 " k=" + std::to_string(s.k));
    const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(s.m) * s.k);
    const std::vector<float> w = RandomFloats(rng, static_cast<size_t>(s.n) * s.k);
    // y starts as garbage: Gemm overwrites it (beta = 0), it does not accumulate.
    const std::vector<float> garbage(static_cast<size_t>(s.m) * s.n, 123.0f);
    DeviceBuffer d_x = Upload(backend(), x), d_w = Upload(backend(), w);
    DeviceBuffer d_y = Upload(backend(), garbage);

    backend()->Gemm(d_x.as<float>(), d_w.as<float>(), s.m, s.n, s.k, d_y.as<float>());

    EXPECT_TRUE(AllClose(Download<float>(backend(), d_y, garbage.size()),
                         reference::Gemm(x, w, s.m, s.n, s.k), atol(), rtol()));
  }
}

TEST_P(BackendOpTest, SiluAndMulMatchesReference) {
  struct Shape {
    int32_t n, hidden;
  };
  const Shape shapes[] = {{1, 97}, {17, 54}, {54, 8}, {97, 1000}};
  std::mt19937 rng(6);
  for (const Shape& s : shapes) {
    SCOPED_TRACE("n=" + std::to_string(s.n) + " hidden=" + std::to_string(s.hidden));
    std::vector<float> gate_up(static_cast<size_t>(s.n) * 2 * s.hidden);
    std::uniform_real_distribution<float> gate(-8.0f, 8.0f), up(-1.0f, 1.0f);
    for (int32_t t = 0; t < s.n; ++t) {
      for (int32_t i = 0; i < s.hidden; ++i) {
        gate_up[(2 * t) * s.hidden + i] = gate(rng);
        gate_up[(2 * t + 1) * s.hidden + i] = up(rng);
      }
    }
    DeviceBuffer d_in = Upload(backend(), gate_up);
    DeviceBuffer d_out(backend(), sizeof(float) * s.n * s.hidden);

    backend()->SiluAndMul(d_in.as<float>(), s.n, s.hidden, d_out.as<float>());

    EXPECT_TRUE(AllClose(Download<float>(backend(), d_out, static_cast<size_t>(s.n) * s.hidden),
                         reference::SiluAndMul(gate_up, s.n, s.hidden), atol(), rtol()));
  }
}

TEST_P(BackendOpTest, AddBiasAddsTheBiasToEveryRow) {
  struct Shape {
    int32_t m, n;
  };
  const Shape shapes[] = {{1, 97}, {17, 54}, {97, 1152}, {3, 1}};
  std::mt19937 rng(12);
  for (const Shape& s : shapes) {
    SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n));
    const std::vector<float> y = RandomFloats(rng, static_cast<size_t>(s.m) * s.n, -4.0f, 4.0f);
    const std::vector<float> bias = RandomFloats(rng, s.n, -2.0f, 2.0f);
    DeviceBuffer d_y = Upload(backend(), y), d_bias = Upload(backend(), bias);

    backend()->AddBias(d_y.as<float>(), d_bias.as<float>(), s.m, s.n);

    // One fp32 addition per element: exact up to its rounding.
    EXPECT_TRUE(AllClose(Download<float>(backend(), d_y, y.size()),
                         reference::AddBias(y, bias, s.m, s.n), atol(), rtol()));
    EXPECT_TRUE(BitwiseEqual(Download<float>(backend(), d_bias, bias.size()), bias));
  }
}

TEST_P(BackendOpTest, WriteKvCachePutsRowsAtTheirSlotsAndSkipsPadding) {
  struct Shape {
    int32_t num_blocks, block_size, num_heads, num_kv_heads, head_dim;
  };
  const Shape shapes[] = {{7, 4, 4, 2, 8}, {3, 16, 8, 1, 80}, {20, 1, 4, 4, 64}};
  std::mt19937 rng(7);
  for (const Shape& s : shapes) {
    SCOPED_TRACE("block_size=" + std::to_string(s.block_size) +
                 " kv_heads=" + std::to_string(s.num_kv_heads));
    const int32_t n = 17;
    const int32_t kv_width = s.num_kv_heads * s.head_dim;
    const int32_t num_slots = s.num_blocks * s.block_size;
    // Rows come from a fused qkv buffer: [n, q | k | v], so k and v have row stride qkv_width.
    const int32_t qkv_width = (s.num_heads + 2 * s.num_kv_heads) * s.head_dim;
    const std::vector<float> qkv = RandomFloats(rng, static_cast<size_t>(n) * qkv_width);
    // Distinct random slots; the first and the last cache row are always written; four rows are
    // padding (-1).
    std::vector<int64_t> middle_slots(num_slots - 2);
    std::iota(middle_slots.begin(), middle_slots.end(), int64_t{1});
    std::shuffle(middle_slots.begin(), middle_slots.end(), rng);
    std::vector<int64_t> slots(middle_slots.begin(), middle_slots.begin() + n);
    slots[1] = 0;
    slots[n - 2] = num_slots - 1;
    for (const int32_t t : {0, 5, 6, n - 1}) slots[t] = -1;
    const size_t cache_size = static_cast<size_t>(num_slots) * kv_width;
    const std::vector<float> k_before = RandomFloats(rng, cache_size, 10.0f, 11.0f);
    const std::vector<float> v_before = RandomFloats(rng, cache_size, -11.0f, -10.0f);
    DeviceBuffer d_qkv = Upload(backend(), qkv), d_slots = Upload(backend(), slots);
    DeviceBuffer d_k = Upload(backend(), k_before), d_v = Upload(backend(), v_before);
    const float* k_rows = d_qkv.as<float>() + s.num_heads * s.head_dim;
    const float* v_rows = k_rows + kv_width;

    backend()->WriteKvCache(k_rows, v_rows, qkv_width, d_slots.as<int64_t>(), n, kv_width,
                            d_k.as<float>(), d_v.as<float>());

    // Expected: the cache [num_blocks, block_size, num_kv_heads, head_dim] with each non-padding
    // row at (block, offset) = (slot / block_size, slot % block_size), everything else unchanged.
    std::vector<float> k_want = k_before, v_want = v_before;
    for (int32_t t = 0; t < n; ++t) {
      if (slots[t] < 0) continue;
      const int64_t block = slots[t] / s.block_size, offset = slots[t] % s.block_size;
      for (int32_t h = 0; h < s.num_kv_heads; ++h) {
        for (int32_t d = 0; d < s.head_dim; ++d) {
          const size_t dst =
              ((block * s.block_size + offset) * s.num_kv_heads + h) * s.head_dim + d;
          const size_t src =
              static_cast<size_t>(t) * qkv_width + s.num_heads * s.head_dim + h * s.head_dim + d;
          k_want[dst] = qkv[src];
          v_want[dst] = qkv[src + kv_width];
        }
      }
    }
    EXPECT_TRUE(BitwiseEqual(Download<float>(backend(), d_k, cache_size), k_want)) << "k cache";
    EXPECT_TRUE(BitwiseEqual(Download<float>(backend(), d_v, cache_size), v_want)) << "v cache";
  }
}

TEST_P(BackendOpTest, WriteKvCacheOfOnlyPaddingLeavesTheCacheAlone) {
  std::mt19937 rng(8);
  const int32_t n = 3, kv_width = 16, num_slots = 8;
  const std::vector<float> kv = RandomFloats(rng, n * kv_width);
  const std::vector<int64_t> slots(n, -1);
  const std::vector<float> before = RandomFloats(rng, num_slots * kv_width);
  DeviceBuffer d_kv = Upload(backend(), kv), d_slots = Upload(backend(), slots);
  DeviceBuffer d_k = Upload(backend(), before), d_v = Upload(backend(), before);

  backend()->WriteKvCache(d_kv.as<float>(), d_kv.as<float>(), kv_width, d_slots.as<int64_t>(), n,
                          kv_width, d_k.as<float>(), d_v.as<float>());

  EXPECT_TRUE(BitwiseEqual(Download<float>(backend(), d_k, before.size()), before));
  EXPECT_TRUE(BitwiseEqual(Download<float>(backend(), d_v, before.size()), before));
}

// ---- RoPE ---------------------------------------------------------------------------------------

struct RopeCase {
  RopeStyle style;
  double base;
  int32_t num_heads, num_kv_heads, head_dim;
  bool scaled = false;  // per-pair frequency divisors (reference::RopeInvFreq), as rope scaling
};

std::string RopeCaseName(const RopeCase& c) {
  return std::string(c.style == RopeStyle::kNeox ? "Neox" : "Interleaved") + "Base" +
         std::to_string(static_cast<int64_t>(c.base)) + "H" + std::to_string(c.num_heads) + "Kv" +
         std::to_string(c.num_kv_heads) + "D" + std::to_string(c.head_dim) +
         (c.scaled ? "Scaled" : "");
}

void PrintTo(const RopeCase& c, std::ostream* os) { *os << RopeCaseName(c); }

class RopeTest : public ::testing::TestWithParam<std::tuple<BackendSpec, RopeCase>> {};

// Checks Rope on q [n, num_heads, head_dim] and k [n, num_kv_heads, head_dim] against
// reference::RopeHead, in two layouts: q and k inside one fused qkv buffer (row stride
// (num_heads + 2*num_kv_heads)*head_dim + 3, so rows are not even aligned to a head), and q and k
// in separate contiguous buffers. Everything outside q and k must be untouched.
TEST_P(RopeTest, RotatesPairsByTheFormulaAngle) {
  // Not a structured binding: the lambdas below capture `c`, which clang 14 cannot do for one.
  const BackendSpec& spec = std::get<0>(GetParam());
  const RopeCase& c = std::get<1>(GetParam());
  std::unique_ptr<Backend> backend = spec.create();
  const int32_t n = 97;  // enough for the CPU's multi-threaded path with 8 + 2 heads of 80
  const int32_t q_width = c.num_heads * c.head_dim, k_width = c.num_kv_heads * c.head_dim;
  std::mt19937 rng(9);
  std::vector<int32_t> positions(n);
  for (int32_t& p : positions) p = RandomInt(rng, 1, 300);
  positions[0] = 0;  // identity
  positions[1] = 1;
  positions[4] = positions[9];  // a repeat

  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused qkv rows" : "separate q and k");
    const int32_t q_stride = fused ? q_width + 2 * k_width + 3 : q_width;
    const int32_t k_stride = fused ? q_stride : k_width;
    const int32_t k_offset = fused ? q_width : 0;  // within its buffer
    const std::vector<float> q_buf = RandomFloats(rng, static_cast<size_t>(n) * q_stride);
    const std::vector<float> k_buf =
        fused ? std::vector<float>() : RandomFloats(rng, static_cast<size_t>(n) * k_stride);
    std::vector<float> inv_freq(c.head_dim / 2);
    for (int32_t i = 0; i < c.head_dim / 2; ++i) {
      inv_freq[i] = static_cast<float>(reference::RopeInvFreq(i, c.head_dim, c.base, c.scaled));
    }
    DeviceBuffer d_q = Upload(backend.get(), q_buf), d_pos = Upload(backend.get(), positions);
    DeviceBuffer d_k = fused ? DeviceBuffer() : Upload(backend.get(), k_buf);
    DeviceBuffer d_freq = Upload(backend.get(), inv_freq);
    float* k_ptr = (fused ? d_q.as<float>() : d_k.as<float>()) + k_offset;

    backend->Rope(d_q.as<float>(), q_stride, k_ptr, k_stride, d_pos.as<int32_t>(), n, c.num_heads,
                  c.num_kv_heads, c.head_dim, d_freq.as<float>(), c.style);

    // Expected buffers in double: the input, with the heads of q and k rotated. `slack` allows the
    // inverse frequency and the angle pos * inv_freq to be formed in fp32 (an error of about
    // pos * FLT_EPSILON radians, times the pair's magnitude); it is zero at position 0.
    auto rotate_heads = [&](const std::vector<float>& in, int32_t stride, int32_t offset,
                            int32_t num_heads, std::vector<double>* want,
                            std::vector<double>* slack) {
      for (int32_t t = 0; t < n; ++t) {
        for (int32_t h = 0; h < num_heads; ++h) {
          const size_t head = static_cast<size_t>(t) * stride + offset + h * c.head_dim;
          reference::RopeHead(&(*want)[head], positions[t], c.head_dim, c.base,
                              c.style == RopeStyle::kNeox, c.scaled);
          for (int32_t i = 0; i < c.head_dim / 2; ++i) {
            const auto [a, b] = reference::RopePair(i, c.head_dim, c.style == RopeStyle::kNeox);
            const double magnitude = std::abs(in[head + a]) + std::abs(in[head + b]);
            (*slack)[head + a] = (*slack)[head + b] = 2.0 * positions[t] * FLT_EPSILON * magnitude;
          }
        }
      }
    };
    std::vector<double> q_want(q_buf.begin(), q_buf.end()), q_slack(q_buf.size(), 0.0);
    rotate_heads(q_buf, q_stride, 0, c.num_heads, &q_want, &q_slack);
    const std::vector<float> q_got = Download<float>(backend.get(), d_q, q_buf.size());
    if (fused) {
      rotate_heads(q_buf, q_stride, k_offset, c.num_kv_heads, &q_want, &q_slack);
      EXPECT_TRUE(AllClose(q_got, q_want, spec.atol, spec.rtol, &q_slack));
    } else {
      std::vector<double> k_want(k_buf.begin(), k_buf.end()), k_slack(k_buf.size(), 0.0);
      rotate_heads(k_buf, k_stride, 0, c.num_kv_heads, &k_want, &k_slack);
      EXPECT_TRUE(AllClose(q_got, q_want, spec.atol, spec.rtol, &q_slack)) << "q";
      EXPECT_TRUE(AllClose(Download<float>(backend.get(), d_k, k_buf.size()), k_want, spec.atol,
                           spec.rtol, &k_slack))
          << "k";
    }
    // Elements outside q and k heads (v, and the 3 padding floats) are untouched, bit for bit,
    // and so is token 0 (position 0 rotates by angle 0).
    std::vector<float> untouched_got, untouched_want;
    for (int32_t t = 0; t < n; ++t) {
      for (int32_t j = 0; j < q_stride; ++j) {
        const bool is_qk = j < q_width + (fused ? k_width : 0);
        if (is_qk && positions[t] != 0) continue;
        untouched_got.push_back(q_got[static_cast<size_t>(t) * q_stride + j]);
        untouched_want.push_back(q_buf[static_cast<size_t>(t) * q_stride + j]);
      }
    }
    EXPECT_TRUE(BitwiseEqual(untouched_got, untouched_want)) << "outside q/k, or position 0";
  }
}

// ---- paged attention ----------------------------------------------------------------------------

// One sequence of a batch: its whole context is in the cache; the last `chunk_len` tokens of it
// are the queries (chunk_len == 1: decode; chunk_len < context_len: a prefill chunk over a cached
// prefix; chunk_len == context_len: a first prefill).
struct SeqSpec {
  int32_t context_len;
  int32_t chunk_len;
};

struct AttentionShape {
  int32_t block_size, num_heads, num_kv_heads, head_dim;
};

std::string AttentionShapeName(const AttentionShape& s) {
  return "Bs" + std::to_string(s.block_size) + "H" + std::to_string(s.num_heads) + "Kv" +
         std::to_string(s.num_kv_heads) + "D" + std::to_string(s.head_dim);
}

void PrintTo(const AttentionShape& s, std::ostream* os) { *os << AttentionShapeName(s); }

// Runs PagedAttention on one batch of `seqs` and compares each sequence's output with a dense
// causal attention over that sequence's context. The cache blocks are handed out in shuffled
// order, unused cache rows (other blocks, the tail of a partial last block) hold random values,
// and block-table padding points at a poison block (K 0, V 1000), so reading anything beyond a
// query's position shows. q rows come from a fused qkv buffer (row stride > num_heads*head_dim);
// the output starts as NaN, so every element must be written.
void CheckPagedAttention(const BackendSpec& spec, const AttentionShape& shape,
                         const std::vector<SeqSpec>& seqs, uint32_t seed) {
  std::unique_ptr<Backend> backend = spec.create();
  const auto [bs, nh, nkv, hd] = shape;
  const int32_t kv_width = nkv * hd, q_width = nh * hd;
  const int32_t q_stride = (nh + 2 * nkv) * hd;
  const int32_t num_seqs = static_cast<int32_t>(seqs.size());
  std::mt19937 rng(seed);

  // Block tables over shuffled block ids; the last shuffled id is the poison block, and two
  // blocks stay unused.
  std::vector<int32_t> blocks_needed;
  int32_t total_blocks = 0, max_blocks = 0, num_tokens = 0;
  for (const SeqSpec& s : seqs) {
    blocks_needed.push_back((s.context_len + bs - 1) / bs);
    total_blocks += blocks_needed.back();
    max_blocks = std::max(max_blocks, blocks_needed.back());
    num_tokens += s.chunk_len;
  }
  const int32_t max_blocks_per_seq = max_blocks + 2;  // every table has padding
  const int32_t num_blocks = total_blocks + 3;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int32_t poison = ids.back();
  std::vector<int32_t> tables(static_cast<size_t>(num_seqs) * max_blocks_per_seq, poison);
  for (int32_t s = 0, next = 0; s < num_seqs; ++s) {
    for (int32_t b = 0; b < blocks_needed[s]; ++b) tables[s * max_blocks_per_seq + b] = ids[next++];
  }

  // The cache: random everywhere, poison block set, then each sequence's dense K/V scattered in.
  const size_t cache_size = static_cast<size_t>(num_blocks) * bs * kv_width;
  std::vector<float> k_cache = RandomFloats(rng, cache_size),
                     v_cache = RandomFloats(rng, cache_size);
  std::fill_n(&k_cache[static_cast<size_t>(poison) * bs * kv_width], bs * kv_width, 0.0f);
  std::fill_n(&v_cache[static_cast<size_t>(poison) * bs * kv_width], bs * kv_width, 1000.0f);
  std::vector<std::vector<float>> k_dense(num_seqs), v_dense(num_seqs);
  for (int32_t s = 0; s < num_seqs; ++s) {
    k_dense[s] = RandomFloats(rng, static_cast<size_t>(seqs[s].context_len) * kv_width);
    v_dense[s] = RandomFloats(rng, static_cast<size_t>(seqs[s].context_len) * kv_width);
    for (int32_t p = 0; p < seqs[s].context_len; ++p) {
      const size_t slot =
          static_cast<size_t>(tables[s * max_blocks_per_seq + p / bs]) * bs + p % bs;
      std::copy_n(&k_dense[s][p * kv_width], kv_width, &k_cache[slot * kv_width]);
      std::copy_n(&v_dense[s][p * kv_width], kv_width, &v_cache[slot * kv_width]);
    }
  }

  // Queries, positions and query_start.
  const std::vector<float> qkv =
      RandomFloats(rng, static_cast<size_t>(num_tokens) * q_stride, -1.5f, 1.5f);
  std::vector<int32_t> positions, query_start = {0};
  for (const SeqSpec& s : seqs) {
    for (int32_t j = 0; j < s.chunk_len; ++j) positions.push_back(s.context_len - s.chunk_len + j);
    query_start.push_back(query_start.back() + s.chunk_len);
  }

  DeviceBuffer d_qkv = Upload(backend.get(), qkv), d_k = Upload(backend.get(), k_cache);
  DeviceBuffer d_v = Upload(backend.get(), v_cache), d_pos = Upload(backend.get(), positions);
  DeviceBuffer d_start = Upload(backend.get(), query_start);
  DeviceBuffer d_tables = Upload(backend.get(), tables);
  const size_t out_size = static_cast<size_t>(num_tokens) * q_width;
  DeviceBuffer d_out =
      Upload(backend.get(), std::vector<float>(out_size, std::numeric_limits<float>::quiet_NaN()));
  AttentionMetadata meta;
  meta.num_tokens = num_tokens;
  meta.num_seqs = num_seqs;
  meta.positions = d_pos.as<int32_t>();
  meta.query_start = d_start.as<int32_t>();
  meta.block_tables = d_tables.as<int32_t>();
  meta.max_blocks_per_seq = max_blocks_per_seq;
  meta.block_size = bs;

  backend->PagedAttention(d_qkv.as<float>(), q_stride, d_k.as<float>(), d_v.as<float>(), meta, nh,
                          nkv, hd, d_out.as<float>());

  const std::vector<float> out = Download<float>(backend.get(), d_out, out_size);
  for (int32_t s = 0; s < num_seqs; ++s) {
    SCOPED_TRACE("seq " + std::to_string(s) + ": context " + std::to_string(seqs[s].context_len) +
                 ", chunk " + std::to_string(seqs[s].chunk_len));
    std::vector<float> q_dense;
    for (int32_t t = query_start[s]; t < query_start[s + 1]; ++t) {
      q_dense.insert(q_dense.end(), &qkv[static_cast<size_t>(t) * q_stride],
                     &qkv[static_cast<size_t>(t) * q_stride + q_width]);
    }
    const std::vector<double> want = reference::CausalAttention(
        q_dense, k_dense[s], v_dense[s], seqs[s].context_len, seqs[s].chunk_len, nh, nkv, hd);
    const std::vector<float> got(out.begin() + static_cast<size_t>(query_start[s]) * q_width,
                                 out.begin() + static_cast<size_t>(query_start[s + 1]) * q_width);
    EXPECT_TRUE(AllClose(got, want, spec.atol, spec.rtol));
  }
}

class PagedAttentionTest
    : public ::testing::TestWithParam<std::tuple<BackendSpec, AttentionShape>> {};

TEST_P(PagedAttentionTest, MixedDecodeAndPrefillChunksMatchDenseCausalAttention) {
  const auto& [spec, shape] = GetParam();
  CheckPagedAttention(spec, shape,
                      {
                          {97, 1},   // decode, long context
                          {17, 17},  // first prefill
                          {54, 17},  // prefill chunk after a 37-token cached prefix
                          {1, 1},    // first prefill of a one-token prompt
                          {33, 1},   // decode just past a block boundary for bs 16 and 4
                          {40, 5},   // prefill chunk ending on a block boundary for bs 4
                      },
                      /*seed=*/10);
}

TEST_P(BackendOpTest, PagedAttentionOver97TokensInBlocksOf16WithAPartialLastBlock) {
  const AttentionShape shape = {16, 8, 2, 64};
  for (const int32_t chunk : {97, 17, 1}) {  // whole prefill, last chunk, decode
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    CheckPagedAttention(GetParam(), shape, {{97, chunk}}, /*seed=*/11 + chunk);
  }
}

// ---- instantiation ------------------------------------------------------------------------------

INSTANTIATE_TEST_SUITE_P(Backends, BackendOpTest, ::testing::ValuesIn(BackendsUnderTest()),
                         [](const auto& test_info) { return test_info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Backends, RopeTest,
    ::testing::Combine(::testing::ValuesIn(BackendsUnderTest()),
                       ::testing::Values(RopeCase{RopeStyle::kInterleaved, 10000.0, 4, 4, 8},
                                         RopeCase{RopeStyle::kInterleaved, 10000.0, 4, 2, 64},
                                         RopeCase{RopeStyle::kInterleaved, 500000.0, 8, 2, 80},
                                         RopeCase{RopeStyle::kInterleaved, 500000.0, 4, 1, 64},
                                         RopeCase{RopeStyle::kNeox, 10000.0, 4, 4, 8},
                                         RopeCase{RopeStyle::kNeox, 10000.0, 8, 2, 80},
                                         RopeCase{RopeStyle::kNeox, 500000.0, 4, 2, 64},
                                         RopeCase{RopeStyle::kNeox, 500000.0, 8, 2, 80},
                                         RopeCase{RopeStyle::kInterleaved, 10000.0, 4, 2, 64, true},
                                         RopeCase{RopeStyle::kNeox, 500000.0, 8, 2, 80, true})),
    [](const auto& test_info) {
      return std::get<0>(test_info.param).name + "_" + RopeCaseName(std::get<1>(test_info.param));
    });

// Block sizes 1, 4, 16 against MHA (ratio 1), GQA ratios 2 and 4, and MQA; head_dim 8, 64, 80.
INSTANTIATE_TEST_SUITE_P(
    Backends, PagedAttentionTest,
    ::testing::Combine(::testing::ValuesIn(BackendsUnderTest()),
                       ::testing::Values(AttentionShape{1, 4, 4, 8}, AttentionShape{1, 8, 2, 80},
                                         AttentionShape{4, 4, 2, 64}, AttentionShape{4, 4, 4, 8},
                                         AttentionShape{4, 8, 2, 80}, AttentionShape{16, 4, 4, 64},
                                         AttentionShape{16, 8, 2, 80},
                                         AttentionShape{16, 4, 1, 64})),
    [](const auto& test_info) {
      return std::get<0>(test_info.param).name + "_" +
             AttentionShapeName(std::get<1>(test_info.param));
    });

}  // namespace
}  // namespace tinyserve
