// Regression tests for bugs the host execution layer found in kernels/cuda, each named after its
// bug. Some only fail in the sanitizer build (UndefinedBehaviorSanitizer), where they were found.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/ops.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu_host/executor.h"

namespace tinyserve {
namespace {

// PagedAttentionKernel formed scratch + offset for its split outputs even with one split, where
// scratch is null: undefined behaviour (UBSan: "applying non-zero offset to null pointer").
TEST(KernelRegressionTest, OneSplitAttentionTakesNoOffsetFromANullScratch) {
  const int32_t hd = 8, heads = 2;
  std::vector<float> q(heads * hd, 0.5f), k(hd, 0.25f), v(hd);
  for (int32_t i = 0; i < hd; ++i) v[i] = static_cast<float>(i);
  cuda::PagedAttentionArgs a;
  a.q = Upload(q);
  a.q_stride = heads * hd;
  a.k_cache = Upload(k);
  a.v_cache = Upload(v);
  a.positions = Upload(std::vector<int32_t>{0});
  a.query_start = Upload(std::vector<int32_t>{0, 1});
  a.block_tables = Upload(std::vector<int32_t>{0});
  a.num_tokens = 1;
  a.num_seqs = 1;
  a.max_blocks_per_seq = 1;
  a.block_size = 1;
  a.num_heads = heads;
  a.num_kv_heads = 1;
  a.head_dim = hd;
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, heads * hd * sizeof(float)), cudaSuccess);
  a.out = out;
  ASSERT_EQ(cuda::LaunchPagedAttention(a, 1, nullptr, nullptr, nullptr), cudaSuccess);
  std::vector<float> got(heads * hd);
  ASSERT_EQ(cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int32_t h = 0; h < heads; ++h) {
    for (int32_t i = 0; i < hd; ++i) EXPECT_EQ(got[h * hd + i], v[i]);  // one key: weight 1
  }
  EXPECT_TRUE(gpu_host::TakeFaults().empty());
  for (const void* p : {static_cast<const void*>(a.q), static_cast<const void*>(a.k_cache),
                        static_cast<const void*>(a.v_cache), static_cast<const void*>(a.positions),
                        static_cast<const void*>(a.query_start),
                        static_cast<const void*>(a.block_tables), static_cast<const void*>(out)}) {
    cudaFree(const_cast<void*>(p));
  }
}

}  // namespace
}  // namespace tinyserve
