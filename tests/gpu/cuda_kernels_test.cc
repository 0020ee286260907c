// The CUDA backend's ops against the CPU backend (the oracle) on fresh random inputs with awkward
// sizes: 17, 54, 97 tokens; partial last blocks; block sizes 1, 8, 16; GQA ratios 1, 2, 4;
// shuffled block tables; contexts past 4096. Every output buffer is poisoned with NaN on both
// backends first, so an element the kernel forgets to write fails. Copies are compared bit for
// bit; arithmetic with |gpu - cpu| <= atol + rtol * |cpu|. Skips without a CUDA device.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <tuple>
#include <utility>

#include "kernels/cuda/ops.h"
#include "tests/gpu/flash_prefill_twin.h"
#include "tests/gpu/gpu_test_util.h"
#ifdef TINYSERVE_GPU_HOST
#include "tests/gpu_host/executor.h"
#endif

namespace tinyserve {
namespace {

int32_t RandInt(std::mt19937& rng, int32_t lo, int32_t hi) {
  return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
}

class CudaKernelTest : public ::testing::Test {
 protected:
  // The same data on both backends.
  struct Twin {
    DeviceBuffer cpu, gpu;
    size_t bytes = 0;
    template <typename T>
    T* c() const {
      return cpu.as<T>();
    }
    template <typename T>
    T* g() const {
      return gpu.as<T>();
    }
  };

  void SetUp() override {
    TS_SKIP_WITHOUT_CUDA();
    cpu_ = CreateCpuBackend(2);
    gpu_ = MakeCudaBackend(DType::kFloat32);
    ASSERT_NE(gpu_, nullptr);
  }

  template <typename T>
  Twin Put(const std::vector<T>& host) {
    Twin t;
    t.bytes = host.size() * sizeof(T);
    t.cpu = DeviceBuffer(cpu_.get(), t.bytes);
    t.gpu = DeviceBuffer(gpu_.get(), t.bytes);
    cpu_->CopyToDevice(t.cpu.as<void>(), host.data(), t.bytes);
    gpu_->CopyToDevice(t.gpu.as<void>(), host.data(), t.bytes);
    return t;
  }
  Twin Poisoned(size_t count) { return Put(std::vector<float>(count, kNan)); }

  std::vector<float> FromCpu(const Twin& t) {
    std::vector<float> h(t.bytes / 4);
    cpu_->CopyToHost(h.data(), t.cpu.as<void>(), t.bytes);
    return h;
  }
  std::vector<float> FromGpu(const Twin& t) {
    const Status s = gpu_->Synchronize();
    EXPECT_TRUE(s.ok()) << s.ToString();
    std::vector<float> h(t.bytes / 4);
    gpu_->CopyToHost(h.data(), t.gpu.as<void>(), t.bytes);
    return h;
  }

  std::unique_ptr<Backend> cpu_, gpu_;
};

TEST_F(CudaKernelTest, EmbeddingCopiesRowsExactly) {
  std::mt19937 rng(1);
  const int32_t vocab = 97, dim = 54, n = 17;
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = RandInt(rng, 0, vocab - 1);
  ids[0] = vocab - 1;
  Twin table = Put(Random(rng, static_cast<size_t>(vocab) * dim)), d_ids = Put(ids);
  Twin out = Poisoned(static_cast<size_t>(n + 1) * dim);  // one row past the end stays NaN
  cpu_->Embedding(table.c<float>(), d_ids.c<int32_t>(), n, dim, out.c<float>());
  gpu_->Embedding(table.g<float>(), d_ids.g<int32_t>(), n, dim, out.g<float>());
  EXPECT_TRUE(Bitwise(FromGpu(out), FromCpu(out)));
}

TEST_F(CudaKernelTest, Bf16EmbeddingIsTheRoundedTable) {
  std::unique_ptr<Backend> bf16 = MakeCudaBackend(DType::kBFloat16);
  ASSERT_NE(bf16, nullptr);
  ASSERT_EQ(bf16->weight_dtype(), DType::kBFloat16);
  std::mt19937 rng(2);
  const int32_t vocab = 54, dim = 97, n = 17;
  const std::vector<float> table = Random(rng, static_cast<size_t>(vocab) * dim, -3.0f, 3.0f);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = RandInt(rng, 0, vocab - 1);
  const WeightRef w = bf16->UploadWeight(table.data(), table.size());
  ASSERT_NE(w.data, nullptr);
  ASSERT_EQ(w.dtype, DType::kBFloat16);
  DeviceBuffer d_ids(bf16.get(), ids.size() * 4);
  bf16->CopyToDevice(d_ids.as<void>(), ids.data(), ids.size() * 4);
  const std::vector<float> nan(static_cast<size_t>(n) * dim, kNan);
  DeviceBuffer out(bf16.get(), nan.size() * 4);
  bf16->CopyToDevice(out.as<void>(), nan.data(), nan.size() * 4);
  bf16->EmbeddingLookup(w, d_ids.as<int32_t>(), n, dim, out.as<float>());
  ASSERT_TRUE(bf16->Synchronize().ok());
  std::vector<float> got(nan.size()), want(nan.size());
  bf16->CopyToHost(got.data(), out.as<void>(), got.size() * 4);
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t j = 0; j < dim; ++j) want[t * dim + j] = RoundToBf16(table[ids[t] * dim + j]);
  }
  EXPECT_TRUE(Bitwise(got, want));
  bf16->Deallocate(const_cast<void*>(w.data));
}

TEST_F(CudaKernelTest, RmsNormAndAddRmsNormMatchTheCpu) {
  std::mt19937 rng(3);
  for (const auto& [n, dim] :
       std::vector<std::pair<int32_t, int32_t>>{{1, 54}, {17, 288}, {97, 2048}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " dim=" + std::to_string(dim));
    const size_t count = static_cast<size_t>(n) * dim;
    Twin x = Put(Random(rng, count, -2.0f, 2.0f)), w = Put(Random(rng, dim));
    Twin delta = Put(Random(rng, count)), out = Poisoned(count), out2 = Poisoned(count);
    cpu_->RmsNorm(x.c<float>(), w.c<float>(), n, dim, 1e-5f, out.c<float>());
    gpu_->RmsNorm(x.g<float>(), w.g<float>(), n, dim, 1e-5f, out.g<float>());
    EXPECT_TRUE(Close(FromGpu(out), FromCpu(out), 1e-5, 1e-5));
    cpu_->AddRmsNorm(x.c<float>(), delta.c<float>(), w.c<float>(), n, dim, 1e-6f, out2.c<float>());
    gpu_->AddRmsNorm(x.g<float>(), delta.g<float>(), w.g<float>(), n, dim, 1e-6f, out2.g<float>());
    EXPECT_TRUE(Bitwise(FromGpu(x), FromCpu(x)));  // residual += delta: one float add each
    EXPECT_TRUE(Close(FromGpu(out2), FromCpu(out2), 1e-5, 1e-5));
  }
}

TEST_F(CudaKernelTest, RopeMatchesTheCpuInBothLayouts) {
  std::mt19937 rng(4);
  const int32_t num_heads = 4, num_kv_heads = 2;
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNeox}) {
    for (int32_t hd : {8, 64, 128}) {
      for (float theta : {10000.0f, 500000.0f}) {
        // Small positions are held tight; large ones within what the float angle pos * freq
        // allows (sinf/cosf of a large angle may differ by an ulp between libm and CUDA).
        for (const auto& [max_pos, atol] :
             std::vector<std::pair<int32_t, double>>{{127, 2e-5}, {8191, 2e-3}}) {
          SCOPED_TRACE("hd=" + std::to_string(hd) + " max_pos=" + std::to_string(max_pos));
          const int32_t n = 54, stride = (num_heads + 2 * num_kv_heads) * hd;
          std::vector<int32_t> pos(n);
          for (int32_t& p : pos) p = RandInt(rng, 0, max_pos);
          std::vector<float> inv_freq(static_cast<size_t>(hd / 2));
          for (int32_t i = 0; i < hd / 2; ++i) {
            inv_freq[static_cast<size_t>(i)] =
                1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(hd));
          }
          Twin qkv = Put(Random(rng, static_cast<size_t>(n) * stride)), d_pos = Put(pos);
          Twin d_freq = Put(inv_freq);
          for (Backend* b : {cpu_.get(), gpu_.get()}) {
            float* base = b == cpu_.get() ? qkv.c<float>() : qkv.g<float>();
            const int32_t* p = b == cpu_.get() ? d_pos.c<int32_t>() : d_pos.g<int32_t>();
            const float* f = b == cpu_.get() ? d_freq.c<float>() : d_freq.g<float>();
            b->Rope(base, stride, base + num_heads * hd, stride, p, n, num_heads, num_kv_heads, hd,
                    f, style);
          }
          // V (the last kv_dim of each row) must be untouched: compared with the rest.
          EXPECT_TRUE(Close(FromGpu(qkv), FromCpu(qkv), atol, 1e-5));
        }
      }
    }
  }
}

// The fused RoPE + KV-cache write is bitwise Rope then WriteKvCache on the same backend (q, k and
// both caches), for both layouts, fp32, bf16 and fp8 caches, padding rows (slot -1) and a GQA shape
// with an odd number of pairs per thread; and close to the CPU's Rope + WriteKvCache.
TEST_F(CudaKernelTest, FusedRopeAndKvWriteIsRopeThenWriteKvCache) {
  std::mt19937 rng(14);
  const int32_t num_heads = 6, num_kv_heads = 2, hd = 40, n = 23;
  const int32_t stride = (num_heads + 2 * num_kv_heads) * hd, kv_width = num_kv_heads * hd;
  const int32_t num_slots = 64;
  std::vector<int32_t> pos(n);
  for (int32_t& p : pos) p = RandInt(rng, 0, 3000);
  std::vector<int64_t> slots(num_slots);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(n);
  slots[4] = slots[19] = -1;
  std::vector<float> inv_freq(hd / 2);
  for (int32_t i = 0; i < hd / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / hd);
  const std::vector<float> qkv_h = Random(rng, static_cast<size_t>(n) * stride);
  Twin d_pos = Put(pos), d_slots = Put(slots), d_freq = Put(inv_freq);
  for (DType kv : {DType::kFloat32, DType::kBFloat16, DType::kFp8E4m3}) {
    std::unique_ptr<Backend> gpu = MakeCudaBackend(DType::kFloat32, false, kv);
    ASSERT_NE(gpu, nullptr);
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNeox}) {
      SCOPED_TRACE(std::string(DTypeName(kv)) + (style == RopeStyle::kNeox ? " neox" : " pairs"));
      const size_t cache_bytes = static_cast<size_t>(num_slots) * kv_width * DTypeBytes(kv);
      std::vector<std::vector<uint8_t>> got;  // qkv, k cache, v cache: separate, then fused
      for (bool fused : {false, true}) {
        DeviceBuffer qkv(gpu.get(), qkv_h.size() * 4), kc(gpu.get(), cache_bytes),
            vc(gpu.get(), cache_bytes);
        gpu->CopyToDevice(qkv.as<void>(), qkv_h.data(), qkv_h.size() * 4);
        float* q = qkv.as<float>();
        float* k = q + num_heads * hd;
        const float* v = k + kv_width;
        if (fused) {
          gpu->RopeAndWriteKvCache(q, k, v, stride, d_pos.g<int32_t>(), d_slots.g<int64_t>(), n,
                                   num_heads, num_kv_heads, hd, d_freq.g<float>(), style,
                                   kc.as<void>(), vc.as<void>());
        } else {
          gpu->Rope(q, stride, k, stride, d_pos.g<int32_t>(), n, num_heads, num_kv_heads, hd,
                    d_freq.g<float>(), style);
          gpu->WriteKvCache(k, v, stride, d_slots.g<int64_t>(), n, kv_width, kc.as<void>(),
                            vc.as<void>());
        }
        ASSERT_TRUE(gpu->Synchronize().ok());
        for (const DeviceBuffer* d : {&qkv, &kc, &vc}) {
          std::vector<uint8_t> bytes(d->bytes());
          gpu->CopyToHost(bytes.data(), d->as<void>(), bytes.size());
          got.push_back(std::move(bytes));
        }
      }
      EXPECT_EQ(got[0], got[3]) << "q and k";
      EXPECT_EQ(got[1], got[4]) << "k cache";
      EXPECT_EQ(got[2], got[5]) << "v cache";
      if (kv == DType::kFloat32) {  // and the CPU's two ops, within libm's sinf/cosf
        Twin qkv = Put(qkv_h), kc = Poisoned(static_cast<size_t>(num_slots) * kv_width),
             vc = Poisoned(static_cast<size_t>(num_slots) * kv_width);
        cpu_->RopeAndWriteKvCache(qkv.c<float>(), qkv.c<float>() + num_heads * hd,
                                  qkv.c<float>() + num_heads * hd + kv_width, stride,
                                  d_pos.c<int32_t>(), d_slots.c<int64_t>(), n, num_heads,
                                  num_kv_heads, hd, d_freq.c<float>(), style, kc.c<void>(),
                                  vc.c<void>());
        std::vector<float> gpu_k(static_cast<size_t>(num_slots) * kv_width);
        std::memcpy(gpu_k.data(), got[4].data(), got[4].size());
        const std::vector<float> cpu_k = FromCpu(kc);
        for (size_t i = 0; i < gpu_k.size(); ++i) {
          if (std::isnan(cpu_k[i])) {  // a slot no row wrote: the GPU's cache holds its zeros
            EXPECT_EQ(gpu_k[i], 0.0f) << i;
          } else {
            EXPECT_NEAR(gpu_k[i], cpu_k[i], 2e-3) << i;
          }
        }
      }
    }
  }
}

TEST_F(CudaKernelTest, WriteKvCacheSkipsPaddingRowsAndTouchesNothingElse) {
  std::mt19937 rng(5);
  const int32_t num_blocks = 7, bs = 8, kv_width = 80, n = 17, stride = 3 * kv_width;
  std::vector<int64_t> slots(num_blocks * bs);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(n);
  slots[3] = slots[11] = -1;
  Twin qkv = Put(Random(rng, static_cast<size_t>(n) * stride)), d_slots = Put(slots);
  Twin kc = Poisoned(static_cast<size_t>(num_blocks) * bs * kv_width);
  Twin vc = Poisoned(static_cast<size_t>(num_blocks) * bs * kv_width);
  cpu_->WriteKvCache(qkv.c<float>() + kv_width, qkv.c<float>() + 2 * kv_width, stride,
                     d_slots.c<int64_t>(), n, kv_width, kc.c<float>(), vc.c<float>());
  gpu_->WriteKvCache(qkv.g<float>() + kv_width, qkv.g<float>() + 2 * kv_width, stride,
                     d_slots.g<int64_t>(), n, kv_width, kc.g<float>(), vc.g<float>());
  EXPECT_TRUE(Bitwise(FromGpu(kc), FromCpu(kc)));
  EXPECT_TRUE(Bitwise(FromGpu(vc), FromCpu(vc)));
}

// A bf16 cache holds each value rounded to nearest, ties to even (as __float2bfloat16_rn); padding
// rows write nothing.
TEST_F(CudaKernelTest, WriteKvCacheRoundsToBf16) {
  gpu_ = MakeCudaBackend(DType::kFloat32, /*batch_invariant=*/false, DType::kBFloat16);
  ASSERT_NE(gpu_, nullptr);
  std::mt19937 rng(15);
  const int32_t rows = 9, kv_width = 24, stride = 2 * kv_width;
  std::vector<float> kv = Random(rng, static_cast<size_t>(rows) * stride, -3.0f, 3.0f);
  // Ties: halfway between two bf16 values, rounding to the even one (down here, then up).
  const uint32_t tie_down = 0x3f808000u, tie_up = 0x3f818000u;
  std::memcpy(&kv[1], &tie_down, 4);
  std::memcpy(&kv[2], &tie_up, 4);
  std::vector<int64_t> slots = {4, 0, -1, 7, 1, 2, 3, 5, 6};
  Twin d_kv = Put(kv), d_slots = Put(slots);
  const size_t cache = static_cast<size_t>(rows) * kv_width;
  DeviceBuffer k16(gpu_.get(), cache * 2), v16(gpu_.get(), cache * 2);
  const std::vector<uint16_t> poison(cache, 0x7fc1);
  gpu_->CopyToDevice(k16.as<void>(), poison.data(), cache * 2);
  gpu_->CopyToDevice(v16.as<void>(), poison.data(), cache * 2);
  gpu_->WriteKvCache(d_kv.g<float>(), d_kv.g<float>() + kv_width, stride, d_slots.g<int64_t>(),
                     rows, kv_width, k16.as<void>(), v16.as<void>());
  std::vector<uint16_t> got_k(cache), got_v(cache);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  gpu_->CopyToHost(got_k.data(), k16.as<void>(), cache * 2);
  gpu_->CopyToHost(got_v.data(), v16.as<void>(), cache * 2);
  auto bits = [](float x) {
    const float r = RoundToBf16(x);
    uint32_t u;
    std::memcpy(&u, &r, 4);
    return static_cast<uint16_t>(u >> 16);
  };
  EXPECT_EQ(got_k[kv_width * 4 + 1], 0x3f80);  // the row of slot 4 is row 0
  EXPECT_EQ(got_k[kv_width * 4 + 2], 0x3f82);
  std::vector<bool> written(rows, false);
  for (int32_t t = 0; t < rows; ++t) {
    if (slots[t] < 0) continue;
    written[slots[t]] = true;
    for (int32_t j = 0; j < kv_width; ++j) {
      ASSERT_EQ(got_k[slots[t] * kv_width + j], bits(kv[t * stride + j])) << t << " " << j;
      ASSERT_EQ(got_v[slots[t] * kv_width + j], bits(kv[t * stride + kv_width + j])) << t;
    }
  }
  for (int32_t r = 0; r < rows; ++r) {
    if (written[r]) continue;
    for (int32_t j = 0; j < kv_width; ++j) EXPECT_EQ(got_k[r * kv_width + j], 0x7fc1);
  }
}

// An fp8 cache holds each value as FloatToE4m3 (kernels/fp8.h: nearest, ties to even, saturating
// at +-448): ties, subnormals, values past 448 and infinities; padding rows write nothing.
TEST_F(CudaKernelTest, WriteKvCacheRoundsToFp8) {
  gpu_ = MakeCudaBackend(DType::kFloat32, /*batch_invariant=*/false, DType::kFp8E4m3);
  ASSERT_NE(gpu_, nullptr);
  ASSERT_EQ(gpu_->KvCacheElementBytes(), 1u);
  std::mt19937 rng(16);
  const int32_t rows = 9, kv_width = 24, stride = 2 * kv_width;
  std::vector<float> kv = Random(rng, static_cast<size_t>(rows) * stride, -500.0f, 500.0f);
  for (size_t i = 0; i < kv.size(); i += 3) kv[i] *= 1e-3f;  // normals and subnormals of e4m3 too
  // Row 0 (slot 4): a tie rounding down to even (1.0625 between 1 and 1.125), one rounding up
  // (1.1875 -> 1.25), a subnormal tie (3 * 2^-10 -> 2 * 2^-9), half the smallest subnormal (-> 0),
  // past the largest finite and infinities (-> +-448), and the largest finite itself.
  const float specials[] = {1.0625f, 1.1875f,  3.0f / 1024, 1.0f / 1024, 460.0f,
                            -1e9f,   INFINITY, -INFINITY,   448.0f};
  for (size_t j = 0; j < std::size(specials); ++j) kv[1 + j] = specials[j];
  std::vector<int64_t> slots = {4, 0, -1, 7, 1, 2, 3, 5, 6};
  Twin d_kv = Put(kv), d_slots = Put(slots);
  const size_t cache = static_cast<size_t>(rows) * kv_width;
  DeviceBuffer k8(gpu_.get(), cache), v8(gpu_.get(), cache);
  const std::vector<uint8_t> poison(cache, 0x5a);
  gpu_->CopyToDevice(k8.as<void>(), poison.data(), cache);
  gpu_->CopyToDevice(v8.as<void>(), poison.data(), cache);
  gpu_->WriteKvCache(d_kv.g<float>(), d_kv.g<float>() + kv_width, stride, d_slots.g<int64_t>(),
                     rows, kv_width, k8.as<void>(), v8.as<void>());
  std::vector<uint8_t> got_k(cache), got_v(cache);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  gpu_->CopyToHost(got_k.data(), k8.as<void>(), cache);
  gpu_->CopyToHost(got_v.data(), v8.as<void>(), cache);
  const uint8_t want_specials[] = {0x38, 0x3a, 0x02, 0x00, 0x7e, 0xfe, 0x7e, 0xfe, 0x7e};
  for (size_t j = 0; j < std::size(specials); ++j) {
    EXPECT_EQ(got_k[kv_width * 4 + 1 + j], want_specials[j]) << specials[j];
  }
  std::vector<bool> written(rows, false);
  for (int32_t t = 0; t < rows; ++t) {
    if (slots[t] < 0) continue;
    written[slots[t]] = true;
    for (int32_t j = 0; j < kv_width; ++j) {
      ASSERT_EQ(got_k[slots[t] * kv_width + j], FloatToE4m3(kv[t * stride + j])) << t << " " << j;
      ASSERT_EQ(got_v[slots[t] * kv_width + j], FloatToE4m3(kv[t * stride + kv_width + j])) << t;
    }
  }
  for (int32_t r = 0; r < rows; ++r) {
    if (written[r]) continue;
    for (int32_t j = 0; j < kv_width; ++j) EXPECT_EQ(got_k[r * kv_width + j], 0x5a);
  }
}

struct AttentionCase {
  std::string name;
  int32_t block_size, num_heads, num_kv_heads, head_dim;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (cached prefix, new query tokens)
};

void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

class CudaAttentionTest : public CudaKernelTest,
                          public ::testing::WithParamInterface<AttentionCase> {
 protected:
  // The CPU's fp32 cache against the CUDA backend's cache of `kv` elements (bf16 or fp8: written
  // by its WriteKvCache from the same fp32 rows, and the CPU given those rows rounded to `kv`).
  void CheckAgainstTheCpu(DType kv, bool batch_invariant = false, KvScales scales = {});
};

// On bf16 and fp8 caches the prefill rows (sequences of 2 or more query tokens) of head_dim 64 and
// 128 run the tensor-core kernel (flash_prefill.cu) unless --batch-invariant: those rows are held
// to its twin (FlashPrefillTwin: bit for bit on the host execution layer) and to the fp32 CPU
// within the bf16 rounding of queries and probabilities; every other row to the CPU as before.
TEST_P(CudaAttentionTest, MatchesTheCpu) { CheckAgainstTheCpu(DType::kFloat32); }
TEST_P(CudaAttentionTest, MatchesTheCpuOnABf16Cache) { CheckAgainstTheCpu(DType::kBFloat16); }
TEST_P(CudaAttentionTest, MatchesTheCpuOnAnFp8Cache) { CheckAgainstTheCpu(DType::kFp8E4m3); }
TEST_P(CudaAttentionTest, MatchesTheCpuOnABf16CacheWhenBatchInvariant) {
  CheckAgainstTheCpu(DType::kBFloat16, /*batch_invariant=*/true);
}
// Per-tensor scales (a checkpoint's k_scale / v_scale): the cache holds e4m3(x / scale), attention
// reads value * scale; the CPU is given the values times the scales.
TEST_P(CudaAttentionTest, MatchesTheCpuOnAnFp8CacheWithScales) {
  CheckAgainstTheCpu(DType::kFp8E4m3, /*batch_invariant=*/false, KvScales{0.3f, 2.5f});
}
TEST_P(CudaAttentionTest, MatchesTheCpuOnAnFp8CacheWithScalesWhenBatchInvariant) {
  CheckAgainstTheCpu(DType::kFp8E4m3, /*batch_invariant=*/true, KvScales{0.3f, 2.5f});
}

void CudaAttentionTest::CheckAgainstTheCpu(DType kv, bool batch_invariant, KvScales scales) {
  const bool narrow_cache = kv != DType::kFloat32;
  if (narrow_cache) {
    gpu_ = MakeCudaBackend(DType::kFloat32, batch_invariant, kv);
    ASSERT_NE(gpu_, nullptr);
    ASSERT_EQ(gpu_->kv_cache_dtype(), kv);
  }
  const AttentionCase& c = GetParam();
  std::mt19937 rng(6);
  const int32_t bs = c.block_size, hd = c.head_dim;
  const int32_t kv_width = c.num_kv_heads * hd;
  const int32_t q_stride = c.num_heads * hd + 2 * kv_width;
  int32_t max_blocks = 0, total_blocks = 0, num_tokens = 0;
  for (const auto& [prefix, fresh] : c.seqs) {
    const int32_t blocks = (prefix + fresh + bs - 1) / bs;
    max_blocks = std::max(max_blocks, blocks);
    total_blocks += blocks;
    num_tokens += fresh;
  }
  total_blocks += 3;  // unused blocks in the cache, too
  std::vector<int32_t> order(total_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const int32_t num_seqs = static_cast<int32_t>(c.seqs.size());
  std::vector<int32_t> tables(static_cast<size_t>(num_seqs) * max_blocks, -1);
  std::vector<int32_t> positions, query_start = {0};
  size_t next = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const auto [prefix, fresh] = c.seqs[s];
    for (int32_t b = 0; b < (prefix + fresh + bs - 1) / bs; ++b) {
      tables[static_cast<size_t>(s) * max_blocks + b] = order[next++];
    }
    for (int32_t i = 0; i < fresh; ++i) positions.push_back(prefix + i);
    query_start.push_back(query_start.back() + fresh);
  }
  const size_t cache = static_cast<size_t>(total_blocks) * bs * kv_width;
  const std::vector<float> kh = Random(rng, cache), vh = Random(rng, cache);
  // What the cache stores (an fp8 cache: e4m3 of x / scale) and what attention reads (times the
  // scale). The GPU's WriteKvCache of the effective rows stores exactly the stored values again.
  auto stored = [kv](std::vector<float> x, float scale) {
    if (kv == DType::kBFloat16) return RoundToBf16(std::move(x));
    if (kv != DType::kFp8E4m3) return x;
    for (float& e : x) e /= scale;
    return RoundToFp8(std::move(x));
  };
  auto effective = [kv](std::vector<float> x, float scale) {
    if (kv == DType::kFp8E4m3) {
      for (float& e : x) e *= scale;
    }
    return x;
  };
  const std::vector<float> k_stored = stored(kh, scales.k), v_stored = stored(vh, scales.v);
  Twin kc = Put(effective(k_stored, scales.k)), vc = Put(effective(v_stored, scales.v));
  DeviceBuffer k16, v16;  // the bf16 or fp8 cache, every slot written by WriteKvCache
  if (narrow_cache) {
    const int32_t rows = total_blocks * bs;
    std::vector<int64_t> slots(rows);
    std::iota(slots.begin(), slots.end(), 0);
    Twin d_slots = Put(slots);
    k16 = DeviceBuffer(gpu_.get(), cache * DTypeBytes(kv));
    v16 = DeviceBuffer(gpu_.get(), cache * DTypeBytes(kv));
    gpu_->WriteKvCache(kc.g<float>(), vc.g<float>(), kv_width, d_slots.g<int64_t>(), rows, kv_width,
                       k16.as<void>(), v16.as<void>(), scales);
    // kc.g holds the rounded rows; writing them to the cache is exact, as from the unrounded ones.
    ASSERT_TRUE(gpu_->Synchronize().ok());
  }
  const std::vector<float> qh =
      Random(rng, static_cast<size_t>(num_tokens) * q_stride, -2.0f, 2.0f);
  Twin q = Put(qh);
  Twin d_pos = Put(positions), d_qs = Put(query_start), d_tables = Put(tables);
  Twin out = Poisoned(static_cast<size_t>(num_tokens) * c.num_heads * hd);
  for (Backend* b : {cpu_.get(), gpu_.get()}) {
    const bool on_cpu = b == cpu_.get();
    AttentionMetadata meta;
    meta.num_tokens = num_tokens;
    meta.num_seqs = num_seqs;
    meta.positions = on_cpu ? d_pos.c<int32_t>() : d_pos.g<int32_t>();
    meta.query_start = on_cpu ? d_qs.c<int32_t>() : d_qs.g<int32_t>();
    meta.block_tables = on_cpu ? d_tables.c<int32_t>() : d_tables.g<int32_t>();
    meta.max_blocks_per_seq = max_blocks;
    meta.block_size = bs;
    const void* k = on_cpu ? kc.c<void>() : narrow_cache ? k16.as<void>() : kc.g<void>();
    const void* v = on_cpu ? vc.c<void>() : narrow_cache ? v16.as<void>() : vc.g<void>();
    b->PagedAttention(on_cpu ? q.c<float>() : q.g<float>(), q_stride, k, v, meta, c.num_heads,
                      c.num_kv_heads, hd, on_cpu ? out.c<float>() : out.g<float>(), scales);
  }
  const std::vector<float> got = FromGpu(out), want = FromCpu(out);
  const bool flash =
      narrow_cache && !batch_invariant && (hd == 64 || hd == 128) && num_tokens > num_seqs;
  if (!flash) {
    EXPECT_TRUE(Close(got, want, 2e-5, 1e-4));
    return;
  }
  std::vector<float> twin(got.size(), kNan);
  FlashPrefillTwin(qh, q_stride, k_stored, v_stored, positions, query_start, tables, max_blocks, bs,
                   c.num_heads, c.num_kv_heads, hd, &twin, scales);
  // Split the rows: the tensor-core kernel's (prefill) and the CUDA-core kernels' (decode).
  const size_t row = static_cast<size_t>(c.num_heads) * hd;
  std::vector<float> got_tc, want_tc, twin_tc, got_cc, want_cc;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const bool tc = query_start[s + 1] - query_start[s] >= kFlashTwinMinQuery;
    for (size_t i = query_start[s] * row; i < query_start[s + 1] * row; ++i) {
      (tc ? got_tc : got_cc).push_back(got[i]);
      (tc ? want_tc : want_cc).push_back(want[i]);
      if (tc) twin_tc.push_back(twin[i]);
    }
  }
  EXPECT_TRUE(Close(got_cc, want_cc, 2e-5, 1e-4));
  if (kOnHostLayer) {
    EXPECT_TRUE(Bitwise(got_tc, twin_tc));
  } else {  // exp2f and the MMA's order: a probability may round to the next bf16 (2^-8 of it)
    EXPECT_TRUE(Close(got_tc, twin_tc, 4e-3, 0.0));
  }
  EXPECT_TRUE(Close(got_tc, want_tc, 1e-2, 0.0));
}

// The tensor-core prefill kernel (bf16 cache, head_dim 64, GQA 2:1, block size 16): a prompt row's
// bits do not depend on how the prompt is chunked (one chunk of 150; 37 + 113; 148 + 2), on the
// other sequences of the step (a decode row before it, another prompt after it) or on the query
// tile it falls in; and a decode row in a mixed step keeps the CUDA-core kernel's bits it has
// alone. Every call also runs with the step's true AttentionMetadata::min_query_len beside 0 (not
// known), with the same bits: a step of prompt chunks only then runs the tensor-core kernel alone
// (counted on the host layer), a step with a decode row both kernels.
TEST_F(CudaKernelTest, TensorCorePrefillRowsAreTheSameHoweverThePromptIsChunkedOrBatched) {
  gpu_ = MakeCudaBackend(DType::kFloat32, /*batch_invariant=*/false, DType::kBFloat16);
  ASSERT_NE(gpu_, nullptr);
  constexpr int32_t kBs = 16, kHeads = 4, kKvHeads = 2, kHd = 64, kLen = 150;
  constexpr int32_t kKvWidth = kKvHeads * kHd, kQStride = kHeads * kHd;
  constexpr int32_t kBlocks = 24;  // A: 10 blocks (150), B: 5 (71), C: 2 (20); shuffled
  std::mt19937 rng(17);
  std::vector<int32_t> order(kBlocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  // Sequence tables (width 10): A, B, C.
  const std::vector<int32_t> table_a(order.begin(), order.begin() + 10);
  std::vector<int32_t> table_b(order.begin() + 10, order.begin() + 15);
  std::vector<int32_t> table_c(order.begin() + 15, order.begin() + 17);
  table_b.resize(10, -1);
  table_c.resize(10, -1);
  const size_t cache = static_cast<size_t>(kBlocks) * kBs * kKvWidth;
  // Every slot written through WriteKvCache (rounded to bf16 there).
  DeviceBuffer k16(gpu_.get(), cache * 2), v16(gpu_.get(), cache * 2);
  {
    std::vector<int64_t> slots(kBlocks * kBs);
    std::iota(slots.begin(), slots.end(), 0);
    Twin d_slots = Put(slots), kh = Put(Random(rng, cache)), vh = Put(Random(rng, cache));
    gpu_->WriteKvCache(kh.g<float>(), vh.g<float>(), kKvWidth, d_slots.g<int64_t>(), kBlocks * kBs,
                       kKvWidth, k16.as<void>(), v16.as<void>());
  }
  // Queries of every position of A (0..149), B's decode row (position 70), C (positions 0..19).
  const std::vector<float> qa = Random(rng, static_cast<size_t>(kLen) * kQStride, -2.0f, 2.0f);
  const std::vector<float> qb = Random(rng, kQStride, -2.0f, 2.0f);
  const std::vector<float> qc = Random(rng, static_cast<size_t>(20) * kQStride, -2.0f, 2.0f);
  struct Part {
    const std::vector<int32_t>* table;
    const std::vector<float>* q;
    int32_t first, count;  // positions first .. first + count - 1 (rows of q at those positions)
  };
  // One PagedAttention call over `parts` (one sequence each); returns each part's output rows.
  auto run = [&](const std::vector<Part>& parts) {
    std::vector<float> q;
    std::vector<int32_t> positions, query_start = {0}, tables;
    for (const Part& p : parts) {
      const size_t pos0 = p.q == &qb ? 0 : static_cast<size_t>(p.first);
      q.insert(q.end(), p.q->begin() + pos0 * kQStride, p.q->begin() + (pos0 + p.count) * kQStride);
      for (int32_t i = 0; i < p.count; ++i) positions.push_back(p.first + i);
      query_start.push_back(query_start.back() + p.count);
      tables.insert(tables.end(), p.table->begin(), p.table->end());
    }
    const int32_t n = query_start.back();
    Twin d_q = Put(q), d_pos = Put(positions), d_qs = Put(query_start), d_t = Put(tables);
    Twin out = Poisoned(static_cast<size_t>(n) * kQStride);
    AttentionMetadata meta;
    meta.num_tokens = n;
    meta.num_seqs = static_cast<int32_t>(parts.size());
    meta.positions = d_pos.g<int32_t>();
    meta.query_start = d_qs.g<int32_t>();
    meta.block_tables = d_t.g<int32_t>();
    meta.max_blocks_per_seq = 10;
    meta.block_size = kBs;
    gpu_->PagedAttention(d_q.g<float>(), kQStride, k16.as<void>(), v16.as<void>(), meta, kHeads,
                         kKvHeads, kHd, out.g<float>());
    const std::vector<float> all = FromGpu(out);
    // Again, told the fewest query tokens of a sequence.
    int32_t min_len = n;
    for (const Part& p : parts) min_len = std::min(min_len, p.count);
    meta.min_query_len = min_len;
    Twin told = Poisoned(static_cast<size_t>(n) * kQStride);
    const int64_t kernels_before = KernelsRun();
    gpu_->PagedAttention(d_q.g<float>(), kQStride, k16.as<void>(), v16.as<void>(), meta, kHeads,
                         kKvHeads, kHd, told.g<float>());
    const int64_t kernels = KernelsRun() - kernels_before;
    EXPECT_TRUE(Bitwise(FromGpu(told), all)) << "min_query_len " << min_len;
    if (kOnHostLayer) {
      const bool prompts = n > meta.num_seqs;  // the tensor-core kernel applies
      EXPECT_EQ(kernels, prompts && min_len == 1 ? 2 : 1) << "min_query_len " << min_len;
    }
    std::vector<std::vector<float>> rows;
    for (size_t i = 0; i < parts.size(); ++i) {
      rows.emplace_back(all.begin() + query_start[i] * kQStride,
                        all.begin() + query_start[i + 1] * kQStride);
    }
    return rows;
  };
  auto slice = [](const std::vector<float>& rows, int32_t from, int32_t to) {
    return std::vector<float>(rows.begin() + static_cast<size_t>(from) * kQStride,
                              rows.begin() + static_cast<size_t>(to) * kQStride);
  };
  const std::vector<float> whole = run({{&table_a, &qa, 0, kLen}})[0];
  EXPECT_TRUE(Bitwise(run({{&table_a, &qa, 0, 37}})[0], slice(whole, 0, 37)));
  EXPECT_TRUE(Bitwise(run({{&table_a, &qa, 37, kLen - 37}})[0], slice(whole, 37, kLen)));
  EXPECT_TRUE(Bitwise(run({{&table_a, &qa, 148, 2}})[0], slice(whole, 148, kLen)));
  const std::vector<float> b_alone = run({{&table_b, &qb, 70, 1}})[0];
  const auto mixed =
      run({{&table_b, &qb, 70, 1}, {&table_a, &qa, 37, kLen - 37}, {&table_c, &qc, 0, 20}});
  EXPECT_TRUE(Bitwise(mixed[0], b_alone));
  EXPECT_TRUE(Bitwise(mixed[1], slice(whole, 37, kLen)));
  EXPECT_TRUE(Bitwise(mixed[2], run({{&table_c, &qc, 0, 20}})[0]));
}

std::vector<std::pair<int32_t, int32_t>> DecodeBatch(int32_t n, int32_t max_ctx, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::pair<int32_t, int32_t>> seqs;
  for (int32_t i = 0; i < n; ++i) seqs.emplace_back(RandInt(rng, 0, max_ctx - 1), 1);
  return seqs;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionTest,
    ::testing::Values(
        AttentionCase{"PrefillOverPrefixBs16Mha", 16, 8, 8, 64, {{0, 17}, {30, 54}, {100, 97}}},
        AttentionCase{
            "DecodePast4096Bs8Gqa2", 8, 8, 4, 128, {{4500, 1}, {17, 1}, {97, 1}, {4096, 1}}},
        AttentionCase{"MixedBs1Gqa4", 1, 8, 2, 64, {{5, 1}, {0, 17}, {40, 3}}},
        // On the host layer: 8 heads instead of 32, and the long chunk has 17 tokens, 2 heads.
        AttentionCase{"DecodeBatch64Gqa4", 16, kOnHostLayer ? 8 : 32, kOnHostLayer ? 2 : 8, 128,
                      DecodeBatch(64, 600, 7)},
        AttentionCase{"LongSingleDecodeHd80", 16, 4, 1, 80, {{5000, 1}}},
        AttentionCase{"LongPrefillChunkBs8",
                      8,
                      kOnHostLayer ? 2 : 4,
                      kOnHostLayer ? 1 : 2,
                      64,
                      {{4200, kOnHostLayer ? 17 : 54}}},
        AttentionCase{"TinyHd8", 8, 2, 2, 8, {{0, 1}, {9, 1}}},
        // Groups of 7 (one masked head of 8) and 16 (two chunks), and a head_dim that is not a
        // multiple of 4 (the generic kernel).
        AttentionCase{"Gqa7Bs16Hd64", 16, 14, 2, 64, {{700, 1}, {0, 9}, {260, 1}}},
        AttentionCase{"Gqa16Bs8Hd128", 8, 16, 1, 128, {{1000, 1}, {33, 4}}},
        AttentionCase{"GenericHd6Bs4", 4, 4, 2, 6, {{600, 1}, {3, 5}}}),
    [](const ::testing::TestParamInfo<AttentionCase>& param_info) {
      return param_info.param.name;
    });

TEST_F(CudaKernelTest, SiluAndMulGatherRowsAndAddBiasMatchTheCpu) {
  std::mt19937 rng(8);
  const int32_t n = 17, hidden = 97;
  Twin gu = Put(Random(rng, static_cast<size_t>(n) * 2 * hidden, -6.0f, 6.0f));
  Twin out = Poisoned(static_cast<size_t>(n) * hidden);
  cpu_->SiluAndMul(gu.c<float>(), n, hidden, out.c<float>());
  gpu_->SiluAndMul(gu.g<float>(), n, hidden, out.g<float>());
  EXPECT_TRUE(Close(FromGpu(out), FromCpu(out), 1e-6, 1e-5));

  std::vector<int32_t> rows = {53, 0, 17, 17, 40};
  Twin x = Put(Random(rng, 54 * 97)), d_rows = Put(rows), g = Poisoned(rows.size() * 97);
  cpu_->GatherRows(x.c<float>(), d_rows.c<int32_t>(), 5, 97, g.c<float>());
  gpu_->GatherRows(x.g<float>(), d_rows.g<int32_t>(), 5, 97, g.g<float>());
  EXPECT_TRUE(Bitwise(FromGpu(g), FromCpu(g)));

  Twin y = Put(Random(rng, 54 * 97)), bias = Put(Random(rng, 97));
  cpu_->AddBias(y.c<float>(), bias.c<float>(), 54, 97);
  gpu_->AddBias(y.g<float>(), bias.g<float>(), 54, 97);
  EXPECT_TRUE(Bitwise(FromGpu(y), FromCpu(y)));
}

// AbsMax (--calculate-kv-scales): the largest |x| of a strided block of rows, exactly the CPU's,
// on awkward sizes: no rows, one element, a partial block of threads, columns narrower than the
// stride (the cells between must not count), the maximum in the last element or negative, NaNs
// skipped.
TEST_F(CudaKernelTest, AbsMaxIsTheCpusOnAwkwardSizes) {
  std::mt19937 rng(12);
  for (const auto& [n, cols, stride] : std::vector<std::tuple<int32_t, int32_t, int32_t>>{
           {0, 5, 5}, {1, 1, 1}, {3, 97, 130}, {37, 257, 300}, {64, 64, 64}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " cols=" + std::to_string(cols) +
                 " stride=" + std::to_string(stride));
    std::vector<float> h = Random(rng, static_cast<size_t>(std::max(n, 1)) * stride, -3.0f, 3.0f);
    for (int32_t t = 0; t < n; ++t) {
      for (int32_t j = cols; j < stride; ++j) h[static_cast<size_t>(t) * stride + j] = 1e6f;
    }
    for (const int variant : {0, 1, 2}) {
      if (n > 0 && variant == 1) h[static_cast<size_t>(n - 1) * stride + cols - 1] = -7.5f;
      if (n > 0 && variant == 2) h[0] = kNan;
      Twin x = Put(h), out = Poisoned(1);
      cpu_->AbsMax(x.c<float>(), n, cols, stride, out.c<float>());
      gpu_->AbsMax(x.g<float>(), n, cols, stride, out.g<float>());
      const std::vector<float> want = FromCpu(out);
      EXPECT_TRUE(Bitwise(FromGpu(out), want)) << "variant " << variant;
      if (n > 0 && variant == 1) {
        EXPECT_EQ(want[0], 7.5f);
      }
      if (n == 0) {
        EXPECT_EQ(want[0], 0.0f);
      }
      EXPECT_FALSE(std::isnan(want[0]));
    }
  }
}

TEST_F(CudaKernelTest, GemmAndLinearMatchTheCpuInFp32AndBf16) {
  std::unique_ptr<Backend> bf16 = MakeCudaBackend(DType::kBFloat16);
  ASSERT_NE(bf16, nullptr);
  std::mt19937 rng(9);
  for (const auto& [m, n, k] : std::vector<std::tuple<int32_t, int32_t, int32_t>>{
           {1, 97, 54}, {17, 54, 97}, {97, 300, 2048}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k));
    const std::vector<float> xh = Random(rng, static_cast<size_t>(m) * k);
    const std::vector<float> wh = Random(rng, static_cast<size_t>(n) * k);
    Twin x = Put(xh), w = Put(wh), y = Poisoned(static_cast<size_t>(m) * n);
    cpu_->Gemm(x.c<float>(), w.c<float>(), m, n, k, y.c<float>());
    gpu_->Gemm(x.g<float>(), w.g<float>(), m, n, k, y.g<float>());
    const std::vector<float> want = FromCpu(y);
    EXPECT_TRUE(Close(FromGpu(y), want, 2e-4, 1e-4));

    // Linear over an uploaded fp32 weight: the same numbers.
    Twin y2 = Poisoned(static_cast<size_t>(m) * n);
    const WeightRef w32 = gpu_->UploadWeight(wh.data(), wh.size());
    ASSERT_NE(w32.data, nullptr);
    gpu_->Linear(x.g<float>(), w32, m, n, k, y2.g<float>());
    EXPECT_TRUE(Close(FromGpu(y2), want, 2e-4, 1e-4));
    gpu_->Deallocate(const_cast<void*>(w32.data));

    // bf16: the CPU on bf16-rounded x and w is exact up to summation order (bf16 products are
    // exact in fp32).
    Twin xr = Put(RoundToBf16(xh)), wr = Put(RoundToBf16(wh)),
         yr = Poisoned(static_cast<size_t>(m) * n);
    cpu_->Gemm(xr.c<float>(), wr.c<float>(), m, n, k, yr.c<float>());
    const WeightRef wb = bf16->UploadWeight(wh.data(), wh.size());
    ASSERT_NE(wb.data, nullptr);
    const std::vector<float> nan(static_cast<size_t>(m) * n, kNan);
    DeviceBuffer dx(bf16.get(), xh.size() * 4), dy(bf16.get(), nan.size() * 4);
    bf16->CopyToDevice(dx.as<void>(), xh.data(), xh.size() * 4);
    bf16->CopyToDevice(dy.as<void>(), nan.data(), nan.size() * 4);
    bf16->Linear(dx.as<float>(), wb, m, n, k, dy.as<float>());
    ASSERT_TRUE(bf16->Synchronize().ok());
    std::vector<float> got(nan.size());
    bf16->CopyToHost(got.data(), dy.as<void>(), got.size() * 4);
    EXPECT_TRUE(Close(got, FromCpu(yr), 2e-4, 1e-4));
    bf16->Deallocate(const_cast<void*>(wb.data));
  }
}

// Issue 19 item 4: RMSNorm, AddRmsNorm, SiLU-and-mul and attention write the bf16 rows the next
// cuBLAS GEMM reads (bf16 weights, more rows than the small-m kernel takes), so the GEMM skips its
// conversion kernel: the same bits as converting a copy of the fp32 output, one kernel fewer
// (counted on the host execution layer). Awkward sizes: 13 rows, widths 72, 97 and 3 x 24.
TEST_F(CudaKernelTest, ProducersWriteTheBf16RowsOfTheNextGemmAndSaveItsConversion) {
  std::unique_ptr<Backend> b = MakeCudaBackend(DType::kBFloat16);
  ASSERT_NE(b, nullptr);
  const int32_t m = 13, dim = 72, hidden = 97, heads = 3, kv_heads = 1, head_dim = 24, n = 40;
  StepLimits limits;
  limits.max_tokens = 16;
  limits.max_seqs = 1;
  limits.max_context = 16;
  limits.num_heads = heads;
  limits.num_kv_heads = kv_heads;
  limits.head_dim = head_dim;
  limits.max_linear_k = hidden;
  limits.vocab = 32;
  ASSERT_TRUE(b->ReserveScratch(limits).ok());
  std::mt19937 rng(19);
  auto put = [&](const std::vector<float>& h) {
    DeviceBuffer d(b.get(), h.size() * 4);
    b->CopyToDevice(d.as<void>(), h.data(), h.size() * 4);
    return d;
  };
  auto get = [&](const float* d, size_t count) {
    std::vector<float> h(count);
    EXPECT_TRUE(b->Synchronize().ok());
    b->CopyToHost(h.data(), d, count * 4);
    return h;
  };
  // Runs `produce` (which writes x [m, k]), then the Linear on x; then the Linear on a copy of x.
  auto check = [&](const char* what, int32_t k, const std::function<void(float*)>& produce) {
    SCOPED_TRACE(what);
    const std::vector<float> wh = Random(rng, static_cast<size_t>(n) * k);
    const WeightRef w = b->UploadWeight(wh.data(), wh.size());
    ASSERT_NE(w.data, nullptr);
    DeviceBuffer x = put(std::vector<float>(static_cast<size_t>(m) * k, kNan));
    DeviceBuffer y = put(std::vector<float>(static_cast<size_t>(m) * n, kNan));
    produce(x.as<float>());
    const int64_t k0 = KernelsRun();
    b->Linear(x.as<float>(), w, m, n, k, y.as<float>());
    const int64_t fused = KernelsRun() - k0;
    const std::vector<float> got = get(y.as<float>(), y.bytes() / 4);
    DeviceBuffer x2 = put(get(x.as<float>(), x.bytes() / 4));
    const int64_t k1 = KernelsRun();
    b->Linear(x2.as<float>(), w, m, n, k, y.as<float>());
    const int64_t converted = KernelsRun() - k1;
    EXPECT_TRUE(Bitwise(got, get(y.as<float>(), y.bytes() / 4)));
    if (kOnHostLayer) {
      EXPECT_EQ(fused + 1, converted);
    }
    b->Deallocate(const_cast<void*>(w.data));
  };
  DeviceBuffer xin = put(Random(rng, static_cast<size_t>(m) * hidden * 2, -3.0f, 3.0f));
  DeviceBuffer norm = put(Random(rng, hidden));
  check("RmsNorm", dim,
        [&](float* out) { b->RmsNorm(xin.as<float>(), norm.as<float>(), m, dim, 1e-5f, out); });
  DeviceBuffer residual = put(Random(rng, static_cast<size_t>(m) * dim));
  check("AddRmsNorm", dim, [&](float* out) {
    b->AddRmsNorm(residual.as<float>(), xin.as<float>(), norm.as<float>(), m, dim, 1e-5f, out);
  });
  check("SiluAndMul", hidden, [&](float* out) { b->SiluAndMul(xin.as<float>(), m, hidden, out); });
  // The gated mid-m kernel (13 rows) writes the down GEMM's rows beside its own bf16 input.
  const std::vector<float> w13h = Random(rng, static_cast<size_t>(2) * hidden * dim);
  const WeightRef w13 = b->UploadWeight(w13h.data(), w13h.size());
  ASSERT_NE(w13.data, nullptr);
  DeviceBuffer gate_up(b.get(), static_cast<size_t>(m) * 2 * hidden * 4);
  check("LinearSiluAndMul", hidden, [&](float* out) {
    b->LinearSiluAndMul(xin.as<float>(), w13, m, hidden, dim, gate_up.as<float>(), out);
  });
  b->Deallocate(const_cast<void*>(w13.data));
  // Attention: one sequence of 13 new tokens in one block of 16 (fp32 cache).
  const int32_t kv_width = kv_heads * head_dim, q_dim = heads * head_dim;
  DeviceBuffer q = put(Random(rng, static_cast<size_t>(m) * q_dim));
  DeviceBuffer kv = put(Random(rng, static_cast<size_t>(m) * 2 * kv_width));
  DeviceBuffer kc(b.get(), 16 * kv_width * 4), vc(b.get(), 16 * kv_width * 4);
  std::vector<int64_t> slots(m);
  std::vector<int32_t> positions(m);
  std::iota(slots.begin(), slots.end(), 0);
  std::iota(positions.begin(), positions.end(), 0);
  DeviceBuffer d_slots(b.get(), m * 8), d_pos(b.get(), m * 4), d_qs(b.get(), 8),
      d_table(b.get(), 4);
  const std::vector<int32_t> qs = {0, m}, table = {0};
  b->CopyToDevice(d_slots.as<void>(), slots.data(), m * 8);
  b->CopyToDevice(d_pos.as<void>(), positions.data(), m * 4);
  b->CopyToDevice(d_qs.as<void>(), qs.data(), 8);
  b->CopyToDevice(d_table.as<void>(), table.data(), 4);
  b->WriteKvCache(kv.as<float>(), kv.as<float>() + kv_width, 2 * kv_width, d_slots.as<int64_t>(), m,
                  kv_width, kc.as<void>(), vc.as<void>());
  AttentionMetadata meta;
  meta.num_tokens = m;
  meta.num_seqs = 1;
  meta.positions = d_pos.as<int32_t>();
  meta.query_start = d_qs.as<int32_t>();
  meta.block_tables = d_table.as<int32_t>();
  meta.max_blocks_per_seq = 1;
  meta.block_size = 16;
  check("PagedAttention", q_dim, [&](float* out) {
    b->PagedAttention(q.as<float>(), q_dim, kc.as<void>(), vc.as<void>(), meta, heads, kv_heads,
                      head_dim, out);
  });
}

// Issue 19 item 4: at decode sizes the feed-forward's gate/up GEMM and SiLU-and-mul are one kernel
// (the gated small-m kernel up to 8 rows, the gated mid-m kernel up to 64), bitwise the unfused
// pair's result, for every m <= 9 and 16, 17, 64, and awkward hidden sizes (one row, a partial warp
// of rows, a partial block) and k (one 256-column step, a partial one). Counted on the host layer:
// above 8 rows each side also converts x to bf16 (no producer wrote it here).
TEST_F(CudaKernelTest, GatedSmallMLinearIsTheLinearThenSiluAndMulInOneKernel) {
  std::unique_ptr<Backend> b = MakeCudaBackend(DType::kBFloat16);
  ASSERT_NE(b, nullptr);
  std::mt19937 rng(23);
  for (const int32_t hidden : {1, 5, 97}) {
    for (const int32_t k : {256, 264}) {
      const std::vector<float> wh = Random(rng, static_cast<size_t>(2 * hidden) * k);
      const WeightRef w13 = b->UploadWeight(wh.data(), wh.size());
      ASSERT_NE(w13.data, nullptr);
      for (const int32_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 64}) {
        SCOPED_TRACE("hidden=" + std::to_string(hidden) + " k=" + std::to_string(k) +
                     " m=" + std::to_string(m));
        const std::vector<float> xh = Random(rng, static_cast<size_t>(m) * k, -2.0f, 2.0f);
        const std::vector<float> nan(static_cast<size_t>(m) * 2 * hidden, kNan);
        DeviceBuffer x(b.get(), xh.size() * 4), gu(b.get(), nan.size() * 4),
            fused(b.get(), nan.size() * 2), plain(b.get(), nan.size() * 2);
        b->CopyToDevice(x.as<void>(), xh.data(), xh.size() * 4);
        for (DeviceBuffer* d : {&fused, &plain}) {
          b->CopyToDevice(d->as<void>(), nan.data(), d->bytes());
        }
        const int64_t k0 = KernelsRun();
        b->LinearSiluAndMul(x.as<float>(), w13, m, hidden, k, gu.as<float>(), fused.as<float>());
        const int64_t k1 = KernelsRun();
        b->Linear(x.as<float>(), w13, m, 2 * hidden, k, gu.as<float>());
        b->SiluAndMul(gu.as<float>(), m, hidden, plain.as<float>());
        const int64_t k2 = KernelsRun();
        ASSERT_TRUE(b->Synchronize().ok());
        std::vector<float> got(static_cast<size_t>(m) * hidden), want(got.size());
        b->CopyToHost(got.data(), fused.as<void>(), got.size() * 4);
        b->CopyToHost(want.data(), plain.as<void>(), want.size() * 4);
        for (float v : want) ASSERT_FALSE(std::isnan(v));
        EXPECT_TRUE(Bitwise(got, want));
        if (kOnHostLayer) {  // against the Linear's and SiLU-and-mul's
          EXPECT_EQ(k1 - k0, m <= 8 ? 1 : 2);
          EXPECT_EQ(k2 - k1, m <= 8 ? 2 : 3);
        }
      }
      b->Deallocate(const_cast<void*>(w13.data));
    }
  }
}

// Decode-sized Linear on bf16 weights (small_m_linear.cu, m <= 8, k % 8 == 0): x stays fp32, so
// the CPU on x and the bf16-rounded w is the reference up to summation order; and a row's result is
// the same bits for every m from 1 to 8 (its order depends on k alone). Awkward n (a partial warp
// of rows, a partial block) and k (a partial 256-column step, one step).
TEST_F(CudaKernelTest, SmallMLinearMatchesTheCpuAndARowIsTheSameForEveryM) {
  std::unique_ptr<Backend> bf16 = MakeCudaBackend(DType::kBFloat16);
  ASSERT_NE(bf16, nullptr);
  std::mt19937 rng(12);
  std::vector<std::pair<int32_t, int32_t>> shapes = {{1, 8}, {7, 24}, {33, 264}, {130, 1032}};
  if (!kOnHostLayer) shapes.push_back({2048, 2048});
  for (const auto& [n, k] : shapes) {
    SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k));
    const std::vector<float> xh = Random(rng, static_cast<size_t>(8) * k);
    const std::vector<float> wh = Random(rng, static_cast<size_t>(n) * k);
    Twin x = Put(xh), wr = Put(RoundToBf16(wh)), want = Poisoned(static_cast<size_t>(8) * n);
    cpu_->Gemm(x.c<float>(), wr.c<float>(), 8, n, k, want.c<float>());
    const std::vector<float> ref = FromCpu(want);
    const WeightRef wb = bf16->UploadWeight(wh.data(), wh.size());
    ASSERT_NE(wb.data, nullptr);
    DeviceBuffer dx(bf16.get(), xh.size() * 4), dy(bf16.get(), ref.size() * 4);
    bf16->CopyToDevice(dx.as<void>(), xh.data(), xh.size() * 4);
    std::vector<float> first_row;
    for (int32_t m = 1; m <= 8; ++m) {
      SCOPED_TRACE("m=" + std::to_string(m));
      ASSERT_TRUE(cuda::SmallMLinearApplies(dx.as<float>(), wb.data, m, k));
      const std::vector<float> nan(static_cast<size_t>(m) * n, kNan);
      bf16->CopyToDevice(dy.as<void>(), nan.data(), nan.size() * 4);
      bf16->Linear(dx.as<float>(), wb, m, n, k, dy.as<float>());
      ASSERT_TRUE(bf16->Synchronize().ok());
      std::vector<float> got(nan.size());
      bf16->CopyToHost(got.data(), dy.as<void>(), got.size() * 4);
      EXPECT_TRUE(
          Close(got, std::vector<float>(ref.begin(), ref.begin() + got.size()), 2e-4, 1e-4));
      const std::vector<float> row(got.begin(), got.begin() + n);
      if (m == 1) {
        first_row = row;
      } else {
        EXPECT_TRUE(Bitwise(row, first_row));
      }
    }
    bf16->Deallocate(const_cast<void*>(wb.data));
  }
}

// Decode-sized Linear of 9 to 64 rows on bf16 weights (mid_m_linear.cu, tensor cores, k % 8 == 0):
// x is rounded to bf16 as for cuBLAS, so the CPU on the bf16-rounded x and w is the reference up
// to summation order (the products are exact); and a row's result is the same bits for every m
// (its order depends on k alone). Awkward n (one row, a partial 16-row tile, several) and k (one
// 8-column vector, a partial 32-column chunk, chunks over all 8 warps and a partial round). With
// CudaBackendOptions::decode_gemm_kernels off the same rows go to cuBLAS (uncounted on the host
// layer): the same reference.
TEST_F(CudaKernelTest, MidMLinearMatchesTheCpuAndARowIsTheSameForEveryM) {
  std::unique_ptr<Backend> bf16 = MakeCudaBackend(DType::kBFloat16);
  ASSERT_NE(bf16, nullptr);
  CudaBackendOptions blas_options;
  blas_options.decode_gemm_kernels = false;
  StatusOr<std::unique_ptr<Backend>> blas = CreateCudaBackend(blas_options);
  ASSERT_TRUE(blas.ok()) << blas.status().ToString();
  std::mt19937 rng(29);
  std::vector<std::pair<int32_t, int32_t>> shapes = {{1, 8}, {7, 24}, {33, 264}, {130, 1032}};
  if (!kOnHostLayer) shapes.push_back({2048, 2048});
  constexpr int32_t kMaxM = cuda::kMidMLinearRows;
  for (const auto& [n, k] : shapes) {
    SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k));
    const std::vector<float> xh = Random(rng, static_cast<size_t>(kMaxM) * k, -2.0f, 2.0f);
    const std::vector<float> wh = Random(rng, static_cast<size_t>(n) * k);
    Twin x = Put(RoundToBf16(xh)), wr = Put(RoundToBf16(wh));
    Twin want = Poisoned(static_cast<size_t>(kMaxM) * n);
    cpu_->Gemm(x.c<float>(), wr.c<float>(), kMaxM, n, k, want.c<float>());
    const std::vector<float> ref = FromCpu(want);
    const WeightRef wb = bf16->UploadWeight(wh.data(), wh.size());
    ASSERT_NE(wb.data, nullptr);
    DeviceBuffer dx(bf16.get(), xh.size() * 4), dy(bf16.get(), ref.size() * 4);
    bf16->CopyToDevice(dx.as<void>(), xh.data(), xh.size() * 4);
    std::vector<float> first_row;
    for (const int32_t m : {9, 16, 17, 40, kMaxM}) {
      SCOPED_TRACE("m=" + std::to_string(m));
      const std::vector<float> nan(static_cast<size_t>(m) * n, kNan);
      bf16->CopyToDevice(dy.as<void>(), nan.data(), nan.size() * 4);
      const int64_t k0 = KernelsRun();
      bf16->Linear(dx.as<float>(), wb, m, n, k, dy.as<float>());
      if (kOnHostLayer) {
        EXPECT_EQ(KernelsRun() - k0, 2) << "the bf16 conversion, then the GEMM";
      }
      ASSERT_TRUE(bf16->Synchronize().ok());
      std::vector<float> got(nan.size());
      bf16->CopyToHost(got.data(), dy.as<void>(), got.size() * 4);
      EXPECT_TRUE(
          Close(got, std::vector<float>(ref.begin(), ref.begin() + got.size()), 2e-4, 1e-4));
      const std::vector<float> row(got.begin(), got.begin() + n);
      if (first_row.empty()) {
        first_row = row;
      } else {
        EXPECT_TRUE(Bitwise(row, first_row));
      }
    }
    bf16->Deallocate(const_cast<void*>(wb.data));
    // cuBLAS, for 16 rows.
    Backend& b = **blas;
    const WeightRef wc = b.UploadWeight(wh.data(), wh.size());
    ASSERT_NE(wc.data, nullptr);
    DeviceBuffer cx(&b, xh.size() * 4), cy(&b, ref.size() * 4);
    b.CopyToDevice(cx.as<void>(), xh.data(), xh.size() * 4);
    const int64_t k0 = KernelsRun();
    b.Linear(cx.as<float>(), wc, 16, n, k, cy.as<float>());
    if (kOnHostLayer) {
      EXPECT_EQ(KernelsRun() - k0, 1) << "the bf16 conversion only";
    }
    ASSERT_TRUE(b.Synchronize().ok());
    std::vector<float> got(static_cast<size_t>(16) * n);
    b.CopyToHost(got.data(), cy.as<void>(), got.size() * 4);
    EXPECT_TRUE(Close(got, std::vector<float>(ref.begin(), ref.begin() + got.size()), 2e-4, 1e-4));
    b.Deallocate(const_cast<void*>(wc.data));
  }
}

// A launch the kernels refuse (here attention with no KV heads) fails the step that made it: the
// next Synchronize reports it once, and the backend serves on (issue 19 item 5; a sticky device
// error would be kDeviceLost instead, and stay).
TEST_F(CudaKernelTest, ARefusedLaunchFailsOneStepAndTheBackendServesOn) {
  std::mt19937 rng(13);
  Twin x = Put(Random(rng, 2 * 64)), out = Poisoned(64);
  AttentionMetadata meta;  // never read: the launch is refused first
  meta.num_tokens = 1;
  meta.num_seqs = 1;
  meta.block_size = 16;
  meta.max_blocks_per_seq = 1;
  gpu_->PagedAttention(x.g<float>(), 64, x.g<void>(), x.g<void>(), meta, 4, /*num_kv_heads=*/0, 16,
                       out.g<float>());
  const Status failed = gpu_->Synchronize();
  EXPECT_EQ(failed.code(), StatusCode::kInternal) << failed.ToString();
  EXPECT_NE(failed.message().find("PagedAttention"), std::string::npos) << failed.ToString();
  EXPECT_TRUE(gpu_->Synchronize().ok()) << "reported once";
  cpu_->SiluAndMul(x.c<float>(), 1, 64, out.c<float>());
  gpu_->SiluAndMul(x.g<float>(), 1, 64, out.g<float>());
  EXPECT_TRUE(Close(FromGpu(out), FromCpu(out), 1e-6, 1e-6));
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaKernelTest, RecordedGraphReplaysOnNewInputs) {
  ASSERT_TRUE(gpu_->SupportsGraphs());
  std::mt19937 rng(10);
  const int32_t m = 17, k = 54, n = 97;
  Twin x = Put(Random(rng, static_cast<size_t>(m) * k)), nw = Put(Random(rng, k));
  Twin w = Put(Random(rng, static_cast<size_t>(n) * k));
  Twin xn = Poisoned(static_cast<size_t>(m) * k), y = Poisoned(static_cast<size_t>(m) * n);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  ASSERT_TRUE(gpu_->BeginGraphCapture().ok());
  gpu_->RmsNorm(x.g<float>(), nw.g<float>(), m, k, 1e-5f, xn.g<float>());
  gpu_->Gemm(xn.g<float>(), w.g<float>(), m, n, k, y.g<float>());
  StatusOr<int32_t> id = gpu_->EndGraphCapture();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  for (int round = 0; round < 2; ++round) {
    const std::vector<float> fresh = Random(rng, static_cast<size_t>(m) * k);
    cpu_->CopyToDevice(x.c<void>(), fresh.data(), fresh.size() * 4);
    gpu_->CopyToDevice(x.g<void>(), fresh.data(), fresh.size() * 4);
    ASSERT_TRUE(gpu_->ReplayGraph(*id).ok());
    cpu_->RmsNorm(x.c<float>(), nw.c<float>(), m, k, 1e-5f, xn.c<float>());
    cpu_->Gemm(xn.c<float>(), w.c<float>(), m, n, k, y.c<float>());
    EXPECT_TRUE(Close(FromGpu(y), FromCpu(y), 2e-4, 1e-4)) << "round " << round;
  }
  gpu_->ClearGraphs();
}

}  // namespace
}  // namespace tinyserve
