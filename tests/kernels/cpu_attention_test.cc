// The CPU backend's PagedAttention, bit for bit against its documented order (cpu_backend.cc),
// written here as plain scalar float loops: per (token, head), score[p] = LaneDot(q, k_p) /
// sqrt(head_dim) with LaneDot's eight lane sums; the max; exp(score - max) summed over p in order;
// each divided by the sum; out[i] = sum over p in order of a[p] * v_p[i], a product then an add,
// from +0. The backend runs vector versions of these loops (AVX2 dots, eight keys at a time;
// values held in AVX-512 or AVX2 registers a group of heads at a time) where the CPU and head_dim
// allow; they must give these bits on every head_dim (vector widths and not), GQA ratio, batch
// size (one head per work item below 8 tokens, all heads per item from 8), block size and thread
// count, and so must the portable loops; every instruction set this CPU has is checked
// (SetCpuAttentionIsaForTesting), on an fp32 cache and on a bf16 one (--kv-cache-dtype bfloat16:
// the same order over the widened elements). WriteKvCache rounds to bf16 as CUDA's
// __float2bfloat16_rn does.
//
// This file must not contract a * b + c into an fma: it is compiled without an FMA target (the
// project passes no -march), so it cannot.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/float_exp.h"

namespace tinyserve {
namespace {

float ScalarLaneDot(const float* a, const float* b, int32_t n) {
  float lane[8] = {};
  const int32_t n8 = n - n % 8;
  for (int32_t i = 0; i < n8; i += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += a[i + l] * b[i + l];
  }
  float sum =
      ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  for (int32_t i = n8; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// One (query row, head) over keys/values k[p], v[p] (head_dim floats each) for p < len.
void ScalarHead(const float* q, const std::vector<const float*>& k,
                const std::vector<const float*>& v, int32_t len, int32_t head_dim, float* out) {
  const float denom = std::sqrt(static_cast<float>(head_dim));
  std::vector<float> a(len);
  float max_score = -std::numeric_limits<float>::infinity();
  for (int32_t p = 0; p < len; ++p) {
    a[p] = ScalarLaneDot(q, k[p], head_dim) / denom;
    max_score = std::max(max_score, a[p]);
  }
  float sum = 0.0f;
  for (int32_t p = 0; p < len; ++p) {
    a[p] = ExpF(a[p] - max_score);
    sum += a[p];
  }
  for (int32_t p = 0; p < len; ++p) a[p] /= sum;
  std::fill(out, out + head_dim, 0.0f);
  for (int32_t p = 0; p < len; ++p) {
    for (int32_t i = 0; i < head_dim; ++i) out[i] += a[p] * v[p][i];
  }
}

struct Case {
  int32_t block_size, num_heads, num_kv_heads, head_dim;
  std::vector<int32_t> context_lens;  // a sequence's tokens end at position len - 1
  int32_t query_len = 1;  // its last min(query_len, len) positions are queries (1: decode)
};

std::string Describe(const Case& c, int threads) {
  return "bs " + std::to_string(c.block_size) + ", heads " + std::to_string(c.num_heads) + "/" +
         std::to_string(c.num_kv_heads) + ", head_dim " + std::to_string(c.head_dim) + ", " +
         std::to_string(c.context_lens.size()) + " sequences of up to " +
         std::to_string(c.query_len) + " queries, " + std::to_string(threads) + " threads";
}

// A paged batch: each sequence's blocks are ids of a shuffled range (drawn from rng), its last
// query_lens[s] positions are the queries, and each query's slot is where its row goes.
struct PagedBatch {
  int32_t max_blocks = 0, total_blocks = 0;
  std::vector<int32_t> tables, positions, starts = {0};
  std::vector<int64_t> slots;
  AttentionMetadata meta;  // points into this batch's vectors

  PagedBatch(const std::vector<int32_t>& context_lens, const std::vector<int32_t>& query_lens,
             int32_t bs, std::mt19937& rng) {
    const int32_t n = static_cast<int32_t>(context_lens.size());
    for (int32_t len : context_lens) {
      max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
      total_blocks += (len + bs - 1) / bs;
    }
    std::vector<int32_t> ids(total_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    tables.assign(static_cast<size_t>(n) * max_blocks, 0);
    for (int32_t s = 0, next = 0; s < n; ++s) {
      int32_t* table = tables.data() + static_cast<size_t>(s) * max_blocks;
      for (int32_t b = 0; b < (context_lens[s] + bs - 1) / bs; ++b) table[b] = ids[next++];
      for (int32_t p = context_lens[s] - query_lens[s]; p < context_lens[s]; ++p) {
        positions.push_back(p);
        slots.push_back(static_cast<int64_t>(table[p / bs]) * bs + p % bs);
      }
      starts.push_back(starts.back() + query_lens[s]);
    }
    meta.num_tokens = starts.back();
    meta.num_seqs = n;
    meta.positions = positions.data();
    meta.query_start = starts.data();
    meta.block_tables = tables.data();
    meta.max_blocks_per_seq = max_blocks;
    meta.block_size = bs;
  }
  PagedBatch(const PagedBatch&) = delete;  // meta points into it
  PagedBatch& operator=(const PagedBatch&) = delete;
};

void ExpectScalarBits(const Case& c, int threads, uint32_t seed, DType kv = DType::kFloat32) {
  SCOPED_TRACE(Describe(c, threads) + (kv == DType::kBFloat16 ? ", bf16 cache" : ", fp32 cache"));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  const int32_t n = static_cast<int32_t>(c.context_lens.size());
  const int32_t hd = c.head_dim, kv_width = c.num_kv_heads * hd;
  const int32_t q_stride = (c.num_heads + 2 * c.num_kv_heads) * hd + 3;  // not a head multiple
  const int32_t bs = c.block_size;
  std::vector<int32_t> query_lens;
  for (int32_t len : c.context_lens) query_lens.push_back(std::min(c.query_len, len));
  const PagedBatch batch(c.context_lens, query_lens, bs, rng);
  const int32_t max_blocks = batch.max_blocks, total_blocks = batch.total_blocks;
  const std::vector<int32_t>&tables = batch.tables, &positions = batch.positions,
        &starts = batch.starts;
  const int32_t tokens = starts.back();
  const size_t cache_floats = static_cast<size_t>(total_blocks) * bs * kv_width;
  std::vector<float> k_cache(cache_floats), v_cache(cache_floats);
  std::vector<float> q(static_cast<size_t>(tokens) * q_stride);
  for (float& x : k_cache) x = dist(rng);
  for (float& x : v_cache) x = dist(rng);
  for (float& x : q) x = dist(rng);
  // A bf16 cache: the backend gets the bits, the reference their widened values.
  std::vector<uint16_t> k_bits(cache_floats), v_bits(cache_floats);
  if (kv == DType::kBFloat16) {
    for (size_t i = 0; i < cache_floats; ++i) {
      k_bits[i] = F32ToBf16(k_cache[i]);
      v_bits[i] = F32ToBf16(v_cache[i]);
      k_cache[i] = Bf16ToF32(k_bits[i]);
      v_cache[i] = Bf16ToF32(v_bits[i]);
    }
  }

  std::vector<float> want(static_cast<size_t>(tokens) * c.num_heads * hd);
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t t = starts[s]; t < starts[s + 1]; ++t) {
      const int32_t len = positions[t] + 1;  // the token sees positions 0 ... its own
      for (int32_t h = 0; h < c.num_heads; ++h) {
        const int32_t kvh = h / (c.num_heads / c.num_kv_heads);
        std::vector<const float*> k, v;
        for (int32_t p = 0; p < len; ++p) {
          const size_t slot =
              static_cast<size_t>(tables[static_cast<size_t>(s) * max_blocks + p / bs]) * bs +
              p % bs;
          k.push_back(&k_cache[slot * kv_width + kvh * hd]);
          v.push_back(&v_cache[slot * kv_width + kvh * hd]);
        }
        ScalarHead(&q[static_cast<size_t>(t) * q_stride + h * hd], k, v, len, hd,
                   &want[(static_cast<size_t>(t) * c.num_heads + h) * hd]);
      }
    }
  }

  std::unique_ptr<Backend> backend = CreateCpuBackend(threads, kv);
  ASSERT_TRUE(backend->is_host());
  ASSERT_EQ(backend->kv_cache_dtype(), kv);
  const bool bf16 = kv == DType::kBFloat16;
  const AttentionMetadata& meta = batch.meta;
  std::vector<float> got(want.size(), std::numeric_limits<float>::quiet_NaN());
  backend->PagedAttention(q.data(), q_stride,
                          bf16 ? static_cast<const void*>(k_bits.data()) : k_cache.data(),
                          bf16 ? static_cast<const void*>(v_bits.data()) : v_cache.data(), meta,
                          c.num_heads, c.num_kv_heads, hd, got.data());
  ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
      << "first difference at element "
      << std::mismatch(
             got.begin(), got.end(), want.begin(),
             [](float a, float b) {
               return std::memcmp(&a, &b, 4) == 0;
             }).first -
             got.begin();
}

TEST(CpuAttentionTest, EqualsTheScalarOrderBitwiseOnEveryHeadDim) {
  for (const DType kv : {DType::kFloat32, DType::kBFloat16}) {
    for (const char* isa : {"avx512", "avx2", "portable"}) {
      if (!SetCpuAttentionIsaForTesting(isa)) continue;  // this CPU cannot run it
      SCOPED_TRACE(isa);
      uint32_t seed = 40;
      for (int32_t head_dim : {8, 16, 20, 48, 64, 80, 128, 136, 256}) {
        for (int threads : {1, 2}) {
          // 3 tokens: one head per work item; 9 tokens: every head of a token in one item (8
          // heads: one group of 8 for head_dim <= 48, else a group and singles).
          ExpectScalarBits({16, 4, 4, head_dim, {1, 17, 40}}, threads, ++seed, kv);
          ExpectScalarBits({4, 8, 2, head_dim, {1, 2, 5, 16, 17, 33, 64, 97, 3}}, threads, ++seed,
                           kv);
          ExpectScalarBits({1, 6, 1, head_dim, {7, 30, 2, 9, 11, 12, 13, 14, 50}}, threads, ++seed,
                           kv);
          // 14 heads: AVX2's groups of 12 heads (head_dim 8) and of 6 (16) and what is left;
          // contexts across its eight-key score blocks. Decode tokens stream the values, a
          // prompt's tokens (query_len > 1) hold them in registers a 32-position run at a time.
          ExpectScalarBits({16, 14, 2, head_dim, {1, 8, 9, 31, 32, 33, 65, 100, 7}}, threads,
                           ++seed, kv);
          ExpectScalarBits({16, 14, 2, head_dim, {1, 40, 100}, 5}, threads, ++seed, kv);
          ExpectScalarBits({4, 4, 4, head_dim, {70, 3}, 9}, threads, ++seed, kv);
        }
      }
    }
  }
  SetCpuAttentionIsaForTesting("best");
}

// RopeWriteKvAndAttend, which a decode step of at least 8 sequences runs fused (each token's
// work item ropes its q and k, writes its k and v row, then attends), gives the bits of
// RopeAndWriteKvCache then PagedAttention: the rotated q and k, every cache element and the
// output; so do the steps it runs unfused (fewer sequences, a prompt chunk among them). Caches of
// fp32 and bf16, both rope styles, 1 and 2 threads, a padding row (slot -1) in a decode step.
TEST(CpuAttentionTest, FusedRopeWriteAndAttendGivesTheBitsOfTheOpsInTurn) {
  struct Step {
    std::vector<int32_t> context_lens;  // after the step (the queries' rows included)
    std::vector<int32_t> query_lens;
    bool padding_row = false;  // the first token's slot is -1
  };
  const std::vector<Step> steps = {
      {{1, 17, 40, 3, 16, 33, 64, 97, 5}, std::vector<int32_t>(9, 1)},  // fused
      {{2, 9, 12, 30, 31, 32, 50, 8, 70, 4, 6, 16}, std::vector<int32_t>(12, 1), true},
      {{1, 17, 40}, {1, 1, 1}},                                          // one head per item
      {{5, 9, 12, 30, 31, 32, 50, 8, 70}, {1, 1, 1, 1, 4, 1, 1, 1, 1}},  // a chunk among them
  };
  struct Shape {
    int32_t block_size, num_heads, num_kv_heads, head_dim;
  };
  uint32_t seed = 70;
  for (const Shape sh : {Shape{16, 8, 2, 64}, Shape{4, 6, 3, 20}}) {
    for (const DType kv : {DType::kFloat32, DType::kBFloat16}) {
      for (const RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNeox}) {
        for (const int threads : {1, 2}) {
          for (const Step& st : steps) {
            SCOPED_TRACE("head_dim " + std::to_string(sh.head_dim) + ", " +
                         std::to_string(st.context_lens.size()) + " sequences, " +
                         (kv == DType::kBFloat16 ? "bf16" : "fp32") + " cache, " +
                         std::to_string(threads) + " threads, style " +
                         std::to_string(static_cast<int>(style)));
            std::mt19937 rng(++seed);
            std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
            const int32_t hd = sh.head_dim, bs = sh.block_size;
            const int32_t kv_width = sh.num_kv_heads * hd;
            const int32_t stride = (sh.num_heads + 2 * sh.num_kv_heads) * hd + 3;
            PagedBatch batch(st.context_lens, st.query_lens, bs, rng);
            if (st.padding_row) batch.slots[0] = -1;
            const std::vector<int32_t>& positions = batch.positions;
            const std::vector<int64_t>& slots = batch.slots;
            const AttentionMetadata& meta = batch.meta;
            const int32_t tokens = meta.num_tokens;
            const size_t elem = kv == DType::kBFloat16 ? 2 : 4;
            const size_t cache_bytes =
                static_cast<size_t>(batch.total_blocks) * bs * kv_width * elem;
            std::vector<uint8_t> k_cache(cache_bytes), v_cache(cache_bytes);
            for (uint8_t& b : k_cache) b = static_cast<uint8_t>(rng() & 0x3f);  // finite values
            for (uint8_t& b : v_cache) b = static_cast<uint8_t>(rng() & 0x3f);
            std::vector<float> qkv(static_cast<size_t>(tokens) * stride);
            for (float& x : qkv) x = dist(rng);
            std::vector<float> inv_freq(hd / 2);
            for (int32_t i = 0; i < hd / 2; ++i)
              inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / hd));
            const size_t out_floats = static_cast<size_t>(tokens) * sh.num_heads * hd;

            std::unique_ptr<Backend> backend = CreateCpuBackend(threads, kv);
            std::vector<float> qkv_a = qkv, out_a(out_floats, std::nanf(""));
            std::vector<uint8_t> k_a = k_cache, v_a = v_cache;
            float* qa = qkv_a.data();
            backend->RopeAndWriteKvCache(
                qa, qa + sh.num_heads * hd, qa + (sh.num_heads + sh.num_kv_heads) * hd, stride,
                positions.data(), slots.data(), tokens, sh.num_heads, sh.num_kv_heads, hd,
                inv_freq.data(), style, k_a.data(), v_a.data());
            backend->PagedAttention(qa, stride, k_a.data(), v_a.data(), meta, sh.num_heads,
                                    sh.num_kv_heads, hd, out_a.data());
            std::vector<float> qkv_b = qkv, out_b(out_floats, std::nanf(""));
            std::vector<uint8_t> k_b = k_cache, v_b = v_cache;
            float* qb = qkv_b.data();
            backend->RopeWriteKvAndAttend(
                qb, qb + sh.num_heads * hd, qb + (sh.num_heads + sh.num_kv_heads) * hd, stride,
                slots.data(), meta, sh.num_heads, sh.num_kv_heads, hd, inv_freq.data(), style,
                k_b.data(), v_b.data(), out_b.data());
            EXPECT_EQ(std::memcmp(qkv_a.data(), qkv_b.data(), qkv.size() * 4), 0) << "q or k";
            EXPECT_EQ(k_a, k_b) << "k cache";
            EXPECT_EQ(v_a, v_b) << "v cache";
            EXPECT_EQ(std::memcmp(out_a.data(), out_b.data(), out_floats * 4), 0) << "output";
            EXPECT_NE(k_a, k_cache) << "nothing was written";
          }
        }
      }
    }
  }
}

// WriteKvCache into a bf16 cache: nearest with ties to even (what the CUDA backend's
// __float2bfloat16_rn gives), signs and infinities kept, a NaN stays a NaN (also one whose payload
// is only in the low 16 bits), slot -1 skipped; the fp32 cache is a copy.
TEST(CpuAttentionTest, WriteKvCacheRoundsToBf16NearestEven) {
  auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  const std::vector<float> values = {
      1.0f,
      bits(0x3f808000u),  // halfway between 0x3f80 and 0x3f81: ties to even, 0x3f80
      bits(0x3f818000u),  // halfway between 0x3f81 and 0x3f82: ties to even, 0x3f82
      bits(0x3f808001u),  // just above halfway: up, 0x3f81
      bits(0x3f807fffu),  // just below halfway: down, 0x3f80
      -2.5f,
      -0.0f,
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      bits(0x7f800001u),  // a NaN with its payload in the low bits only
      bits(0x7f7fffffu),  // FLT_MAX rounds up to infinity, as __float2bfloat16_rn
      1e-40f,             // a subnormal
  };
  const std::vector<uint16_t> want = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x3f80, 0xc020,
                                      0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f80, 0x0001};
  const int32_t width = static_cast<int32_t>(values.size());
  std::unique_ptr<Backend> backend = CreateCpuBackend(1, DType::kBFloat16);
  EXPECT_EQ(backend->KvCacheElementBytes(), 2u);
  std::vector<uint16_t> k(3 * width, 0x1234), v(3 * width, 0x1234);
  std::vector<float> rows(2 * width);
  std::copy(values.begin(), values.end(), rows.begin());
  std::transform(values.begin(), values.end(), rows.begin() + width, [](float x) { return -x; });
  const std::vector<int64_t> slots = {2, -1};
  // Row 0 (values) to slot 2, row 1 (-values) to slot -1: skipped.
  backend->WriteKvCache(rows.data(), rows.data(), width, slots.data(), 2, width, k.data(),
                        v.data());
  for (int32_t i = 0; i < width; ++i) {
    EXPECT_EQ(k[2 * width + i], want[i]) << "element " << i;
    EXPECT_EQ(v[2 * width + i], want[i]) << "element " << i;
    EXPECT_EQ(k[i], 0x1234);  // slots 0 and 1 untouched, slot -1 skipped
    EXPECT_EQ(k[width + i], 0x1234);
  }
  std::unique_ptr<Backend> fp32 = CreateCpuBackend(1);
  EXPECT_EQ(fp32->KvCacheElementBytes(), 4u);
  std::vector<float> kf(width), vf(width);
  const int64_t slot0 = 0;
  fp32->WriteKvCache(values.data(), values.data(), width, &slot0, 1, width, kf.data(), vf.data());
  EXPECT_EQ(std::memcmp(kf.data(), values.data(), 4 * width), 0);
}

}  // namespace
}  // namespace tinyserve
