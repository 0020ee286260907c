// Batch invariance of the CUDA backend (issue 15): with CudaBackendOptions::batch_invariant the
// GEMMs are bitwise the CPU GEMM's sequential fmaf chain (written out below as the reference) and a
// row's output does not depend on the other rows; attention gives a row the same bits alone, in a
// big batch with a much wider block table, and as the last token of a prefill chunk. Bitwise, not
// a tolerance. Skips without a CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <tuple>
#include <utility>

#include "kernels/cuda/ops.h"
#include "kernels/fp8.h"
#include "tests/gpu/gpu_test_util.h"
#ifdef TINYSERVE_GPU_HOST
#include "tests/gpu_host/executor.h"
#endif

namespace tinyserve {
namespace {

// The contract of the batch-invariant GEMM (and of the CPU's): y[i, j] is one fmaf chain over k in
// increasing order from 0.0f, on w as the backend stores it (bf16 weights widened exactly).
std::vector<float> FmaChainGemm(const std::vector<float>& x, const std::vector<float>& w, int32_t m,
                                int32_t n, int32_t k) {
  std::vector<float> y(static_cast<size_t>(m) * n);
  for (int32_t i = 0; i < m; ++i) {
    for (int32_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int32_t p = 0; p < k; ++p) {
        acc = std::fmaf(x[static_cast<size_t>(i) * k + p], w[static_cast<size_t>(j) * k + p], acc);
      }
      y[static_cast<size_t>(i) * n + j] = acc;
    }
  }
  return y;
}

// y = Linear(x, w) on `b` (m rows at `x`, a device pointer), read back; the row after the m rows
// is poisoned first and must stay NaN.
std::vector<float> RunLinear(Backend* b, const float* x, WeightRef w, int32_t m, int32_t n,
                             int32_t k) {
  const std::vector<float> nan(static_cast<size_t>(m + 1) * n, kNan);
  DeviceBuffer y(b, nan.size() * 4);
  b->CopyToDevice(y.as<void>(), nan.data(), nan.size() * 4);
  b->Linear(x, w, m, n, k, y.as<float>());
  const Status s = b->Synchronize();
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<float> got(nan.size());
  b->CopyToHost(got.data(), y.as<void>(), got.size() * 4);
  EXPECT_TRUE(Bitwise(std::vector<float>(got.end() - n, got.end()), std::vector<float>(n, kNan)))
      << "wrote past the last row";
  got.resize(static_cast<size_t>(m) * n);
  return got;
}

struct WeightDtype {
  DType dtype;
  std::string name;
};
void PrintTo(const WeightDtype& d, std::ostream* os) { *os << d.name; }

class CudaBatchInvariantGemmTest : public ::testing::TestWithParam<WeightDtype> {
 protected:
  void SetUp() override {
    TS_SKIP_WITHOUT_CUDA();
    gpu_ = MakeCudaBackend(GetParam().dtype, /*batch_invariant=*/true);
    ASSERT_NE(gpu_, nullptr);
  }
  bool bf16() const { return GetParam().dtype == DType::kBFloat16; }
  std::unique_ptr<Backend> gpu_;
};

TEST_P(CudaBatchInvariantGemmTest, NameSaysBatchInvariant) {
  EXPECT_NE(gpu_->name().find("batch-invariant GEMM"), std::string::npos) << gpu_->name();
}

TEST_P(CudaBatchInvariantGemmTest, LinearIsBitwiseTheFmaChainOnAwkwardSizes) {
  std::mt19937 rng(bf16() ? 21 : 20);
  for (const int32_t k : {5, 64, 257}) {
    for (const int32_t n : {17, 97, 300}) {
      const std::vector<float> wh = Random(rng, static_cast<size_t>(n) * k);
      const WeightRef w = gpu_->UploadWeight(wh.data(), wh.size());
      ASSERT_NE(w.data, nullptr);
      ASSERT_EQ(w.dtype, GetParam().dtype);
      const std::vector<float> w_stored = bf16() ? RoundToBf16(wh) : wh;
      for (const int32_t m : {1, 2, 7, 33, 64}) {
        SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) +
                     " k=" + std::to_string(k));
        // x is not rounded: the invariant path keeps fp32 activations with bf16 weights too.
        const std::vector<float> xh = Random(rng, static_cast<size_t>(m) * k, -2.0f, 2.0f);
        DeviceBuffer x(gpu_.get(), xh.size() * 4);
        gpu_->CopyToDevice(x.as<void>(), xh.data(), xh.size() * 4);
        EXPECT_TRUE(Bitwise(RunLinear(gpu_.get(), x.as<float>(), w, m, n, k),
                            FmaChainGemm(xh, w_stored, m, n, k)));
      }
      gpu_->Deallocate(const_cast<void*>(w.data));
    }
  }
}

TEST_P(CudaBatchInvariantGemmTest, GemmOnRawFp32WeightsIsBitwiseTheFmaChain) {
  if (bf16()) GTEST_SKIP() << "Gemm takes fp32 weights; the fp32 instance covers it";
  std::mt19937 rng(22);
  for (const auto& [m, n, k] : std::vector<std::tuple<int32_t, int32_t, int32_t>>{
           {1, 300, 257}, {33, 17, 5}, {64, 97, 64}, {97, 54, 2048}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k));
    const std::vector<float> xh = Random(rng, static_cast<size_t>(m) * k);
    const std::vector<float> wh = Random(rng, static_cast<size_t>(n) * k);
    DeviceBuffer x(gpu_.get(), xh.size() * 4), w(gpu_.get(), wh.size() * 4);
    DeviceBuffer y(gpu_.get(), static_cast<size_t>(m) * n * 4);
    gpu_->CopyToDevice(x.as<void>(), xh.data(), xh.size() * 4);
    gpu_->CopyToDevice(w.as<void>(), wh.data(), wh.size() * 4);
    gpu_->Gemm(x.as<float>(), w.as<float>(), m, n, k, y.as<float>());
    ASSERT_TRUE(gpu_->Synchronize().ok());
    std::vector<float> got(static_cast<size_t>(m) * n);
    gpu_->CopyToHost(got.data(), y.as<void>(), got.size() * 4);
    EXPECT_TRUE(Bitwise(got, FmaChainGemm(xh, wh, m, n, k)));
  }
}

// The decode-sized tile (m <= 8) and the prefill tile (larger m) give a row the same bits.
TEST_P(CudaBatchInvariantGemmTest, ARowIsTheSameAloneAndInsideABatchOf64) {
  std::mt19937 rng(bf16() ? 24 : 23);
  for (const auto& [n, k] : std::vector<std::pair<int32_t, int32_t>>{{300, 257}, {97, 2048}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k));
    const std::vector<float> wh = Random(rng, static_cast<size_t>(n) * k);
    const WeightRef w = gpu_->UploadWeight(wh.data(), wh.size());
    ASSERT_NE(w.data, nullptr);
    const int32_t m = 64;
    const std::vector<float> xh = Random(rng, static_cast<size_t>(m) * k);
    DeviceBuffer x(gpu_.get(), xh.size() * 4);
    gpu_->CopyToDevice(x.as<void>(), xh.data(), xh.size() * 4);
    const std::vector<float> all = RunLinear(gpu_.get(), x.as<float>(), w, m, n, k);
    for (const int32_t r : {0, 1, 17, 40, 63}) {
      for (const int32_t rows : {1, 2, 7, 33}) {
        if (r + rows > m) continue;
        SCOPED_TRACE("rows " + std::to_string(r) + ".." + std::to_string(r + rows - 1));
        const std::vector<float> part =
            RunLinear(gpu_.get(), x.as<float>() + static_cast<size_t>(r) * k, w, rows, n, k);
        EXPECT_TRUE(
            Bitwise(part, std::vector<float>(all.begin() + static_cast<size_t>(r) * n,
                                             all.begin() + static_cast<size_t>(r + rows) * n)));
      }
    }
    gpu_->Deallocate(const_cast<void*>(w.data));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaBatchInvariantGemmTest,
                         ::testing::Values(WeightDtype{DType::kFloat32, "Fp32"},
                                           WeightDtype{DType::kBFloat16, "Bf16"}),
                         [](const ::testing::TestParamInfo<WeightDtype>& param_info) {
                           return param_info.param.name;
                         });

// Attention: one sequence's last query row, computed (a) alone as a decode token (a narrow table,
// few rows: one block per split), (b) as a decode token in a batch of 40 sequences whose widest
// table is ~10x wider (many rows: one block per row), (c) as the last token of a 3-token prefill
// chunk in that batch. The split length is fixed, so all three are the same bits.
struct InvariantAttentionCase {
  std::string name;
  int32_t block_size, num_heads, num_kv_heads, head_dim, context;
};
void PrintTo(const InvariantAttentionCase& c, std::ostream* os) { *os << c.name; }

class CudaAttentionInvarianceTest : public ::testing::TestWithParam<InvariantAttentionCase> {
 protected:
  void SetUp() override {
    TS_SKIP_WITHOUT_CUDA();
    gpu_ = MakeCudaBackend(DType::kFloat32);
    ASSERT_NE(gpu_, nullptr);
  }
  template <typename T>
  DeviceBuffer Put(const std::vector<T>& host) {
    DeviceBuffer d(gpu_.get(), host.size() * sizeof(T));
    gpu_->CopyToDevice(d.as<void>(), host.data(), host.size() * sizeof(T));
    return d;
  }
  std::unique_ptr<Backend> gpu_;
};

TEST_P(CudaAttentionInvarianceTest, ARowIsTheSameAloneInAWideBatchAndInAPrefillChunk) {
  const InvariantAttentionCase& c = GetParam();
  std::mt19937 rng(30);
  const int32_t bs = c.block_size, hd = c.head_dim, heads = c.num_heads;
  const int32_t kv_width = c.num_kv_heads * hd;
  const int32_t q_width = heads * hd;  // q rows packed (stride q_width)
  // Sequences of the batch: the one under test and the others, one of them far longer (its table
  // the widest). On the host execution layer a smaller crowd: every row of it is computed.
  const int32_t wide_context = std::max(kOnHostLayer ? 2000 : 5000, c.context + 500);
  const int32_t num_seqs = kOnHostLayer ? 8 : 40, target = kOnHostLayer ? 5 : 17;
  std::vector<int32_t> contexts(num_seqs);
  for (int32_t s = 0; s < num_seqs; ++s)
    contexts[s] = std::uniform_int_distribution<int32_t>(1, kOnHostLayer ? 200 : 900)(rng);
  contexts[3] = wide_context;
  contexts[target] = c.context;
  auto blocks_of = [&](int32_t len) { return (len + bs - 1) / bs; };
  int32_t total_blocks = 0;
  for (int32_t len : contexts) total_blocks += blocks_of(len);
  std::vector<int32_t> order(total_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::vector<int32_t>> tables(num_seqs);
  size_t next = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t b = 0; b < blocks_of(contexts[s]); ++b) tables[s].push_back(order[next++]);
  }
  const size_t cache = static_cast<size_t>(total_blocks) * bs * kv_width;
  DeviceBuffer kc = Put(Random(rng, cache)), vc = Put(Random(rng, cache));
  const std::vector<float> q_target = Random(rng, q_width, -2.0f, 2.0f);

  // Runs attention over `seqs` (index into contexts, query tokens) with tables of `width` blocks;
  // the target's last query row is q_target. Returns that row's output.
  auto run = [&](const std::vector<std::pair<int32_t, int32_t>>& seqs, int32_t width) {
    std::vector<int32_t> table_flat, positions, query_start = {0};
    std::vector<float> q;
    size_t target_row = 0;
    for (const auto& [s, fresh] : seqs) {
      std::vector<int32_t> t = tables[s];
      t.resize(width, -1);
      table_flat.insert(table_flat.end(), t.begin(), t.end());
      for (int32_t i = 0; i < fresh; ++i) {
        positions.push_back(contexts[s] - fresh + i);
        const bool is_target = s == target && i == fresh - 1;
        if (is_target) target_row = positions.size() - 1;
        const std::vector<float> row = is_target ? q_target : Random(rng, q_width, -2.0f, 2.0f);
        q.insert(q.end(), row.begin(), row.end());
      }
      query_start.push_back(static_cast<int32_t>(positions.size()));
    }
    const int32_t num_tokens = static_cast<int32_t>(positions.size());
    DeviceBuffer d_q = Put(q), d_pos = Put(positions), d_qs = Put(query_start),
                 d_tables = Put(table_flat);
    DeviceBuffer out = Put(std::vector<float>(static_cast<size_t>(num_tokens) * q_width, kNan));
    AttentionMetadata meta;
    meta.num_tokens = num_tokens;
    meta.num_seqs = static_cast<int32_t>(seqs.size());
    meta.positions = d_pos.as<int32_t>();
    meta.query_start = d_qs.as<int32_t>();
    meta.block_tables = d_tables.as<int32_t>();
    meta.max_blocks_per_seq = width;
    meta.block_size = bs;
    gpu_->PagedAttention(d_q.as<float>(), q_width, kc.as<float>(), vc.as<float>(), meta, heads,
                         c.num_kv_heads, hd, out.as<float>());
    const Status st = gpu_->Synchronize();
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::vector<float> row(q_width);
    gpu_->CopyToHost(row.data(), out.as<float>() + target_row * q_width, q_width * 4);
    return row;
  };

  const std::vector<float> alone = run({{target, 1}}, blocks_of(c.context));
  for (float v : alone) ASSERT_FALSE(std::isnan(v));
  std::vector<std::pair<int32_t, int32_t>> batch;
  for (int32_t s = 0; s < num_seqs; ++s) batch.emplace_back(s, 1);
  const int32_t wide = blocks_of(wide_context);
  EXPECT_TRUE(Bitwise(run(batch, wide), alone)) << "decode in a batch of " << num_seqs;
  EXPECT_TRUE(Bitwise(run({{target, 1}}, wide), alone)) << "alone with a wide table";
  batch[target].second = std::min(3, c.context);
  EXPECT_TRUE(Bitwise(run(batch, wide), alone)) << "last token of a prefill chunk";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionInvarianceTest,
    ::testing::Values(InvariantAttentionCase{"OneSplitBs16Gqa4", 16, 32, 8, 128, 300},
                      InvariantAttentionCase{"ExactlyOneSplitBs8", 8, 8, 8, 64, 512},
                      InvariantAttentionCase{"ThreeSplitsBs16Gqa4", 16, 32, 8, 128, 1500},
                      InvariantAttentionCase{"ManySplitsBs1Hd80", 1, 4, 1, 80, 4097},
                      InvariantAttentionCase{"SplitsBs32Hd256", 32, 8, 2, 256, 2049},
                      // A group of 7 (served as 8, one head masked) and of 16 (two chunks of 8),
                      // and a head_dim the vectorized kernel does not take (the generic one).
                      InvariantAttentionCase{"Gqa7Bs16Hd64", 16, 14, 2, 64, 777},
                      InvariantAttentionCase{"Gqa16Bs16Hd32", 16, 16, 1, 32, 1025},
                      InvariantAttentionCase{"GenericHd6Bs4", 4, 4, 2, 6, 1100}),
    [](const ::testing::TestParamInfo<InvariantAttentionCase>& param_info) {
      return param_info.param.name;
    });

// The two launch shapes of cuda::LaunchPagedAttention (one block per row, folding its splits; one
// block per split, the row's last to finish folding them) give the same bits for every row,
// whatever the group size (1, 2, 4, 7, 8, 16 query heads per KV head), head_dim (both kernels) and
// block size, over a batch of decode rows and a prefill chunk whose rows span one to several
// splits.
struct LaunchShapeCase {
  std::string name;
  int32_t block_size, num_heads, num_kv_heads, head_dim;
  cuda::KvElem kv = cuda::KvElem::kF32;  // the cache's elements
};
void PrintTo(const LaunchShapeCase& c, std::ostream* os) { *os << c.name; }

class CudaAttentionLaunchShapeTest : public ::testing::TestWithParam<LaunchShapeCase> {};

template <typename T>
T* DeviceCopy(const std::vector<T>& host) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, std::max<size_t>(1, host.size()) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return d;
}

TEST_P(CudaAttentionLaunchShapeTest, OneBlockPerRowAndOneBlockPerSplitAgreeBitwise) {
  TS_SKIP_WITHOUT_CUDA();
  const LaunchShapeCase& c = GetParam();
  std::mt19937 rng(41);
  const int32_t bs = c.block_size, hd = c.head_dim, kv_width = c.num_kv_heads * hd;
  const int32_t q_width = c.num_heads * hd;
  // (context, query tokens): decode rows of 1 to 5 splits (of 256 or 512) and a prefill chunk.
  const std::vector<std::pair<int32_t, int32_t>> seqs =
      kOnHostLayer ? std::vector<std::pair<int32_t, int32_t>>{{1, 1}, {300, 1}, {530, 3}}
                   : std::vector<std::pair<int32_t, int32_t>>{
                         {1, 1}, {255, 1}, {256, 1}, {257, 1}, {1100, 1}, {2100, 1}, {600, 40}};
  int32_t width = 0, total_blocks = 0;
  for (const auto& [len, fresh] : seqs) {
    width = std::max(width, (len + bs - 1) / bs);
    total_blocks += (len + bs - 1) / bs;
  }
  std::vector<int32_t> order(total_blocks), tables, positions, query_start = {0};
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  size_t next = 0;
  for (const auto& [len, fresh] : seqs) {
    const int32_t blocks = (len + bs - 1) / bs;
    for (int32_t b = 0; b < width; ++b) tables.push_back(b < blocks ? order[next++] : -1);
    for (int32_t i = 0; i < fresh; ++i) positions.push_back(len - fresh + i);
    query_start.push_back(static_cast<int32_t>(positions.size()));
  }
  const int32_t num_tokens = static_cast<int32_t>(positions.size());
  const size_t cache = static_cast<size_t>(total_blocks) * bs * kv_width;
  cuda::PagedAttentionArgs a;
  a.q = DeviceCopy(Random(rng, static_cast<size_t>(num_tokens) * q_width, -2.0f, 2.0f));
  a.q_stride = q_width;
  auto bf16_bits = [](const std::vector<float>& v) {  // the upper halves: truncated, any bf16
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &v[i], 4);
      b[i] = static_cast<uint16_t>(u >> 16);
    }
    return b;
  };
  // fp8: any byte but the NaNs (0x7f, 0xff); kept, to compare with a bf16 cache of their values.
  auto fp8_bytes = [&rng](size_t n) {
    std::vector<uint8_t> b(n);
    for (uint8_t& x : b) {
      do {
        x = static_cast<uint8_t>(rng());
      } while ((x & 0x7f) == 0x7f);
    }
    return b;
  };
  std::vector<uint8_t> k8, v8;
  a.kv = c.kv;
  if (c.kv == cuda::KvElem::kBf16) {
    a.k_cache = DeviceCopy(bf16_bits(Random(rng, cache)));
    a.v_cache = DeviceCopy(bf16_bits(Random(rng, cache)));
  } else if (c.kv == cuda::KvElem::kFp8) {
    k8 = fp8_bytes(cache);
    v8 = fp8_bytes(cache);
    a.k_cache = DeviceCopy(k8);
    a.v_cache = DeviceCopy(v8);
  } else {
    a.k_cache = DeviceCopy(Random(rng, cache));
    a.v_cache = DeviceCopy(Random(rng, cache));
  }
  a.positions = DeviceCopy(positions);
  a.query_start = DeviceCopy(query_start);
  a.block_tables = DeviceCopy(tables);
  a.num_tokens = num_tokens;
  a.num_seqs = static_cast<int32_t>(seqs.size());
  a.max_blocks_per_seq = width;
  a.block_size = bs;
  a.num_heads = c.num_heads;
  a.num_kv_heads = c.num_kv_heads;
  a.head_dim = hd;
  const size_t out_floats = static_cast<size_t>(num_tokens) * q_width;
  auto run = [&](int32_t splits) {
    float* out = DeviceCopy(std::vector<float>(out_floats, kNan));
    const size_t scratch_floats =
        cuda::PagedAttentionScratchFloats(num_tokens, c.num_heads, hd, splits);
    float* scratch = scratch_floats > 0 ? DeviceCopy(std::vector<float>(scratch_floats)) : nullptr;
    const size_t num_counters = cuda::PagedAttentionCounters(num_tokens, c.num_heads);
    int32_t* counters = DeviceCopy(std::vector<int32_t>(num_counters, 0));
    a.out = out;
    // Twice on the same counters (as a replayed graph): the same bits, the counters left zero.
    std::vector<float> host(out_floats), again(out_floats);
    for (std::vector<float>* h : {&host, &again}) {
#ifdef TINYSERVE_GPU_HOST
      const int64_t kernels = gpu_host::NumKernelsRun();
#endif
      EXPECT_EQ(cuda::LaunchPagedAttention(a, splits, scratch, counters, nullptr), cudaSuccess);
#ifdef TINYSERVE_GPU_HOST
      EXPECT_EQ(gpu_host::NumKernelsRun() - kernels, 1);  // the splits' fold needs no second one
#endif
      EXPECT_EQ(cudaMemcpy(h->data(), out, out_floats * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    EXPECT_TRUE(Bitwise(again, host));
    std::vector<int32_t> left(num_counters, -1);
    EXPECT_EQ(cudaMemcpy(left.data(), counters, num_counters * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(left, std::vector<int32_t>(num_counters, 0));
    cudaFree(out);
    cudaFree(counters);
    if (scratch != nullptr) cudaFree(scratch);
    return host;
  };
  const std::vector<float> per_row = run(1);
  for (float v : per_row) ASSERT_FALSE(std::isnan(v));
  // The widest table's split count for either kernel: 2100 positions are 9 splits of 256.
  const int32_t widest = (width * bs + 255) / 256;
  EXPECT_TRUE(Bitwise(run(widest), per_row)) << widest << " splits";
  EXPECT_TRUE(Bitwise(run(widest + 3), per_row)) << widest + 3 << " splits";
  if (c.kv == cuda::KvElem::kFp8) {
    // An fp8 row is read as 8-value vectors, as a bf16 one: the bf16 kernel on the same values
    // (every e4m3 value is a bf16) gives the same bits.
    auto widened = [&](const std::vector<uint8_t>& b) {
      std::vector<float> f(b.size());
      for (size_t i = 0; i < b.size(); ++i) f[i] = E4m3ToFloat(b[i]);
      return bf16_bits(f);
    };
    const void* k = a.k_cache;
    const void* v = a.v_cache;
    a.kv = cuda::KvElem::kBf16;
    a.k_cache = DeviceCopy(widened(k8));
    a.v_cache = DeviceCopy(widened(v8));
    EXPECT_TRUE(Bitwise(run(1), per_row)) << "the bf16 kernel on the fp8 values";
    cudaFree(const_cast<void*>(a.k_cache));
    cudaFree(const_cast<void*>(a.v_cache));
    a.k_cache = k;
    a.v_cache = v;
  }
  for (const void* p :
       {static_cast<const void*>(a.q), static_cast<const void*>(a.k_cache),
        static_cast<const void*>(a.v_cache), static_cast<const void*>(a.positions),
        static_cast<const void*>(a.query_start), static_cast<const void*>(a.block_tables)}) {
    cudaFree(const_cast<void*>(p));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionLaunchShapeTest,
    ::testing::Values(
        LaunchShapeCase{"MhaBs16Hd64", 16, 4, 4, 64}, LaunchShapeCase{"Gqa2Bs1Hd128", 1, 4, 2, 128},
        LaunchShapeCase{"Gqa4Bs16Hd128", 16, 8, 2, 128},
        LaunchShapeCase{"Gqa7Bs8Hd80", 8, 14, 2, 80},
        LaunchShapeCase{"Gqa8Bs32Hd256", 32, 8, 1, 256},
        LaunchShapeCase{"Gqa16Bs16Hd8", 16, 16, 1, 8}, LaunchShapeCase{"GenericHd6Bs4", 4, 4, 2, 6},
        LaunchShapeCase{"Hd36Bs16", 16, 2, 1, 36}, LaunchShapeCase{"GenericHd10Bs16", 16, 6, 3, 10},
        LaunchShapeCase{"Bf16Gqa4Bs16Hd128", 16, 8, 2, 128, cuda::KvElem::kBf16},
        LaunchShapeCase{"Bf16Gqa7Bs8Hd64", 8, 14, 2, 64, cuda::KvElem::kBf16},
        LaunchShapeCase{"Bf16Gqa16Bs16Hd256", 16, 16, 1, 256, cuda::KvElem::kBf16},
        LaunchShapeCase{"Bf16Hd8Bs1", 1, 2, 1, 8, cuda::KvElem::kBf16},
        LaunchShapeCase{"Bf16GenericHd36Bs16", 16, 4, 2, 36, cuda::KvElem::kBf16},
        LaunchShapeCase{"Fp8Gqa4Bs16Hd128", 16, 8, 2, 128, cuda::KvElem::kFp8},
        LaunchShapeCase{"Fp8Gqa7Bs8Hd64", 8, 14, 2, 64, cuda::KvElem::kFp8},
        LaunchShapeCase{"Fp8Gqa16Bs16Hd256", 16, 16, 1, 256, cuda::KvElem::kFp8},
        LaunchShapeCase{"Fp8Hd8Bs1", 1, 2, 1, 8, cuda::KvElem::kFp8},
        LaunchShapeCase{"Fp8GenericHd36Bs16", 16, 4, 2, 36, cuda::KvElem::kFp8}),
    [](const ::testing::TestParamInfo<LaunchShapeCase>& param_info) {
      return param_info.param.name;
    });

}  // namespace
}  // namespace tinyserve
